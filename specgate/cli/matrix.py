"""`specgate matrix DIR`: the vLLM release matrix table of ci/vllm-matrix.sh's results (specgate.release.matrix)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(commands) -> None:
    p = commands.add_parser(
        "matrix",
        help="the vLLM release matrix table of ci/vllm-matrix.sh's results",
        description="Print release x gate -> pass / fail / skip with the diagnosis, from "
        "the per-release results ci/vllm-matrix.sh writes (default results/matrix).",
    )
    p.add_argument("matrix_dir", metavar="DIR", type=Path, nargs="?", default=Path("results/matrix"))


def main(args: argparse.Namespace) -> int:
    from specgate.release.matrix import markdown

    print(markdown(args.matrix_dir), end="")
    return 0
