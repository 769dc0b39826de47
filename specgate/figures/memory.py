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
MIB = 1024**2


# The weight files vLLM loads from a checkpoint: the first pattern that matches any file, and never
# the training leftovers it filters out (vllm/model_executor/model_loader/default_loader.py and
# weight_utils.filter_files_not_needed_for_inference; docs/gpu-runners.md has the lines).
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt")
NOT_WEIGHTS = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
VOCAB_MAPS = ("d2t", "t2d")  # EAGLE-3's draft <-> target vocabulary maps: buffers, not weights


def checkpoint_params(model_dir: Path, only: str = "", exclude=()) -> int | None:
    """Number of parameters stored in a local checkpoint's weight files, read as vLLM picks them:
    safetensors headers, else PyTorch .bin / .pt files (loaded onto the meta device: shapes, no data).
    With `only`, just the tensors whose name contains it; `exclude`: names of tensors the engine
    shares with the target (compared without their `model.` prefixes). None ("not computed") when
    the directory holds no weight file, or one that cannot be read: never 0 for a head with weights."""
    shapes = _checkpoint_shapes(Path(model_dir))
    if shapes is None:
        return None
    shared = {_stem(name) for name in exclude}
    total = 0
    for name, shape in shapes.items():
        if name in VOCAB_MAPS or only not in name or _stem(name) in shared:
            continue
        count = 1
        for dim in shape:
            count *= dim
        total += count
    return total


def _stem(name: str) -> str:
    """'model.embed_tokens.weight' and 'embed_tokens.weight' are one tensor to compare names by."""
    while name.startswith("model."):
        name = name[len("model.") :]
    return name


def _checkpoint_shapes(model_dir: Path) -> dict[str, tuple[int, ...]] | None:
    for pattern in WEIGHT_FILES:
        files = sorted(f for f in model_dir.glob(pattern) if f.name not in NOT_WEIGHTS)
        if files:
            break
    else:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        for f in files:
            shapes.update(_safetensors_shapes(f) if f.suffix == ".safetensors" else _torch_shapes(f))
    except Exception:  # a truncated file, a pickle that is not a state dict: not computed, never a guess
        return None
    return shapes


def _safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    return {name: tuple(info["shape"]) for name, info in header.items() if name != "__metadata__"}


def _torch_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    import torch

    def walk(obj, prefix: str) -> dict[str, tuple[int, ...]]:
        if isinstance(obj, torch.Tensor):
            return {prefix: tuple(obj.shape)}
        if isinstance(obj, dict):  # a state dict, or one nested under a key ("state_dict", "model")
            return {
                k: v
                for key, value in obj.items()
                for k, v in walk(value, f"{prefix}.{key}" if prefix else str(key)).items()
            }
        return {}

    return walk(torch.load(path, map_location="meta", weights_only=True), "")


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
    drafter_shared: tuple[str, ...] = ()  # the drafter's tensors that are the target's (not counted on either side)
    drafter_not_measured: str = ""  # why drafter_weight_bytes is None, when the workers said


def drafter_weights(per_rank: list[dict | None]) -> dict:
    """MemoryReading's drafter fields from every worker's worker.drafter_shards (rank order): each
    parameter counted once per distinct shard, so a layer whole on every rank (EAGLE-3's fc, a
    ReplicatedLinear) once and a split one summed over the ranks. A rank without a drafter record
    leaves the figure unmeasured, never a partial sum; so does a layer split in an unknown way."""
    if not per_rank or any(r is None for r in per_rank):
        return {"drafter_weight_bytes": None}
    shared = tuple(sorted({name for r in per_rank for name in r["shared"]}))
    if unknown := sorted({u for r in per_rank for u in r["unknown"]}):
        return {
            "drafter_weight_bytes": None,
            "drafter_shared": shared,
            "drafter_not_measured": "split over tensor-parallel ranks in a way specgate does not count: "
            f"{', '.join(unknown[:3])} "
            "(specgate/vllm_compat.py parameter_shard)",
        }
    distinct = {(name, shard): size for r in per_rank for name, (shard, size) in r["tensors"].items()}
    return {"drafter_weight_bytes": sum(distinct.values()), "drafter_shared": shared}


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
    method: MemoryReading,
    baseline: MemoryReading,
    static_analytic: int,
    kv_per_token_drafter: int,
    kv_per_token_target: int = 0,
) -> MemoryOverhead:
    kv_lost = None
    if method.kv_capacity_tokens is not None and baseline.kv_capacity_tokens is not None:
        kv_lost = baseline.kv_capacity_tokens - method.kv_capacity_tokens
    device = None
    if (
        method.device_bytes is not None
        and baseline.device_bytes is not None
        and method.device_source == baseline.device_source
    ):
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


