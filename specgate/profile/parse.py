"""A profile's TOML, parsed: every key read as spec.py declares it (known, typed, bounded, defaulted),
then the rules between keys and the method matrix (a draft-length sweep is one method per k). No file
is read and nothing is resolved: model references, prompt files and the methods vLLM offers are
resolve.py's, so this step is the same on every machine."""

from __future__ import annotations

from pathlib import Path

from specgate.gates import CANARY_GATES
from specgate.models import revision_problem
from specgate.profile.schema import Checker, did_you_mean
from specgate.profile.spec import BASELINE, LOSSY_REJECTION, Method, Profile

# vLLM's revision arguments of an engine (EngineArgs) and the top-level key that pins each for the target.
ENGINE_REVISIONS = {
    "revision": "target_revision",
    "code_revision": "code_revision",
    "tokenizer_revision": "tokenizer_revision",
}
# What each names the revision of, in a method's own engine.kwargs: its own target, or its own tokenizer.
REVISION_OF = {"revision": "model", "code_revision": "model", "tokenizer_revision": "tokenizer"}


def parse(data: dict, path: Path, cls: type[Profile] = Profile) -> Profile:
    """The profile `data` (a parsed TOML document) describes, as written; ProfileError naming `path` and
    the key at fault. `cls` is the Profile (sub)class whose declared settings are read."""
    check = Checker(path)
    values = check.read(cls, data, "")
    for key, top in ENGINE_REVISIONS.items():
        if key in values.get("engine_kwargs", {}):
            raise check.fail(
                f"engine.kwargs.{key}",
                f'pins the target: write it as the top-level key {top} = "..." (where specgate reads, records and '
                "`specgate download --pin` writes the pins).",
            )
    values["methods"] = methods(check, values["methods"])
    for name, issue in values.get("known_issues", {}).items():
        if unknown := [m for m in issue.methods if m not in values["methods"]]:
            raise check.fail(
                f"known_issues.{name}.methods",
                f"names {', '.join(map(repr, unknown))}, not a method of this profile"
                f"{did_you_mean(unknown[0], values['methods'])}.",
            )
    profile = cls(path=Path(path), **values)
    if profile.max_tokens >= profile.max_model_len:
        raise check.fail(
            "max_tokens", f"({profile.max_tokens}) must be smaller than max_model_len ({profile.max_model_len})."
        )
    speedup = profile.speedup
    if speedup.max_tokens >= profile.max_model_len:
        raise check.fail(
            "speedup.max_tokens",
            f"({speedup.max_tokens}) must be smaller than max_model_len ({profile.max_model_len}).",
        )
    if speedup.max_trials and speedup.max_trials < speedup.trials:
        raise check.fail(
            "speedup.max_trials", f"({speedup.max_trials}) must be 0 (off) or >= trials ({speedup.trials})."
        )
    if profile.equivalence.mode == "tie-aware" and "max_forgiven_share" not in data.get("equivalence", {}):
        raise check.fail(
            "equivalence.max_forgiven_share",
            "is required with mode = 'tie-aware': the share of a run's prompts "
            "whose divergence the rule may forgive as a near-tie, set from A/A runs (docs/gpu-runners.md, "
            "'bf16 equivalence'); without it a verifier bug whose divergences each look small would pass.",
        )
    return profile


