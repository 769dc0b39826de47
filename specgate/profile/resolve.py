"""A parsed profile resolved on this machine: its file read, model references (`zoo:NAME`, a local
path, a hub id) and prompt files found, the methods checked against what the installed vLLM offers,
plants against the known ones, the structured scenario's files read.

    load_profile(path, root)     read + parse + resolve: the Profile a run uses
    find_profile(name, root)     `cpu-tiny` -> fixtures/profiles/cpu-tiny.toml

Every problem is a ProfileError naming the file and the key, as parsing's are.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from specgate.errors import ProfileError
from specgate.profile.parse import parse
from specgate.profile.prompt_sources import prompt_file, resolve_sources
from specgate.profile.schema import Checker, did_you_mean
from specgate.profile.spec import MODEL_FREE_METHODS, Method, Profile
from specgate.profile.tables import Scenarios
from specgate.settings import NAMES, Spelling

MODEL_KEYS = ("model", "tokenizer")  # speculative_config (and engine kwargs) keys that name a model


def load_profile(path: Path | str, root: Path | str) -> Profile:
    """Read, parse and resolve one profile file. Relative paths are resolved against `root`."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"profile {path}: file not found.") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"profile {path}: not valid TOML ({exc}); fix the syntax and rerun.") from None
    return resolve(parse(data, path), Path(root))


def resolve(profile: Profile, root: Path) -> Profile:
    """`profile` (as parsed) with its references resolved against `root` and this machine."""
    check = Checker(profile.path)
    sources = resolve_sources(check, profile.prompt_sources, root)
    target = model_ref(check, "target", profile.target, root)
    methods = {name: _method(check, m, root) for name, m in profile.methods.items()}
    speedup = replace(profile.speedup, prompts=resolve_sources(check, profile.speedup.prompts, root))
    return replace(
        profile,
        path=profile.path.resolve(),
        target=target,
        prompt_sources=sources,
        prompts=tuple(src.path for src in sources),
        methods=methods,
        speedup=speedup,
        scenarios=_scenarios(check, profile.scenarios, root),
    )


def _method(check: Checker, method: Method, root: Path) -> Method:
    """A method with its models resolved, once its method is one this vLLM offers (a drafter model
    named where the method needs one) and its plant known."""
    prefix = f"methods.{method.sweep_of or method.name}."
    sc = dict(method.speculative_config)
    kind = sc["method"]
    _check_offered(check, prefix + "speculative_config.method", kind)
    if kind not in MODEL_FREE_METHODS and "model" not in sc and not kind.endswith("mtp"):
        raise check.fail(prefix + "speculative_config.model", f"is required for method {kind!r}.")
    for key in MODEL_KEYS:
        if key in sc:
            sc[key] = model_ref(check, prefix + "speculative_config." + key, sc[key], root)
    kwargs = dict(method.engine_kwargs)
    for key in MODEL_KEYS:
        if key in kwargs:
            kwargs[key] = model_ref(check, prefix + "engine.kwargs." + key, kwargs[key], root)
    if method.plant:
        _check_plants(check, prefix + "plant", method.plant)
    return replace(method, speculative_config=sc, engine_kwargs=kwargs)


def _check_plants(check: Checker, key: str, plant: str) -> None:
    """Each of a method's plants known, with the strength it takes; at most one with a share in the front end."""
    from specgate.profile.plants import FRONTEND, PLANTS, STRENGTHS, names, split

    for part in names(plant):
        try:
            name, strength = split(part)
        except ValueError:
            raise check.fail(key, f"{part!r}: a strength is a number (name:0.2).") from None
        if name not in PLANTS:
            raise check.fail(key, f"is not a known plant{did_you_mean(name, PLANTS)}; known: {', '.join(PLANTS)}.")
        rule = STRENGTHS.get(name)
        if (strength is not None) != (rule is not None) or (rule is not None and not rule[0](strength)):
            raise check.fail(
                key,
                f"{part!r}: "
                + "; ".join(f"{known} takes {says}" for known, (_, says) in STRENGTHS.items())
                + ", the other plants none.",
            )
    if len([n for n in names(plant) if split(n)[0] in FRONTEND]) > 1:
        raise check.fail(key, f"{plant!r}: one plant with a share in the front end a method ({', '.join(FRONTEND)}).")


