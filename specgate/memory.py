"""What speculation costs in memory: readings, and analytic figures from checkpoints and configs.

Static overhead = the drafter's own parameters x bytes per element (zero for ngram / suffix; an
EAGLE head that shares the target's embedding and LM head does not count them). KV overhead = the
tokens of KV-cache capacity the speculative engine lost against the baseline engine under the same
memory budget: that is what users feel as lower concurrency. Process overhead = the engine
processes' peak resident memory (CPU) or device memory (GPU, NVML) above the baseline engine's.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 2}
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
MIB = 1024**2


def checkpoint_params(model_dir: Path, only: str = "") -> int:
    """Number of parameters stored in a local checkpoint's safetensors files (headers only);
    with `only`, just the tensors whose name contains it."""
    total = 0
    files = sorted(Path(model_dir).glob("*.safetensors"))
    for f in files:
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name == "__metadata__" or name in ("d2t", "t2d") or only not in name:  # d2t/t2d: vocab maps
                continue
            count = 1
            for dim in info["shape"]:
                count *= dim
            total += count
    return total


def kv_bytes_per_token(config: dict, dtype_bytes: int) -> int:
    """layers x 2 (K and V) x KV heads x head dim x bytes, from a HF-style config dict."""
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    layers = config.get("num_hidden_layers", 1)
    return layers * 2 * kv_heads * head_dim * dtype_bytes


@dataclass(frozen=True)
class MemoryReading:
    """One engine's memory as measured in this run (bytes; tokens for KV capacity)."""

    kv_capacity_tokens: int | None
    peak_process_bytes: int  # sum over the engine's processes of their peak resident memory
    device_bytes: int | None = None  # GPU memory (NVML), None on CPU
    drafter_weight_bytes: int | None = None  # measured inside the worker: the drafter's own tensors
    # "process": NVML's per-process figures for the engine's PIDs; "device": memory used on the
    # engine's devices as a whole (in a container NVML reports host PIDs, which never match ours)
    device_source: str = ""


@dataclass(frozen=True)
class MemoryOverhead:
    """A method's overhead against the baseline engine of the same run."""

    static_bytes_analytic: int | None  # None: the drafter's checkpoint is not on this disk
    static_bytes_measured: int | None
    kv_tokens_lost: int | None
    kv_bytes_per_token_drafter: int
    kv_bytes_per_token_target: int
    process_bytes: int
    device_bytes: int | None

    def record(self) -> dict[str, float]:
        """Values stored in a baseline file (MiB, tokens)."""
        rec: dict[str, float] = {
            "process_mib": round(self.process_bytes / MIB, 3),
            "kv_bytes_per_token_drafter": self.kv_bytes_per_token_drafter,
            "kv_bytes_per_token_target": self.kv_bytes_per_token_target,
        }
        if self.static_bytes_analytic is not None:
            rec["static_mib_analytic"] = round(self.static_bytes_analytic / MIB, 6)
        if self.static_bytes_measured is not None:
            rec["static_mib_measured"] = round(self.static_bytes_measured / MIB, 6)
        if self.kv_tokens_lost is not None:
            rec["kv_tokens_lost"] = self.kv_tokens_lost
        if self.device_bytes is not None:
            rec["device_mib"] = round(self.device_bytes / MIB, 3)
        return rec


def overhead(
    method: MemoryReading, baseline: MemoryReading, static_analytic: int, kv_per_token_drafter: int, kv_per_token_target: int = 0
) -> MemoryOverhead:
    kv_lost = None
    if method.kv_capacity_tokens is not None and baseline.kv_capacity_tokens is not None:
        kv_lost = baseline.kv_capacity_tokens - method.kv_capacity_tokens
    device = None
    if method.device_bytes is not None and baseline.device_bytes is not None and method.device_source == baseline.device_source:
        device = method.device_bytes - baseline.device_bytes
    return MemoryOverhead(
        static_bytes_analytic=static_analytic,
        static_bytes_measured=method.drafter_weight_bytes,
        kv_tokens_lost=kv_lost,
        kv_bytes_per_token_drafter=kv_per_token_drafter,
        kv_bytes_per_token_target=kv_per_token_target,
        process_bytes=method.peak_process_bytes - baseline.peak_process_bytes,
        device_bytes=device,
    )


