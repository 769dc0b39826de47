"""Memory figures and ceilings without an engine."""

from pathlib import Path

from specgate import memory
from specgate.checks.memory import ceilings, consistency_problem
from specgate.memory import MIB, MemoryReading
from specgate.profile import Tolerance, find_profile, load_profile

ROOT = Path(__file__).resolve().parents[2]
TOL = Tolerance(memory_rtol=0.10, memory_slack_mib=0.25, process_slack_mib=64)


def test_kv_bytes_per_token_from_config():
    cfg = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128}
    assert memory.kv_bytes_per_token(cfg, 4) == 4 * 2 * 2 * 32 * 4


def test_zoo_drafters_cost_what_their_checkpoints_hold():
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    ngram, _ = memory.drafter_footprint(profile, profile.methods["ngram"], ROOT)
    eagle, eagle_kv = memory.drafter_footprint(profile, profile.methods["eagle"], ROOT)
    draft, _ = memory.drafter_footprint(profile, profile.methods["draft_model"], ROOT)
    heavy, _ = memory.drafter_footprint(profile, profile.methods["draft_self"], ROOT)
    mtp, mtp_kv = memory.drafter_footprint(profile, profile.methods["mtp"], ROOT)
    assert ngram == 0 and eagle > 0 and eagle_kv > 0 and 0 < draft < heavy
    assert 0 < mtp < heavy and mtp_kv > 0  # the MTP layer only, not the whole target


def test_overhead_is_against_the_baseline_engine_of_the_same_run():
    base = MemoryReading(kv_capacity_tokens=1000, peak_process_bytes=500 * MIB)
    spec = MemoryReading(kv_capacity_tokens=800, peak_process_bytes=530 * MIB, drafter_weight_bytes=2 * MIB)
    rec = memory.overhead(spec, base, 2 * MIB, 256, 1024).record()
    assert rec["kv_tokens_lost"] == 200 and rec["process_mib"] == 30 and rec["static_mib_measured"] == 2
    # KV capacity splits the same budget between target and drafter: 1000 x 1024 / (1024 + 256) = 800
    assert rec["kv_bytes_per_token_target"] == 1024


def test_ceiling_fails_a_heavier_drafter_and_names_every_number():
    stored = {"static_mib_measured": 2.0, "kv_tokens_lost": 100, "process_mib": 10.0}
    heavier = {"static_mib_measured": 5.0, "kv_tokens_lost": 400, "process_mib": 12.0}
    failures = [c.fails() for c in ceilings(heavier, stored, TOL, "vLLM 0.32.0") if c.fails()]
    assert failures == [
        "drafter weights (measured in the engine): measured 5 MiB, baseline 2 MiB (vLLM 0.32.0), ceiling 2.45 MiB",
        "KV-cache capacity lost to speculation: measured 400 tokens, baseline 100 tokens (vLLM 0.32.0), ceiling 110 tokens",
    ]
    same = [c for c in ceilings(stored, stored, TOL) if c.fails()]
    assert same == []


def test_measured_and_analytic_weights_must_agree():
    assert consistency_problem({"static_mib_measured": 1.0, "static_mib_analytic": 1.02}, 0.1) is None
    problem = consistency_problem({"static_mib_measured": 3.0, "static_mib_analytic": 1.0}, 0.1)
    assert problem and "loaded more than the drafter" in problem


def test_a_hub_drafter_is_sized_from_its_files_in_the_hugging_face_cache(monkeypatch):
    import huggingface_hub

    profile = load_profile(find_profile("llama31-8b-h100", ROOT), ROOT)
    cached = {"yuhuili/EAGLE-LLaMA3.1-Instruct-8B": ROOT / "fixtures" / "zoo" / "eagle"}  # a stand-in checkpoint

    def snapshot(repo_id, local_files_only=False, **kwargs):
        assert local_files_only  # never downloads here
        if repo_id not in cached:
            raise FileNotFoundError(repo_id)
        return str(cached[repo_id])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    weights, kv = memory.drafter_footprint(profile, profile.methods["eagle"], ROOT)
    assert weights == memory.checkpoint_params(cached["yuhuili/EAGLE-LLaMA3.1-Instruct-8B"]) * 2 and kv > 0
    # not in the cache: not computed (None), not 0, so "measured and computed differ" cannot fire on it
    assert memory.drafter_footprint(profile, profile.methods["draft_model"], ROOT) == (None, 0)
    rec = memory.overhead(MemoryReading(900, 0, drafter_weight_bytes=3 * MIB), MemoryReading(1000, 0), None, 0).record()
    assert "static_mib_analytic" not in rec and consistency_problem(rec, 0.1) is None


class _Nvml:
    """pynvml as a container shows it: the engine's processes appear under host PIDs."""

    class NVMLError(Exception):
        pass

    def __init__(self, host_pids):
        self.host_pids = host_pids

    def nvmlInit(self): ...

    def nvmlShutdown(self): ...

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        from types import SimpleNamespace

        return [SimpleNamespace(pid=p, usedGpuMemory=7 * MIB) for p in self.host_pids]

    def nvmlDeviceGetMemoryInfo(self, h):
        from types import SimpleNamespace

        return SimpleNamespace(used=(10 + h) * MIB)


def test_device_memory_falls_back_to_the_whole_device_when_nvml_cannot_see_our_pids(monkeypatch):
    import sys

    from specgate.memory import device_bytes as _device_bytes

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setitem(sys.modules, "pynvml", _Nvml(host_pids=[4242]))
    assert _device_bytes([4242]) == (7 * MIB, "process")
    assert _device_bytes([77]) == (11 * MIB, "device")  # device 1 only: the one this run may use
    base = MemoryReading(1000, 0, 10 * MIB, None, "process")
    spec = MemoryReading(900, 0, 12 * MIB, 0, "device")
    assert memory.overhead(spec, base, 0, 0).device_bytes is None  # never a difference across two sources


def test_the_drafters_weights_are_summed_over_its_tensor_parallel_shards(monkeypatch):
    from specgate import engine as engine_module
    from specgate.engine import Engine

    # a TP-4 engine: each rank's worker holds a quarter of the drafter (rank 0 alone would say 1/4)
    eng = object.__new__(Engine)
    eng.children_before_boot, eng.client = set(), None
    monkeypatch.setattr(engine_module.procs, "children", set)
    monkeypatch.setattr(engine_module, "device_bytes", lambda pids: (None, "process"))
    monkeypatch.setattr(engine_module.compat, "kv_capacity_tokens", lambda client: 1000)
    monkeypatch.setattr(Engine, "collective_rpc", lambda self, fn: [3 * MIB, 3 * MIB, 3 * MIB, 3 * MIB])
    assert eng.memory_reading().drafter_weight_bytes == 12 * MIB
    monkeypatch.setattr(Engine, "collective_rpc", lambda self, fn: [3 * MIB, None])  # a rank without the hook
    assert eng.memory_reading().drafter_weight_bytes is None  # not measured, never a partial sum
