"""What Model Runner V2's sampler needs to run in Triton's interpreter on a CPU (TRITON_INTERPRET=1).

Three changes, all applied only in the V2 worker process (specgate.sampler.v2_child), never on a GPU:

1. `libdevice.log1p` (the one CUDA math-library call the sampler makes) does not exist in the
   interpreter. Its only use is the resample kernel's residual for draft distributions,
   `target_log_probs + tldevice.log1p(-ratio)` (rejection_sampler_utils.py 0.33:946, 0.32:876),
   i.e. log(p - q) = log p + log(1 - q/p). `tldevice` in that module is pointed at `LIBDEVICE`, whose
   `log1p(x)` is `tl.log(1 + x)`: for x in (-1, 0] it differs from log1p only by the float32
   rounding of 1 + x (at most ~6e-8 in log space, when q/p is tiny), a relative error below 1e-7 on
   the residual's probabilities. No kernel source is edited.

2. V2 keeps per-request sampling state in UVA buffers: pinned host memory the GPU reads directly
   (buffer_utils.py 0.33:32, `UvaBuffer`). Without a device there is no pinned memory, and the
   host memory is what the kernels read anyway: `host_buffers` makes `UvaBuffer` a plain CPU tensor
   whose "device view" is itself.

3. Speed, no semantics. Every call of a `@triton.jit` helper re-patches `triton.language` through
   `inspect.getmembers` (interpreter.py `_patch_builtin`), about half of the interpreter's time in
   the sampler. `set_fast` (specgate.vllm_compat.interpreted) remembers each module's builtins once and
   patches the same ones; tests/property/test_v2_interpreter.py checks that outputs are identical with and
   without it.
"""

from __future__ import annotations

import types

import triton
import triton.language as tl

from specgate.vllm_compat.interpreted import set_fast  # shared with V2 engines run in the interpreter

# The kernel line the log1p shim stands in for, per release (file: rejection_sampler_utils.py).
LOG1P_LINES = {"0.32.0": 876, "0.33.0": 946}


@triton.jit
def _log1p(x):
    return tl.log(1.0 + x)


LIBDEVICE = types.SimpleNamespace(log1p=_log1p)


def apply(rejection_sampler_utils: types.ModuleType, *, fast: bool = True) -> None:
    """Point the sampler module's `tldevice` at the shim; with `fast`, cache the interpreter's patching."""
    rejection_sampler_utils.tldevice = LIBDEVICE
    set_fast(fast)


def host_buffers(buffer_utils: types.ModuleType) -> None:
    """`UvaBuffer` as host memory seen by the (interpreted) kernels: its device view is its CPU tensor."""

    class HostBuffer:
        def __init__(self, size, dtype):
            import torch

            self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
            self.np = self.cpu.numpy()

        def uva(self, n=None):
            return self.cpu[:n] if n is not None else self.cpu

    buffer_utils.UvaBuffer = HostBuffer
    buffer_utils.is_uva_available = lambda: True
