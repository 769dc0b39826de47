"""Which models an engine loads and at which revision, without the network.

    models_of(profile, method)      the target, a tokenizer of its own and the drafter a method's engine loads,
                                    each with the profile key that pins it (and, with trust_remote_code, its code)
    resolved(models, root)          {role: {"ref", "revision"}}, what a baseline records per method: a hub
                                    model's commit from the Hugging Face cache (its snapshots/<commit>/), a zoo or
                                    local directory's content hash ("sha256:..."), None when neither is known
    unpinned(profile, methods)      hub models whose revision is not a commit (the summary names them)
    held(profile, methods, root)    ref -> revision of every model these engines load (what a bisection holds
                                    fixed); not_held(held, loaded) names those a run loaded at another revision
    refusal(profile, methods, strict)   why a gate run must not start: remote code not pinned to a commit on a
                                    cuda run (unless allow_unpinned_code), or in a strict run any hub model
                                    not pinned to a commit

A revision is resolved from what is on this disk: the commit a pin names, else the snapshot the cache's
refs point at (where vLLM, or `specgate download`, put it), looked up with local_files_only. Hashes and
commits are computed once per process (a zoo hash costs ~30 ms; a local directory over HASH_LIMIT is
fingerprinted by its file names and sizes instead of read).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from specgate.errors import ProfileError
from specgate.models import is_commit, is_hub, zoo_dir
from specgate.settings import NAMES, Spelling

HASH_LIMIT = 512 * 1024**2  # bytes: a local directory larger than this is fingerprinted, not read
PIN_COMMAND = "specgate download --profile {name} --pin"
_HASHES: dict[str, str] = {}
_COMMITS: dict[tuple[str, str | None], str] = {}


@dataclass(frozen=True)
class Model:
    """One model an engine loads, as the profile names it, and the keys that pin it."""

    role: str  # target, tokenizer, drafter
    ref: str  # zoo:NAME, an absolute path, or a hub id org/name
    pin: str | None  # the revision the profile gives it
    key: str  # the profile key that holds that revision
    code_key: str = ""  # with trust_remote_code: the key that pins its code ("" when no remote code runs)
    code_pin: str | None = None

    @property
    def hub(self) -> bool:
        return is_hub(self.ref)


def models_of(profile, method) -> list[Model]:
    """The models `method`'s engine loads (the baseline engine: `profile.baseline`): its target (the
    profile's, or the method's own engine.kwargs.model), a tokenizer named apart from it, its drafter.
    An MTP layer lives in the target: no drafter of its own."""
    own = method.engine_kwargs
    trust = bool({**profile.engine_kwargs, **own}.get("trust_remote_code"))
    base = method.sweep_of or method.name
    at = f"methods.{base}.engine.kwargs."
    if "model" in own:
        pins = (own.get("revision"), at + "revision", at + "code_revision", own.get("code_revision"))
    else:
        pins = (profile.target_revision, "target_revision", "code_revision", profile.code_revision)
    target = Model("target", own.get("model", profile.target), pins[0], pins[1], pins[2] if trust else "", pins[3])
    out = [target]
    if "tokenizer" in own:
        tokenizer = Model("tokenizer", own["tokenizer"], own.get("tokenizer_revision"), at + "tokenizer_revision")
    elif tok := profile.engine_kwargs.get("tokenizer"):
        tokenizer = Model("tokenizer", tok, profile.tokenizer_revision, "tokenizer_revision")
    else:
        tokenizer = None
    if tokenizer is not None and tokenizer.ref != target.ref:
        out.append(tokenizer)
    sc = method.speculative_config or {}
    if sc.get("model"):
        at = f"methods.{base}.speculative_config."
        out.append(
            Model(
                "drafter",
                sc["model"],
                sc.get("revision"),
                at + "revision",
                at + "code_revision" if trust else "",
                sc.get("code_revision"),
            )
        )
    return out


def resolved(models: list[Model], root: Path) -> dict[str, dict[str, str | None]]:
    """What a baseline records of the models: role -> {"ref", "revision"}."""
    return {m.role: {"ref": m.ref, "revision": revision_of(m, root)} for m in models}


def revision_of(model: Model, root: Path) -> str | None:
    if model.hub:
        return hub_commit(model.ref, model.pin)
    path = zoo_dir(root) / model.ref[4:] if model.ref.startswith("zoo:") else Path(model.ref)
    return content_hash(path) if path.exists() else None


def content_hash(path: Path) -> str:
    """'sha256:<hex>' over the directory's file names (relative, sorted) and bytes, links followed and
    hidden files left out; 'files:<hex>' over names and sizes alone past HASH_LIMIT. Once per process."""
    path = Path(path).resolve()
    if (key := str(path)) in _HASHES:
        return _HASHES[key]
    files = (
        sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if path.is_dir()
        else [path]
    )
    sizes = [f.stat().st_size for f in files]
    digest = hashlib.sha256()
    whole = sum(sizes) <= HASH_LIMIT
    for f, size in zip(files, sizes):
        name = f.relative_to(path).as_posix() if path.is_dir() else f.name
        digest.update(f"{name}\0{size}\0".encode())
        if whole:
            with f.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
    _HASHES[key] = ("sha256:" if whole else "files:") + digest.hexdigest()
    return _HASHES[key]


def hub_commit(repo: str, revision: str | None = None) -> str | None:
    """The commit of `repo` at `revision` (None: the default branch) in the local Hugging Face cache,
    never the network; a pinned commit that is not cached yet is itself; None when unknown."""
    if (repo, revision) in _COMMITS:
        return _COMMITS[(repo, revision)]
    try:
        from huggingface_hub import snapshot_download

        found = Path(
            snapshot_download(repo, revision=revision, local_files_only=True, allow_patterns=["config.json"])
        ).name
    except Exception:  # not cached, offline cache without refs, no huggingface_hub
        found = ""
    commit = found if is_commit(found) else revision if is_commit(revision) else None
    if commit:
        _COMMITS[(repo, revision)] = commit
    return commit


def short(revision: str | None) -> str:
    """'0e9e39f' / 'sha256:1a2b3c4' / 'unknown'."""
    if not revision:
        return "unknown"
    kind, _, value = revision.rpartition(":")
    return f"{kind}:{value[:7]}" if kind else revision[:7]


def held(profile, methods, root: Path) -> dict[str, str | None]:
    """ref -> resolved revision of every model these engines (the baseline's included) load, once each: what
    a bisection over vLLM releases holds fixed (None: a hub model not in the cache yet)."""
    out: dict[str, str | None] = {}
    for method in _engines(profile, methods):
        for m in models_of(profile, method):
            out.setdefault(m.ref, revision_of(m, root))
    return out


def not_held(held_models: dict[str, str | None], loaded: dict[str, dict[str, dict]]) -> list[str]:
    """'org/x 1111111 -> 2222222' for each model a run loaded (method -> role -> {"ref", "revision"}) at
    another revision than the one held fixed; a revision unknown on either side is not a move."""
    out = []
    for roles in loaded.values():
        for m in roles.values():
            was, now = held_models.get(m.get("ref")), m.get("revision")
            line = f"{m.get('ref')} {short(was)} -> {short(now)}"
            if was and now and was != now and line not in out:
                out.append(line)
    return out


def _engines(profile, methods) -> list:
    return [profile.baseline, *methods]


def unpinned(profile, methods) -> list[Model]:
    """Hub models of these engines (the baseline's included) whose revision is not a commit, once each."""
    seen, out = set(), []
    for method in _engines(profile, methods):
        for m in models_of(profile, method):
            if m.hub and not is_commit(m.pin) and (m.ref, m.key) not in seen:
                seen.add((m.ref, m.key))
                out.append(m)
    return out


def describe_unpinned(models: list[Model]) -> str:
    """'org/x (target_revision not set), org/y (methods.e.speculative_config.revision 'main', a branch or ...)'."""
    return ", ".join(
        f"{m.ref} ({m.key} " + (f"{m.pin!r}, a branch or tag that can move)" if m.pin else "not set)") for m in models
    )


def unpinned_line(profile, methods, say: Spelling = NAMES) -> str:
    """The summary's line naming the hub models not pinned to a commit ('' when every one is); `say`: how the
    run's user spells its settings."""
    if not (models := unpinned(profile, methods)):
        return ""
    return (
        f"hub models not pinned to a commit: {describe_unpinned(models)}; a new upload to the hub changes what this "
        f"gate measures: `{PIN_COMMAND.format(name=profile.name)}` on a machine that reaches the hub prints the "
        f"pins ({say('strict')} refuses such a run)"
    )


def refusal(profile, methods, strict: bool = False, say: Spelling = NAMES) -> ProfileError | None:
    """Why this gate run must not start, as one paragraph naming the file, the models and the keys: a
    cuda run loading remote code (trust_remote_code) whose code_revision is not a commit, unless the
    profile says allow_unpinned_code = true; in a strict run, any hub model not pinned to a commit (the
    setting spelled as the caller's user spells it: `say`)."""
    pin = PIN_COMMAND.format(name=profile.name)
    if profile.hardware == "cuda" and not profile.allow_unpinned_code:
        code, seen = [], set()
        for method in _engines(profile, methods):
            for m in models_of(profile, method):
                if m.hub and m.code_key and not is_commit(m.code_pin) and m.code_key not in seen:
                    seen.add(m.code_key)
                    code.append(m)
        if code:
            named = ", ".join(
                f"{m.ref} (key '{m.code_key}' " + (f"is {m.code_pin!r}, a branch or tag)" if m.code_pin else "not set)")
                for m in code
            )
            return ProfileError(
                f"profile {profile.path}: trust_remote_code = true makes vLLM run Python code from the hub repository "
                f"of {named}, not pinned to a commit, so a new upload there would run on this GPU runner unreviewed. "
                f"Run `{pin}` once on the runner (it prints the code_revision lines to paste, or writes them with "
                "--write) and commit the profile, or set `allow_unpinned_code = true` at the top of the profile to "
                "accept running whatever the repository holds."
            )
    if strict and (models := unpinned(profile, methods)):
        return ProfileError(
            f"profile {profile.path}: {say('strict')} refuses hub models not pinned to a commit: "
            f"{describe_unpinned(models)}. Run `{pin}` once on a machine that reaches the hub (it prints the lines "
            f"to paste, or writes them with --write) and commit the profile, or run without {say('strict')}."
        )
    return None
