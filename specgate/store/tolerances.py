"""Tolerances calibrated on one machine: `baselines/<profile>/<hardware>.<machine>.tolerance.toml`, beside
the baselines they judge, written by `specgate calibrate` and committed with them. A run on that machine
holds the profile's methods to them (over the profile's `[tolerance]`); other machines keep the
profile's own. A `<hardware>.tolerance.toml` written before machine identities were recorded holds for
every machine of that hardware name that has none of its own (plugin.options.calibrated).

    [tolerance]                     profile-wide (speedup_rtol, geomean_rtol, ...)
    [equivalence]                   the tie-aware rule's logprob_margin and max_forgiven_share
    [methods.<name>.tolerance]      one method's (draft_cost_tol, speedup_rtol, ...)

Also here: what a calibration's A/A runs say a tolerance must be (`suggest_*`): the smallest value
with no false alarm on them, plus a margin, rounded up; for the tie-aware rule, a margin of twice the
largest honest gap (bf16 gaps come in steps of the logits' rounding) and room for one more near-tie
than the worst A/A run forgave.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import fields, replace
from pathlib import Path

from specgate.errors import ProfileError

SUFFIX = ".tolerance.toml"
EQUIVALENCE = ("logprob_margin", "max_forgiven_share")  # the tie-aware rule's calibrated settings


def path_for(baselines_path: Path) -> Path:
    """baselines/<profile>/<hardware>[.<machine>].json -> baselines/<profile>/<hardware>[.<machine>].tolerance.toml"""
    return Path(baselines_path).with_suffix(SUFFIX)


def apply(profile, path: Path):
    """`profile` with the tolerances of `path` over its own (unchanged when there is no such file)."""
    from specgate.profile import Tolerance

    path = Path(path)
    if not path.is_file():
        return profile
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(
            f"calibrated tolerances {path}: not valid TOML ({exc}); rerun `specgate calibrate` or "
            "restore the file from git."
        ) from None
    allowed = {f.name for f in fields(Tolerance)}

    def values(table, where: str) -> dict[str, float]:
        if not isinstance(table, dict):
            raise ProfileError(f"calibrated tolerances {path}: '{where}' must be a table.")
        bad = sorted(
            k
            for k, v in table.items()
            if k not in allowed or isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0
        )
        if bad:
            raise ProfileError(
                f"calibrated tolerances {path}: '{where}' holds {', '.join(bad)}, which are not tolerances "
                f"(allowed: {', '.join(sorted(allowed))}) or not numbers >= 0."
            )
        return {k: float(v) for k, v in table.items()}

    unknown = sorted(set(data) - {"tolerance", "methods", "equivalence"})
    if unknown:
        raise ProfileError(
            f"calibrated tolerances {path}: unknown tables {', '.join(unknown)}; it holds [tolerance], "
            "[equivalence] and [methods.<name>.tolerance] only."
        )
    tolerance = replace(profile.tolerance, **values(data.get("tolerance", {}), "tolerance"))
    rule = data.get("equivalence", {})
    if set(rule) - set(EQUIVALENCE) or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in rule.values()
    ):
        raise ProfileError(
            f"calibrated tolerances {path}: [equivalence] holds {', '.join(sorted(rule))}; it may set "
            f"{', '.join(EQUIVALENCE)} (numbers >= 0)."
        )
    equivalence = replace(profile.equivalence, **{k: float(v) for k, v in rule.items()})
    methods = dict(profile.methods)
    for name, table in data.get("methods", {}).items():
        if name not in methods:
            continue  # a method the profile no longer has: nothing to hold to it
        own = values(table.get("tolerance", {}) if isinstance(table, dict) else table, f"methods.{name}.tolerance")
        methods[name] = replace(methods[name], tolerance={**methods[name].tolerance, **own})
    return replace(profile, tolerance=tolerance, equivalence=equivalence, methods=methods, tolerance_file=str(path))


def render(
    header: list[str],
    profile_wide: dict[str, float],
    per_method: dict[str, dict[str, float]],
    equivalence: dict[str, float] | None = None,
) -> str:
    """The file's text: comment lines, then the tables."""
    lines = [f"# {h}" for h in header]
    if profile_wide:
        lines += ["", "[tolerance]", *(f"{k} = {v:g}" for k, v in sorted(profile_wide.items()))]
    if equivalence:
        lines += ["", "[equivalence]", *(f"{k} = {v:g}" for k, v in sorted(equivalence.items()))]
    for name, values in per_method.items():
        if values:
            lines += ["", f"[methods.{name}.tolerance]", *(f"{k} = {v:g}" for k, v in sorted(values.items()))]
    return "\n".join(lines) + "\n"


def round_up(x: float, step: float) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 10)


def suggest_relative(worst_drop: float, margin: float = 0.02, step: float = 0.01, floor: float = 0.02) -> float:
    """A relative tolerance (speedup_rtol, geomean_rtol) from the largest relative shortfall an A/A run
    showed against its stored value (0 when none fell short): that plus `margin`, rounded up."""
    return max(floor, round_up(max(0.0, worst_drop) + margin, step))


def suggest_absolute(worst_drift: float, factor: float = 1.5, step: float = 0.005, floor: float = 0.005) -> float:
    """An absolute ceiling over a stored value (draft_cost_tol) from the largest A/A drift above it:
    `factor` times that, rounded up."""
    return max(floor, round_up(max(0.0, worst_drift) * factor, step))


def suggest_margin(gaps: list[float], floor: float = 0.0) -> float:
    """logprob_margin from the honest divergences' gaps (nats) in A/A runs: twice the largest (bf16 gaps
    are whole steps of the logits' rounding; one more step of headroom), at least `floor`."""
    return max(floor, 2 * max(gaps, default=0.0))


def suggest_forgiven_share(most_forgiven: int, prompts: int) -> float:
    """max_forgiven_share from the most near-ties one A/A run's comparison held (of `prompts`): room for one more."""
    return round_up((most_forgiven + 1) / prompts, 0.01) if prompts else 0.0
