"""`specgate download --profile P`: a profile's hub models fetched ahead of the gate, or pinned with --pin
(specgate.release.download)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specgate.cli import add_root, spelling
from specgate.release import download


def main(args: argparse.Namespace) -> int:
    from huggingface_hub import HfApi

    from specgate.profile import find_profile, load_profile

    root = Path(args.root).resolve()
    profile = load_profile(find_profile(args.profile, root, spelling()), root)
    if getattr(args, "write", False) and not args.pin:
        raise download.DownloadError("specgate download: --write writes the pins of --pin; give both (--pin --write).")
    api = HfApi(token=os.environ.get("HF_TOKEN") or None)
    methods = profile.select(args.methods.split(",") if args.methods else None, spelling())
    if getattr(args, "pin", False):
        return download.pin(profile, methods, api, args.write)
    return download.fetch(profile, methods, api, args.dry_run)


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
    p.add_argument(
        "--pin",
        action="store_true",
        help="fetch nothing: print the commit each hub model not pinned to one is at now, as the profile's lines",
    )
    p.add_argument("--write", action="store_true", help="with --pin: set the pins in the profile file in place")
    add_root(p)
