"""Fetch a profile's hub models before the gate runs, so engine boots do not spend their deadline on
downloads (the profile's boot_timeout_s bounds a boot, download included).

    specgate download --profile llama31-8b-h100 [--methods a,b] [--dry-run]
    specgate download --profile llama31-8b-h100 --pin [--write]

For the target and every drafter of the selected methods that is a hub id: the files vLLM loads
(config, tokenizer, safetensors weights; not the `original/` consolidated checkpoints some repos
add), with huggingface_hub's progress bars, resumable (a second run fetches only what is missing).
Before anything is fetched it checks that the cache's disk holds what is still missing, and turns a
gated repository or a missing token into one paragraph saying what to do. A model the profile pins is
fetched at its pinned revision.

`--pin` fetches nothing: it asks the hub for the commit each hub model not yet pinned to one is at now
(model_info(...).sha; a tag or branch the profile names is resolved to its commit) and prints the lines
that pin them (target_revision, each drafter's speculative_config.revision, with trust_remote_code the
code_revision keys too); `--write` sets them in the profile file in place (specgate.profile.edit,
verified by parsing; nothing is written when that cannot be done safely).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.figures.memory import NOT_WEIGHTS
from specgate.models import HUB_ID

ALLOW = ("*.json", "*.safetensors", "*.model", "*.tiktoken", "*.txt", "tokenizer*", "*.jinja")
IGNORE = ("original/*", "*.pth", "consolidated*")
GIB = 1024**3


class DownloadError(SpecgateError):
    """A hub model cannot be fetched: no access, not enough disk, not found."""


@dataclass(frozen=True)
class Plan:
    repo: str
    files: tuple[str, ...]
    total_bytes: int
    missing_bytes: int  # not in the cache yet
    revision: str | None = None  # the profile's pin (None: the default branch)


def hub_models(profile, methods) -> list[str]:
    """The hub ids the profile's target and these methods' drafters (and tokenizers) name."""
    refs = [profile.target, profile.engine_kwargs.get("tokenizer")]
    for m in methods:
        sc = m.speculative_config or {}
        refs += [sc.get("model"), sc.get("tokenizer"), m.engine_kwargs.get("model"), m.engine_kwargs.get("tokenizer")]
    return list(
        dict.fromkeys(r for r in refs if r and not r.startswith("zoo:") and HUB_ID.match(r) and not Path(r).exists())
    )


def hub_revisions(profile, methods) -> list[tuple[str, str | None]]:
    """(hub id, the revision the profile pins it to, or None) of every model these engines load, once each."""
    from specgate.store.revisions import models_of

    found = [(m.ref, m.pin) for method in [profile.baseline, *methods] for m in models_of(profile, method) if m.hub]
    return list(dict.fromkeys(found))


def offered(methods) -> list:
    """The methods the installed vLLM offers (its SpeculativeMethod, as the gate checks before a
    boot); each one it does not (mlp_speculator and medusa on 0.33) is said and left out, so its
    checkpoint is not fetched for a method the gate will skip."""
    from specgate import vllm_compat

    names = vllm_compat.speculative_methods()
    kept = []
    for m in methods:
        if names and m.kind not in names:
            print(
                f"download: skipping method '{m.name}' ({m.draft_model or 'no drafter'}): {vllm_compat.release()} "
                f"does not offer speculative_config.method = {m.kind!r}, so the gate skips it too; it offers: "
                f"{', '.join(names)}"
            )
        else:
            kept.append(m)
    return kept


def _wanted(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in ALLOW) and not any(fnmatch.fnmatch(name, p) for p in IGNORE)


def plan(repo: str, api, cache_dir: Path | None = None, revision: str | None = None) -> Plan:
    """What `repo` (at `revision`) needs on disk and how much of it is not cached yet."""
    info = model_info(api, repo, revision, files_metadata=True)
    files = [s for s in info.siblings if _wanted(s.rfilename)]
    if not any(s.rfilename.endswith(".safetensors") for s in files):  # an older repo: PyTorch .bin (else .pt) weights
        for ext in (".bin", ".pt"):  # as vLLM picks them (memory.WEIGHT_FILES), without training leftovers
            found = [
                s
                for s in info.siblings
                if s.rfilename.endswith(ext)
                and Path(s.rfilename).name not in NOT_WEIGHTS
                and not any(fnmatch.fnmatch(s.rfilename, p) for p in IGNORE)
            ]
            if found:
                files += found
                break
    total = sum(s.size or 0 for s in files)
    missing = sum(s.size or 0 for s in files if not _cached(repo, s.rfilename, info.sha, cache_dir))
    return Plan(repo, tuple(s.rfilename for s in files), total, missing, revision)


def model_info(api, repo: str, revision: str | None = None, files_metadata: bool = False):
    """The hub's record of `repo` at `revision`; a gated or missing repository or no route to the hub is a
    DownloadError saying what to do."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return api.model_info(repo, revision=revision, files_metadata=files_metadata)
    except GatedRepoError:
        raise DownloadError(
            f"hub model {repo} is gated and this account has not been granted access: accept its licence at "
            f"https://huggingface.co/{repo} with the account whose token is in HF_TOKEN (for Llama: Meta's licence "
            "form), then rerun `specgate download`."
        ) from None
    except RevisionNotFoundError:
        raise DownloadError(
            f"hub model {repo} has no revision {revision!r} (the profile's pin); check the commit, tag or branch the "
            "profile names for it, or pin its current commit with `specgate download --profile NAME --pin`."
        ) from None
    except RepositoryNotFoundError:
        token = "HF_TOKEN is not set" if not os.environ.get("HF_TOKEN") else "the token in HF_TOKEN cannot see it"
        raise DownloadError(
            f"hub model {repo} was not found or is private ({token}); check the id in the profile, or give a read "
            "token of an account with access in HF_TOKEN."
        ) from None
    except Exception as exc:  # no route to the hub: a closed network, a proxy, offline mode
        from huggingface_hub import constants

        raise DownloadError(
            f"could not read the file list of hub model {repo} from {constants.ENDPOINT} ({type(exc).__name__}: "
            f"{exc}); check this machine's network and proxy (HTTPS_PROXY) or HF_ENDPOINT. A runner without access to "
            "the hub can use a model cache filled elsewhere: copy its HF_HOME and run the gate with HF_HUB_OFFLINE=1."
        ) from None