def methods(check: Checker, data: dict) -> dict[str, Method]:
    """The method matrix, in file order: each [methods.NAME] table read as Method declares it, its
    speculative_config's method and draft length checked; a list of draft lengths is a sweep, one
    method per value (NAME@kK). A canary must name another method that is no canary of that gate."""
    if not data:
        raise check.fail("methods", "must define at least one method.")
    out: dict[str, Method] = {}
    for name, spec in data.items():
        prefix = f"methods.{name}."
        if name == BASELINE:
            raise check.fail(f"methods.{name}", "is reserved: the baseline (no speculation) engine is always run.")
        if not isinstance(spec, dict):
            raise check.fail(f"methods.{name}", "must be a table.")
        values = check.read(Method, spec, prefix)
        sc = values.pop("speculative_config", None) or {}
        if not sc:
            raise check.fail(prefix + "speculative_config", "is required.")
        kind = sc.get("method")
        if not isinstance(kind, str) or not kind:
            raise check.fail(prefix + "speculative_config.method", f"must name a speculative method, got {kind!r}.")
        k = sc.get("num_speculative_tokens")
        ks = k if isinstance(k, list) else [k]  # a list: a draft-length sweep, one engine per value
        if (
            not ks
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in ks)
            or len(set(ks)) != len(ks)
        ):
            raise check.fail(
                prefix + "speculative_config.num_speculative_tokens",
                f"must be an integer >= 1 or a list of distinct ones (a sweep), got {k!r}.",
            )
        values["lossy"] = _lossy(check, prefix, sc, spec.get("lossy"))
        _revisions(check, prefix, sc, values.get("engine_kwargs", {}))
        swept = len(ks) > 1 or isinstance(k, list)
        for one_k in ks:
            variant = f"{name}@k{one_k}" if swept else name
            own = {key: dict(v) if isinstance(v, dict) else v for key, v in values.items()}  # each variant its own
            out[variant] = Method(
                variant, {**sc, "num_speculative_tokens": one_k}, sweep_of=name if swept else "", **own
            )
    for name, m in out.items():
        check.table(m.canary_of, {g: str for g in CANARY_GATES}, f"methods.{name}.canary_of.")
        for gate, ref in m.canary_of.items():
            if ref not in out or ref == name or gate in out[ref].canary_of:
                raise check.fail(
                    f"methods.{name}.canary_of.{gate}",
                    f"must name another method of this profile that is not itself a {gate} canary"
                    f"{did_you_mean(ref, out)}; got {ref!r}.",
                )
    return out


def _lossy(check: Checker, prefix: str, sc: dict, lossy: dict | None) -> dict[str, float]:
    """A lossy verification must be declared with the share of prompts that may diverge."""
    method = sc.get("rejection_sample_method")
    if lossy is None:
        if method in LOSSY_REJECTION:
            raise check.fail(
                prefix + "speculative_config.rejection_sample_method",
                f"is {method!r}, a lossy verification (it may accept drafts the target would reject), so this "
                "method cannot be held to greedy equivalence: declare `lossy = { max_diverged_share = 0.2 }` (the "
                "share of prompts whose greedy output may differ) and it is judged on that instead.",
            )
        return {}
    check.table(lossy, {"max_diverged_share": float}, prefix + "lossy.")
    share = lossy.get("max_diverged_share")
    if share is None or not 0 <= share <= 1:
        raise check.fail(prefix + "lossy.max_diverged_share", f"must be a share in [0, 1], got {share!r}.")
    return {"max_diverged_share": float(share)}


def _revisions(check: Checker, prefix: str, sc: dict, kwargs: dict) -> None:
    """A drafter's pins (speculative_config.revision / code_revision, vLLM's own keys) are revisions; in a
    method's engine.kwargs a revision pins the model or tokenizer that table names itself (the profile's
    target is pinned by the top-level keys)."""
    for key in ("revision", "code_revision"):
        if key in sc:
            if "model" not in sc:
                raise check.fail(
                    f"{prefix}speculative_config.{key}",
                    "pins a drafter, but this speculative_config names no model (an MTP layer lives in the target: "
                    "the top-level target_revision / code_revision pin it).",
                )
            check.bounded(f"{prefix}speculative_config.{key}", sc[key], revision_problem)
    for key, names in REVISION_OF.items():
        if key in kwargs:
            if names not in kwargs:
                raise check.fail(
                    f"{prefix}engine.kwargs.{key}",
                    f"pins this method's own {names}, but its engine.kwargs names none; the profile's target is "
                    f"pinned by the top-level key {ENGINE_REVISIONS[key]}.",
                )
            check.bounded(f"{prefix}engine.kwargs.{key}", kwargs[key], revision_problem)
