"""What Model Runner V2's sampler needs to run in Triton's interpreter on a CPU (TRITON_INTERPRET=1).

Three changes, all applied only in the V2 worker process (specgate.sampler.v2_child), never on a GPU:

1. CUDA's math library (`libdevice`, `tldevice` in the kernels' module) does not exist in the
   interpreter. Which of its functions a release's kernels call is read from their source
   (`libdevice_calls`); `apply` stands in for each with `LIBDEVICE` and refuses, naming the line,
   a call it has nothing for. Every supported release calls one, `log1p`, once: the resample kernel's
   residual for draft distributions, `target_log_probs + tldevice.log1p(-ratio)` under `ratio < 1.0`
   (rejection_sampler_utils.py's `_resample_kernel`), i.e. log(p - q) = log p + log(1 - q/p).
   `LIBDEVICE.log1p(x)` is `tl.log(1 + x)`: for x in (-1, 0] it differs from log1p only by the
   float32 rounding of 1 + x (at most ~6e-8 in log space, when q/p is tiny), a relative error below
   1e-7 on the residual's probabilities. No kernel source is edited.

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

import re
import types
from pathlib import Path

import triton
import triton.language as tl

from specgate.vllm_compat.interpreted import set_fast  # shared with V2 engines run in the interpreter


@triton.jit
def _log1p(x):
    return tl.log(1.0 + x)


LIBDEVICE = types.SimpleNamespace(log1p=_log1p)


def libdevice_calls(text: str) -> list[tuple[int, str, str]]:
    """(line number, function, the line) of every `tldevice.<function>(...)` call in a kernel module's source."""
    return [
        (number, m.group(1), line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        for m in re.finditer(r"\btldevice\.(\w+)\(", line)
    ]


def unsupported(text: str, where: str = "") -> list[str]:
    """The libdevice calls in `text` LIBDEVICE has no stand-in for, one line each ('' where: no file name)."""
    return [
        f"{where}:{number} calls libdevice.{name} ({line}), which Triton's interpreter lacks and "
        "specgate.sampler.interpreter_shim.LIBDEVICE does not stand in for"
        for number, name, line in libdevice_calls(text)
        if not hasattr(LIBDEVICE, name)
    ]


def apply(rejection_sampler_utils: types.ModuleType, *, fast: bool = True) -> None:
    """Point the sampler module's `tldevice` at the shim (RuntimeError when its kernels call a libdevice
    function the shim lacks); with `fast`, cache the interpreter's patching."""
    path = Path(rejection_sampler_utils.__file__)
    if missing := unsupported(path.read_text(encoding="utf-8"), str(path)):
        raise RuntimeError("; ".join(missing))
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
