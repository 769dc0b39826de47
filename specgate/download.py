"""Fetch a profile's hub models before the gate runs, so engine boots do not spend their deadline on
downloads (the profile's boot_timeout_s bounds a boot, download included).

    specgate download --profile llama31-8b-h100 [--methods a,b] [--dry-run]

For the target and every drafter of the selected methods that is a hub id: the files vLLM loads
(config, tokenizer, safetensors weights; not the `original/` consolidated checkpoints some repos
add), with huggingface_hub's progress bars, resumable (a second run fetches only what is missing).
Before anything is fetched it checks that the cache's disk holds what is still missing, and turns a
gated repository or a missing token into one paragraph saying what to do.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.memory import NOT_WEIGHTS
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


def hub_models(profile, methods) -> list[str]:
    """The hub ids the profile's target and these methods' drafters (and tokenizers) name."""
    refs = [profile.target, profile.engine_kwargs.get("tokenizer")]
    for m in methods:
        sc = m.speculative_config or {}
        refs += [sc.get("model"), sc.get("tokenizer"), m.engine_kwargs.get("model"), m.engine_kwargs.get("tokenizer")]
    return list(
        dict.fromkeys(r for r in refs if r and not r.startswith("zoo:") and HUB_ID.match(r) and not Path(r).exists())
    )


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


def plan(repo: str, api, cache_dir: Path | None = None) -> Plan:
    """What `repo` needs on disk and how much of it is not cached yet."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        info = api.model_info(repo, files_metadata=True)
    except GatedRepoError:
        raise DownloadError(
            f"hub model {repo} is gated and this account has not been granted access: accept its licence at "
            f"https://huggingface.co/{repo} with the account whose token is in HF_TOKEN (for Llama: Meta's licence "
            "form), then rerun `specgate download`."
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
    return Plan(repo, tuple(s.rfilename for s in files), total, missing)


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


def main(args) -> int:
    from huggingface_hub import HfApi, snapshot_download

    from specgate.profile import find_profile, load_profile

    root = Path(args.root).resolve()
    profile = load_profile(find_profile(args.profile, root), root)
    methods = offered(profile.select(args.methods.split(",") if args.methods else None))
    repos = hub_models(profile, methods)
    if not repos:
        print(f"download: profile {profile.name} names no hub model (nothing to fetch)")
        return 0
    api = HfApi(token=os.environ.get("HF_TOKEN") or None)
    where = cache_dir()
    plans = [plan(repo, api, where) for repo in repos]
    for p in plans:
        print(
            f"download: {p.repo}: {len(p.files)} files, {p.total_bytes / GIB:.2f} GiB, {p.missing_bytes / GIB:.2f} GiB "
            "not cached"
        )
    check_disk(plans, where)
    if args.dry_run:
        return 0
    for p in plans:
        if p.missing_bytes:
            snapshot_download(p.repo, allow_patterns=list(p.files), token=os.environ.get("HF_TOKEN") or None)
    print(f"download: {len(plans)} models ready in {where}")
    return 0


def add_parser(commands) -> None:
    p = commands.add_parser(
        "download",
        help="fetch a profile's hub models ahead of the gate",
        description="Download the target and drafters of a profile into the Hugging Face cache "
        "(resumable; checks free disk and access first).",
    )
    p.add_argument("--profile", required=True, metavar="NAME|PATH")
    p.add_argument("--methods", default="", metavar="A,B", help="only these methods' drafters (default: all)")
    p.add_argument("--dry-run", action="store_true", help="check access and disk, print sizes, fetch nothing")
    p.add_argument("--root", default=".", type=Path, metavar="DIR", help="the specgate checkout (default: .)")