def _check_offered(check: Checker, key: str, kind: str) -> None:
    """A method the installed vLLM does not offer but one it does resembles is a typo: an error.
    Otherwise it may be a method this release dropped or a later one adds; the run skips it then,
    naming the release and the methods it offers (host.EngineHost)."""
    from specgate.vllm_compat import release, speculative_methods

    offered = speculative_methods()
    if offered and kind not in offered and (hint := did_you_mean(kind, offered)):
        raise check.fail(key, f"is {kind!r}, which {release()} does not offer{hint}; it offers: {', '.join(offered)}.")


def model_ref(check: Checker, key: str, ref: Any, root: Path) -> str:
    """Accept `zoo:NAME`, an existing local path, or a hub id `org/name`; return the normalised ref."""
    from specgate.models import HUB_ID, ZOO_MODELS  # light: no torch import

    if not isinstance(ref, str) or not ref:
        raise check.fail(key, f"must be a model reference string, got {ref!r}.")
    if ref.startswith("zoo:"):
        name = ref[4:]
        if name not in ZOO_MODELS:
            raise check.fail(
                key,
                f"names embedded model {name!r}{did_you_mean(name, ZOO_MODELS)}; the zoo has: {', '.join(ZOO_MODELS)}.",
            )
        return ref
    local = Path(ref).expanduser()
    if not local.is_absolute():
        local = root / local
    looks_local = ref.startswith(("/", ".", "~")) or local.exists() or not HUB_ID.match(ref)
    if looks_local:
        if not local.exists():
            raise check.fail(
                key,
                f"names model path {ref!r}, but {local} does not exist; give an existing directory, "
                "a hub id like 'org/name', or 'zoo:NAME' for an embedded model.",
            )
        return str(local.resolve())
    return ref  # hub id: resolved by vLLM on the user's runner


def _scenarios(check: Checker, scenarios: Scenarios, root: Path) -> Scenarios:
    """The structured scenario's files: its schema (which must parse as JSON) and its prompts."""
    structured = scenarios.structured
    if structured is None:
        return scenarios
    schema = prompt_file(check, "scenarios.structured.schema", str(structured.schema), root)
    try:
        json.loads(schema.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise check.fail(
            "scenarios.structured.schema", f"names {schema}, which is not a JSON schema file ({exc})."
        ) from None
    prompts = prompt_file(check, "scenarios.structured.prompts", str(structured.prompts), root)
    return replace(scenarios, structured=replace(structured, prompts=prompts, schema=schema))


def profile_dir(root: Path) -> Path:
    return Path(root) / "fixtures" / "profiles"


def find_profile(name_or_path: str, root: Path, say: Spelling = NAMES) -> Path:
    """`cpu-tiny` -> fixtures/profiles/cpu-tiny.toml; a path is taken as is. A profile not found is a
    ProfileError naming the setting as the caller's user spells it (`say`)."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or "/" in name_or_path:
        if not candidate.is_absolute():
            candidate = Path(root) / candidate
        if not candidate.is_file():
            raise ProfileError(f"{say('profile')}: profile file {candidate} does not exist.")
        return candidate
    available = sorted(p.stem for p in profile_dir(root).glob("*.toml"))
    path = profile_dir(root) / f"{name_or_path}.toml"
    if not path.is_file():
        raise ProfileError(
            f"{say('profile')}: no profile named {name_or_path!r} in {profile_dir(root)}"
            f"{did_you_mean(name_or_path, available)}; available: {', '.join(available)}."
        )
    return path