def model_dir(ref: str, root: Path, revision: str | None = None) -> Path | None:
    """A model's files on this disk: a zoo model, a local path, or a hub model in the Hugging Face
    cache (where vLLM downloaded it, or `specgate download` did; at the profile's pin); None when it is not here."""
    from specgate.models import resolve

    local = Path(resolve(ref, root))
    if local.is_dir():
        return local
    try:
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(ref, revision=revision, local_files_only=True, allow_patterns=["*.json", *WEIGHT_FILES])
        )
    except Exception:  # not cached, or no huggingface_hub: nothing to read
        return None


def target_kv_bytes_per_token(profile, root: Path) -> int:
    """The target's KV bytes per token from its config (0 when it is not on this disk)."""
    target = model_dir(profile.target, root, profile.target_revision)
    return kv_bytes_per_token(_config(target), DTYPE_BYTES.get(profile.dtype, 2)) if target else 0


def drafter_footprint(profile, method, root: Path, shared=()) -> tuple[int | None, int]:
    """(drafter weight bytes from its checkpoint's weight files, drafter KV bytes per token from its
    config), both at the profile's dtype. Model-free methods cost nothing; MTP counts the target's
    MTP layers; `shared` names the tensors the engine takes from the target instead (EAGLE's
    embedding or LM head when identical to the target's), which the engine does not load again. A
    hub drafter is read from the Hugging Face cache; one that is not on this disk, or whose weights
    cannot be read, gives None ("not computed"; the measured figure still gates)."""
    elem = DTYPE_BYTES.get(profile.dtype, 2)
    kind = method.kind
    if kind in ("ngram", "ngram_gpu", "suffix"):
        return 0, 0
    if kind.endswith("mtp"):
        own = method.engine_kwargs
        target = model_dir(
            own.get("model", profile.target), root, own.get("revision") if "model" in own else profile.target_revision
        )
        if target is None:
            return None, 0
        cfg = _config(target)
        layers = int(cfg.get("num_nextn_predict_layers", 1))
        per_layer = kv_bytes_per_token(dict(cfg, num_hidden_layers=1), elem)
        params = checkpoint_params(target, only="mtp", exclude=shared)
        return None if params is None else params * elem, layers * per_layer
    drafter = model_dir(method.draft_model or "", root, (method.speculative_config or {}).get("revision"))
    if drafter is None:
        return None, 0
    cfg = _config(drafter)
    # Medusa's heads and the MLP speculator's stages read the target's hidden state: no attention, no KV
    kv = 0 if kind in ("medusa", "mlp_speculator") else kv_bytes_per_token(cfg, elem)
    params = checkpoint_params(drafter, exclude=shared)
    return None if params is None else params * elem, kv


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
        from specgate.machine import visible_devices

        visible = visible_devices()
        handles = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            if not visible or str(i) in visible or str(uuid) in visible:
                handles.append(handle)
        per_process = [
            p.usedGpuMemory
            for h in handles
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            if p.pid in pids and p.usedGpuMemory
        ]
        if per_process:
            return sum(per_process), "process"
        return sum(pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles), "device"
    except pynvml.NVMLError:
        return None, ""
    finally:
        pynvml.nvmlShutdown()
