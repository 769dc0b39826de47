"""The rejection samplers under test, without an engine: what the property tests (tests/property) drive.

    reference          rejection sampling written from the papers (the oracle)
    v1                 vLLM's V1 sampler (vllm.v1.sample.rejection_sampler) in this process
    v2                 Model Runner V2's sampler (CUDA's default), driven in a child process ...
    v2_child           ... the child: a Python whose `vllm` is CUDA vLLM's Python sources
    interpreter_shim   what V2's Triton kernels need to run in Triton's interpreter on a CPU
    cuda_sources       CUDA vLLM's Python sources unpacked next to the checkout (.venvs/vllm-cuda-src/)

Neighbours: below it only vllm_compat (vLLM's internals by release) and the vocabulary; nothing in the
gate imports it (the gate's engines sample inside vLLM).
"""
