"""Functions that run inside vLLM's worker processes, sent there by `collective_rpc`: which model
runner the worker uses, the drafter's own weights, timers around the target's forward pass and the
drafter, and (calibration only) a slower drafter.

Each takes the worker and imports what it needs inside, since it executes in another process.
"""

from __future__ import annotations


def runner_kind(worker) -> str:
    """Runs inside the vLLM worker: which model runner it uses."""
    from specgate import vllm_compat

    return vllm_compat.runner_kind(worker.model_runner)


def drafter_shards(worker) -> dict | None:
    """Runs inside the vLLM worker: the drafter's own tensors on this rank, for memory.drafter_weights
    to count once per distinct tensor-parallel shard. None: no drafter at all (the baseline engine).

        {"tensors": {name: [shard, bytes]},   shard: None = whole on every rank, else the layer's tp_rank
         "shared": [name, ...],               the target's tensors (EAGLE's embedding and LM head): not counted
         "unknown": ["name (why)", ...]}      split over ranks in a way vllm_compat.parameter_shard does not know

    The target's modules are recognised by identity, its tensors by address. On CPU, vLLM moves linear
    weights into oneDNN / packed kernels and leaves an empty parameter behind, so those count by the
    layer's declared shape.
    """
    import torch

    from specgate import vllm_compat

    runner = worker.model_runner
    has_drafter, model = vllm_compat.drafter_model(runner)
    out: dict = {"tensors": {}, "shared": [], "unknown": []}
    if model is None:
        return out if has_drafter else None  # ngram / suffix draft without weights
    target = runner.get_model() if hasattr(runner, "get_model") else runner.model
    target_modules = {id(m) for m in target.modules()}
    target_tensors = {p.data_ptr() for p in target.parameters() if p.numel()}
    seen: set[int] = set()
    for prefix, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            qualified = f"{prefix}.{name}" if prefix else name
            if id(module) in target_modules or (p.numel() and p.data_ptr() in target_tensors):
                out["shared"].append(qualified)
                continue
            shape = declared_weight_shape(module) if p.numel() == 0 and name == "weight" else None
            if shape:
                elem = torch.empty(0, dtype=getattr(module, "params_dtype", p.dtype)).element_size()
                size = shape[0] * shape[1] * elem
            elif p.numel() and p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                size = p.numel() * p.element_size()
            else:
                continue
            try:
                out["tensors"][qualified] = [vllm_compat.parameter_shard(module, p), size]
            except vllm_compat.UnknownSplit as exc:
                out["unknown"].append(f"{qualified} ({exc})")
    return out


def start_step_timer(worker) -> bool:
    """Runs inside the vLLM worker: wrap the runner's target forward pass and its drafting call with
    timers (vllm_compat.step_timers says which, for either model runner). On CUDA each timed call
    synchronizes the device, so only a dedicated trial uses them."""
    import time as _time

    import torch

    from specgate import vllm_compat

    runner = worker.model_runner
    timers = vllm_compat.step_timers(runner)
    if not all(hasattr(owner, attr) for owner, attr, _ in timers.values()):
        return False
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    totals = {f"{name}_{what}": 0.0 for name in timers for what in ("s", "calls")}

    def timed(name, fn, skip):
        def wrapper(*args, **kwargs):
            if skip is not None and skip(kwargs):
                return fn(*args, **kwargs)
            sync()
            start = _time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync()
                totals[f"{name}_s"] += _time.perf_counter() - start
                totals[f"{name}_calls"] += 1

        return wrapper

    # an instance attribute shadows the method; one set before (slow_steps) is put back afterwards
    runner._specgate_timed = [(owner, attr, owner.__dict__.get(attr)) for owner, attr, _ in timers.values()]
    for name, (owner, attr, skip) in timers.items():
        setattr(owner, attr, timed(name, getattr(owner, attr), skip))
    runner._specgate_step_totals = totals
    return True


def slow_drafting(worker, share: float) -> bool:
    """Runs inside the vLLM worker (calibration only): every drafting call also sleeps `share` of the
    mean interval between engine steps, measured as it runs: a proposer that much slower."""
    import time as _time

    from specgate import vllm_compat

    runner = worker.model_runner
    timers = vllm_compat.step_timers(runner)
    if "propose" not in timers:
        return False
    owner, attr, skip = timers["propose"]
    state = {"last": None, "mean": 0.0, "n": 0, "slept": 0.0}
    propose = getattr(owner, attr)

    def slowed(*args, **kwargs):
        now = _time.perf_counter()
        if state["last"] is not None and now - state["last"] < 1.0:  # one step, without our own sleep in it
            state["n"] += 1
            state["mean"] += (now - state["last"] - state["slept"] - state["mean"]) / state["n"]
        state["last"], state["slept"] = now, 0.0
        out = propose(*args, **kwargs)
        if not (skip and skip(kwargs)) and state["n"] >= 8:
            state["slept"] = share * state["mean"]
            _time.sleep(state["slept"])
        return out

    setattr(owner, attr, slowed)
    return True


def stop_step_timer(worker) -> dict[str, float]:
    """Runs inside the vLLM worker: remove the timers, return their totals."""
    runner = worker.model_runner
    for owner, attr, before in runner.__dict__.pop("_specgate_timed", []):
        if before is None:
            owner.__dict__.pop(attr, None)
        else:
            setattr(owner, attr, before)
    return runner.__dict__.pop("_specgate_step_totals", {})


def declared_weight_shape(module) -> tuple[int, int] | None:
    """(out, in) of a vLLM linear layer whose weight was moved into a packed CPU kernel."""
    for out_attr, in_attr in (("output_size_per_partition", "input_size_per_partition"), ("output_size", "input_size")):
        out, inp = getattr(module, out_attr, None), getattr(module, in_attr, None)
        if isinstance(out, int) and isinstance(inp, int):
            return out, inp
    return None


def repair_sampled_verification(worker, on: bool) -> bool:
    """Runs inside the vLLM worker: vllm-project/vllm#55005's repair in (on) or out of V1's rejection
    sampler; True when it is in (only where the probe shows the bug)."""
    from specgate import vllm_compat

    return vllm_compat.repair_expand(on)