def engine_record(reading: MemoryReading) -> dict[str, float]:
    """The baseline engine's own figures, stored for reference (not gated)."""
    rec: dict[str, float] = {"peak_process_mib": round(reading.peak_process_bytes / MIB, 3)}
    if reading.kv_capacity_tokens is not None:
        rec["kv_capacity_tokens"] = reading.kv_capacity_tokens
    if reading.device_bytes is not None:
        rec["device_mib"] = round(reading.device_bytes / MIB, 3)
    return rec


def _config(model_dir: Path) -> dict:
    return json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))


def model_dir(ref: str, root: Path) -> Path | None:
    """A model's files on this disk: a zoo model, a local path, or a hub model in the Hugging Face
    cache (where vLLM downloaded it, or `specgate download` did); None when it is not here."""
    from specgate.models import resolve

    local = Path(resolve(ref, root))
    if local.is_dir():
        return local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(ref, local_files_only=True, allow_patterns=["*.json", "*.safetensors"]))
    except Exception:  # not cached, or no huggingface_hub: nothing to read
        return None


def target_kv_bytes_per_token(profile, root: Path) -> int:
    """The target's KV bytes per token from its config (0 when it is not on this disk)."""
    target = model_dir(profile.target, root)
    return kv_bytes_per_token(_config(target), DTYPE_BYTES.get(profile.dtype, 2)) if target else 0


def drafter_footprint(profile, method, root: Path) -> tuple[int | None, int]:
    """(drafter weight bytes from its checkpoint's safetensors headers, drafter KV bytes per token
    from its config), both at the profile's dtype. Model-free methods cost nothing; MTP counts the
    target's MTP layers. A hub drafter is read from the Hugging Face cache; one that is not on this
    disk gives None ("not computed"; the measured figure still gates)."""
    elem = DTYPE_BYTES.get(profile.dtype, 2)
    kind = method.kind
    if kind in ("ngram", "ngram_gpu", "suffix"):
        return 0, 0
    if kind.endswith("mtp"):
        target = model_dir(method.engine_kwargs.get("model", profile.target), root)
        if target is None:
            return None, 0
        cfg = _config(target)
        layers = int(cfg.get("num_nextn_predict_layers", 1))
        per_layer = kv_bytes_per_token(dict(cfg, num_hidden_layers=1), elem)
        return checkpoint_params(target, only="mtp") * elem, layers * per_layer
    drafter = model_dir(method.draft_model or "", root)
    if drafter is None:
        return None, 0
    cfg = _config(drafter)
    kv = 0 if kind == "medusa" else kv_bytes_per_token(cfg, elem)
    return checkpoint_params(drafter) * elem, kv


def device_bytes(pids: list[int]) -> tuple[int | None, str]:
    """(GPU memory of the engine, how it was read): NVML's per-process figures for these PIDs, or,
    when NVML lists none of them (in a container it reports host PIDs), the memory used on the
    visible devices as a whole. (None, "") without NVIDIA devices."""
    try:
        import pynvml
    except ImportError:
        return None, ""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None, ""
    try:
        from specgate.scaleout import visible_devices

        visible = visible_devices()
        handles = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            if not visible or str(i) in visible or str(uuid) in visible:
                handles.append(handle)
        per_process = [p.usedGpuMemory for h in handles for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                       if p.pid in pids and p.usedGpuMemory]
        if per_process:
            return sum(per_process), "process"
        return sum(pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles), "device"
    except pynvml.NVMLError:
        return None, ""
    finally:
        pynvml.nvmlShutdown()
