"""The rejection samplers under test, without an engine: what the property tests (tests/property) drive.

Decision (issue 68): this harness ships as a public module, because the property suite that users run on
their own runners before an upgrade imports it, and a team with a patched vLLM or a verification rule of its
own writes its own properties against the same reference and adapters; its names are pinned in __all__
(tests/unit/test_public_surface.py) and follow vLLM's samplers only through the adapters.

    reference          rejection sampling written from the papers (the oracle)
    v1                 vLLM's V1 sampler (vllm.v1.sample.rejection_sampler) in this process
    v2                 Model Runner V2's sampler (CUDA's default), driven in a child process ...
    v2_child           ... the child: a Python whose `vllm` is CUDA vLLM's Python sources
    interpreter_shim   what V2's Triton kernels need to run in Triton's interpreter on a CPU
    cuda_sources       CUDA vLLM's Python sources unpacked next to the checkout (.venvs/vllm-cuda-src/)

The public names (importing this module imports numpy, not torch or vLLM):

    SpecRequest                 one request's drafts, draft and target logits, temperature and seed
    RejectionSampler            what a sampler under test is: sample(requests, seed) -> emitted rows
    ReferenceSampler, BlockReferenceSampler, SyntheticReferenceSampler, FlyReferenceSampler
                                the oracle of each verification rule (standard, block, synthetic, lossy fly)
    emitted_tokens, target_distribution, top_k_entropy
                                reading a row, the target's distribution at a temperature, the fly rule's entropy
    vllm_rejection_sample       vLLM's V1 sampler called as the engine calls it (needs vLLM or torch + triton)
    V2Sampler, V2Rule, V2Unavailable
                                Model Runner V2's sampler through CUDA vLLM's sources, and why it cannot run here

Neighbours: below it only vllm_compat (vLLM's internals by release) and the vocabulary; nothing in the
gate imports it (the gate's engines sample inside vLLM).
"""

from specgate.sampler.reference import (
    BlockReferenceSampler,
    FlyReferenceSampler,
    ReferenceSampler,
    RejectionSampler,
    SpecRequest,
    SyntheticReferenceSampler,
    emitted_tokens,
    target_distribution,
    top_k_entropy,
)
from specgate.sampler.v1 import vllm_rejection_sample

_V2 = ("V2Rule", "V2Sampler", "V2Unavailable")  # imported when first asked for: `python -m
# specgate.sampler.cuda_sources` (the setup's) must not find its module imported by this package already


def __getattr__(name: str):
    if name in _V2:
        from specgate.sampler import v2

        return getattr(v2, name)
    raise AttributeError(f"module 'specgate.sampler' has no attribute {name!r}")


__all__ = [
    "BlockReferenceSampler",
    "FlyReferenceSampler",
    "ReferenceSampler",
    "RejectionSampler",
    "SpecRequest",
    "SyntheticReferenceSampler",
    "V2Rule",
    "V2Sampler",
    "V2Unavailable",
    "emitted_tokens",
    "target_distribution",
    "top_k_entropy",
    "vllm_rejection_sample",
]
