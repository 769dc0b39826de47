"""Every vLLM internal specgate touches, listed (`INTERNALS`) with what specgate needs of it and the
releases it was checked on; lookup.py checks each (tests/contract/ runs it over every entry).

    base.py      Internal (one entry's fields) and the releases entries are checked on
    frontend.py  the engine's front end, requests, outputs, metrics, the scheduler's step
    v1.py        Model Runner V1: runner, sampler, what the plants patch there
    v2.py        Model Runner V2: runner, speculator, rejection sampler
    v2_engine.py Model Runner V2 under an engine: timers, drafter, per-request counters, KV blocks, suffix, on a CPU
    v2_plants.py what the plants patch and read in Model Runner V2
    layers.py    the layer types the drafter's weights are counted by
"""

from specgate.vllm_compat.internals.base import ALL, CPU_RELEASES, CUDA_RELEASES, V2, V2_ONLY, V2_SAMPLER, Internal
from specgate.vllm_compat.internals.frontend import FRONTEND
from specgate.vllm_compat.internals.layers import LAYERS
from specgate.vllm_compat.internals.v1 import V1
from specgate.vllm_compat.internals.v2 import V2_RUNNER
from specgate.vllm_compat.internals.v2_engine import V2_ENGINE
from specgate.vllm_compat.internals.v2_plants import V2_PLANTS

INTERNALS = FRONTEND + V1 + V2_RUNNER + V2_ENGINE + V2_PLANTS + LAYERS
# The spec-decode counters (vllm/v1/spec_decode/metrics.py), read by name from get_metrics_snapshot()
# and from a server's /metrics: specgate.figures.acceptance.COUNTER_NAMES and PER_POSITION.
METRICS_SOURCE = "vllm/v1/spec_decode/metrics.py"

__all__ = [
    "ALL",
    "CPU_RELEASES",
    "CUDA_RELEASES",
    "INTERNALS",
    "METRICS_SOURCE",
    "V2",
    "V2_ONLY",
    "V2_SAMPLER",
    "Internal",
]