def _cached(repo: str, filename: str, revision: str | None, cache_dir: Path | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, filename, cache_dir=cache_dir, revision=revision)
    return isinstance(found, str)


def cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def check_disk(plans: list[Plan], where: Path, margin: float = 1.05) -> None:
    """Enough free space on the cache's disk for what is still missing (with 5 % to spare)."""
    need = sum(p.missing_bytes for p in plans)
    probe = where
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need * margin > free:
        biggest = ", ".join(
            f"{p.repo} {p.missing_bytes / GIB:.1f} GiB" for p in sorted(plans, key=lambda p: -p.missing_bytes)[:4]
        )
        raise DownloadError(
            f"the model cache {where} needs {need / GIB:.1f} GiB more ({biggest}) but its disk has {free / GIB:.1f} "
            "GiB free; free space there or point HF_HOME at a larger disk."
        )


def fetch(profile, methods, api, dry_run: bool = False) -> int:
    """Fetch the hub models the selected methods' engines load (the profile's pinned revisions), after
    checking access and the cache's disk; `dry_run` stops after the check."""
    from huggingface_hub import snapshot_download

    methods = offered(methods)
    wanted = hub_revisions(profile, methods)
    if not wanted:
        print(f"download: profile {profile.name} names no hub model (nothing to fetch)")
        return 0
    where = cache_dir()
    plans = [plan(repo, api, where, revision) for repo, revision in wanted]
    for p in plans:
        print(
            f"download: {p.repo}{f' at {p.revision}' if p.revision else ''}: {len(p.files)} files, "
            f"{p.total_bytes / GIB:.2f} GiB, {p.missing_bytes / GIB:.2f} GiB not cached"
        )
    check_disk(plans, where)
    if dry_run:
        return 0
    for p in plans:
        if p.missing_bytes:
            snapshot_download(
                p.repo, revision=p.revision, allow_patterns=list(p.files), token=os.environ.get("HF_TOKEN") or None
            )
    print(f"download: {len(plans)} models ready in {where}")
    return 0


def pins(profile, methods, api) -> list:
    """The pins (profile.edit.Pin) of every hub model these engines load that is not pinned to a commit: the
    commit the hub says its pinned tag or branch (or its default branch) is at now, for its revision key and,
    with trust_remote_code, its code key."""
    from specgate.models import is_commit
    from specgate.profile.edit import Pin
    from specgate.store.revisions import models_of

    out: dict[str, Pin] = {}
    asked: dict[tuple, str] = {}  # (repo, revision) -> commit: two methods loading one model ask the hub once
    for method in [profile.baseline, *methods]:
        for m in models_of(profile, method):
            todo = [k for k, v in ((m.key, m.pin), (m.code_key, m.code_pin)) if k and k not in out and not is_commit(v)]
            if not m.hub or not todo:
                continue
            if (m.ref, m.pin) not in asked:
                asked[m.ref, m.pin] = model_info(api, m.ref, m.pin).sha
            commit = asked[m.ref, m.pin]
            for key in todo:
                out[key] = Pin(key, commit, f"{m.ref} at {m.pin or 'its default branch'} on {_today()}")
    return list(out.values())


def pin(profile, methods, api, write: bool) -> int:
    """Print the pins of the profile's unpinned hub models, and with `write` set them in its file."""
    from specgate.profile.edit import CannotEdit, apply, paste_lines
    from specgate.store.baselines import write_text_atomic

    found = pins(profile, methods, api)
    if not found:
        print(f"pin: every hub model of profile {profile.name} is pinned to a commit ({profile.path}); nothing to do")
        return 0
    for p in found:
        print(f"pin: {p.key} = {p.value}  ({p.note})")
    if write:
        try:
            text = apply(profile.path.read_text(encoding="utf-8"), found)
        except CannotEdit as exc:
            print(f"pin: not written: {profile.path} cannot be edited safely ({exc}); paste these lines:")
        else:
            write_text_atomic(profile.path, text)
            print(
                f"pin: written to {profile.path}; review and commit it, then `specgate download --profile "
                f"{profile.name}` fetches these revisions"
            )
            return 0
    else:
        print(f"pin: paste into {profile.path} (or rerun with --write), then commit it:")
    print("\n".join(paste_lines(found)))
    return 0 if not write else 1


def _today() -> str:
    import datetime as _dt

    return _dt.date.today().isoformat()
