"""Memory figures and ceilings without an engine."""

import sys
import types
from pathlib import Path

import pytest

from specgate import vllm_compat
from specgate.checks.memory import ceilings, consistency_problem
from specgate.figures import memory
from specgate.figures.memory import MIB, MemoryReading
from specgate.profile import Tolerance, find_profile, load_profile

ROOT = Path(__file__).resolve().parents[3]
TOL = Tolerance(memory_rtol=0.10, memory_slack_mib=0.25, process_slack_mib=64)


def test_kv_bytes_per_token_from_config():
    cfg = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128}
    assert memory.kv_bytes_per_token(cfg, 4) == 4 * 2 * 2 * 32 * 4


def test_zoo_drafters_cost_what_their_checkpoints_hold(monkeypatch):
    # The CPU path sizes every model from fixtures/zoo: the Hugging Face cache is never asked, let alone
    # the hub (a stand-in module records any call; model_dir would swallow an exception).
    asked = []
    hub = types.ModuleType("huggingface_hub")
    hub.snapshot_download = lambda repo_id, **kwargs: asked.append(repo_id)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    for method in profile.methods.values():  # mlp_speculator's too, though no engine of vLLM 0.32 boots it
        memory.drafter_footprint(profile, method, ROOT)
    assert asked == []
    ngram, _ = memory.drafter_footprint(profile, profile.methods["ngram"], ROOT)
    eagle, eagle_kv = memory.drafter_footprint(profile, profile.methods["eagle"], ROOT)
    draft, _ = memory.drafter_footprint(profile, profile.methods["draft_model"], ROOT)
    heavy, _ = memory.drafter_footprint(profile, profile.methods["draft_self"], ROOT)
    mtp, mtp_kv = memory.drafter_footprint(profile, profile.methods["mtp"], ROOT)
    assert ngram == 0 and eagle > 0 and eagle_kv > 0 and 0 < draft < heavy
    assert 0 < mtp < heavy and mtp_kv > 0  # the MTP layer only, not the whole target
    mlp, mlp_kv = memory.drafter_footprint(profile, profile.methods["mlp_speculator"], ROOT)
    assert 0 < mlp < heavy and mlp_kv == 0  # MLP stages over the target's hidden state: no attention, no KV


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
        "KV-cache capacity lost to speculation: measured 400 tokens, baseline 100 tokens (vLLM 0.32.0), ceiling 110 "
        "tokens",
    ]
    same = [c for c in ceilings(stored, stored, TOL) if c.fails()]
    assert same == []


def test_measured_and_analytic_weights_must_agree():
    assert consistency_problem({"static_mib_measured": 1.0, "static_mib_analytic": 1.02}, 0.1) is None
    problem = consistency_problem({"static_mib_measured": 3.0, "static_mib_analytic": 1.0}, 0.1)
    assert problem and "holds more than the checkpoint" in problem


@pytest.mark.needs_vllm
def test_a_hub_drafter_is_sized_from_its_files_in_the_hugging_face_cache(monkeypatch):
    import huggingface_hub
    import torch  # noqa: F401  (the drafter is sized with torch: this test needs it installed)

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

    from specgate.figures.memory import device_bytes as _device_bytes

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setitem(sys.modules, "pynvml", _Nvml(host_pids=[4242]))
    assert _device_bytes([4242]) == (7 * MIB, "process")
    assert _device_bytes([77]) == (11 * MIB, "device")  # device 1 only: the one this run may use
    base = MemoryReading(1000, 0, 10 * MIB, None, "process")
    spec = MemoryReading(900, 0, 12 * MIB, 0, "device")
    assert memory.overhead(spec, base, 0, 0).device_bytes is None  # never a difference across two sources


# -- the drafter's weights over tensor-parallel ranks, with fake workers (tests/unit/figures/tp_workers.py) ----


@pytest.mark.needs_vllm  # torch
def test_a_replicated_layer_at_tp_4_is_counted_once_and_split_ones_summed_over_the_ranks(monkeypatch):
    from .tp_workers import _reading, _workers

    four = _reading(monkeypatch, _workers(4))
    fc, qkv, o_weight, o_bias, norm = 8 * 24, 16 * 8, 8 * 8, 8, 8  # whole-model element counts
    assert four.drafter_weight_bytes == (fc + qkv + o_weight + o_bias + norm) * 4
    # one rank alone: fc whole, a quarter of the split layers; every rank summed: fc four times (issue 37)
    assert four.drafter_weight_bytes != (fc + (qkv + o_weight) // 4 + o_bias + norm) * 4
    assert four.drafter_weight_bytes != (4 * fc + qkv + o_weight + 4 * o_bias + 4 * norm) * 4
    assert _reading(monkeypatch, _workers(1)).drafter_weight_bytes == four.drafter_weight_bytes  # TP 1: the same head


@pytest.mark.needs_vllm  # torch
def test_a_shared_embedding_is_counted_on_neither_side(monkeypatch, tmp_path):
    import torch
    from safetensors.torch import save_file

    from .tp_workers import _reading, _workers

    reading = _reading(monkeypatch, _workers(4))
    assert reading.drafter_shared == ("embed_tokens.weight",)  # the target's, by identity: not measured
    # the checkpoint holds the embedding too (identical to the target's, so vLLM did not load it again)
    head = {
        "embed_tokens.weight": torch.zeros(32, 8),
        "fc.weight": torch.zeros(8, 24),
        "midlayer.norm.weight": torch.zeros(8),
    }
    save_file(head, tmp_path / "model.safetensors")
    assert memory.checkpoint_params(tmp_path) == 32 * 8 + 8 * 24 + 8
    assert memory.checkpoint_params(tmp_path, exclude=reading.drafter_shared) == 8 * 24 + 8
    assert memory.checkpoint_params(tmp_path, exclude=("model.embed_tokens.weight",)) == 8 * 24 + 8  # vLLM's name


@pytest.mark.needs_vllm  # torch
def test_a_rank_without_a_drafter_record_or_an_unknown_split_leaves_the_figure_unmeasured(monkeypatch):
    from .tp_workers import WEIGHT, FusedMoE, QKVParallelLinear, _reading, _workers

    workers = _workers(2)
    assert _reading(monkeypatch, [workers[0], None]).drafter_weight_bytes is None  # never a partial sum
    moe = _reading(monkeypatch, _workers(2, experts=lambda rank: FusedMoE(rank, 2, w13=((4, 8), WEIGHT))))
    assert moe.drafter_weight_bytes is None
    assert moe.drafter_not_measured.startswith(
        "split over tensor-parallel ranks in a way specgate does not count: experts.w13 (FusedMoE with tp_size 2)"
    )
    replicas = QKVParallelLinear(0, 16, weight=((4, 8), WEIGHT))
    replicas.num_kv_head_replicas = 2  # TP 16 over 8 KV heads: each K/V shard on two ranks
    with pytest.raises(vllm_compat.UnknownSplit, match="K/V heads replicated over 2 ranks"):
        vllm_compat.parameter_shard(replicas, replicas.weight)


@pytest.mark.needs_vllm  # torch
def test_a_bin_or_pt_only_head_is_sized_and_an_unreadable_one_is_not_computed(tmp_path):
    import torch

    bin_head, pt_head, broken, empty = (tmp_path / n for n in ("bin", "pt", "broken", "empty"))
    for d in (bin_head, pt_head, broken, empty):
        d.mkdir()
    torch.save({"fc.weight": torch.zeros(8, 24), "norm.weight": torch.zeros(8)}, bin_head / "pytorch_model.bin")
    torch.save({"state_dict": {"fc.weight": torch.zeros(8, 24)}}, pt_head / "medusa_lm_head.pt")
    torch.save({"lr": 0.1}, broken / "training_args.bin")  # a training leftover vLLM never loads
    (broken / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    assert memory.checkpoint_params(bin_head) == 8 * 24 + 8
    assert memory.checkpoint_params(pt_head) == 8 * 24
    assert memory.checkpoint_params(broken) is None and memory.checkpoint_params(empty) is None  # never 0


@pytest.mark.needs_vllm  # torch
def test_the_checkpoint_figure_of_a_bin_only_hub_head_gates_and_an_unreadable_one_says_why(monkeypatch, tmp_path):
    import huggingface_hub
    import torch

    profile = load_profile(find_profile("llama31-8b-h100", ROOT), ROOT)
    (tmp_path / "config.json").write_text((ROOT / "fixtures" / "zoo" / "eagle" / "config.json").read_text())
    torch.save({"fc.weight": torch.zeros(128, 256)}, tmp_path / "pytorch_model.bin")

    def snapshot(repo_id, local_files_only=False, **kwargs):
        assert local_files_only  # never downloads here
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    weights, _ = memory.drafter_footprint(profile, profile.methods["eagle"], ROOT)
    assert weights == 128 * 256 * 2  # bf16
    (tmp_path / "pytorch_model.bin").write_bytes(b"truncated")
    assert memory.drafter_footprint(profile, profile.methods["eagle"], ROOT)[0] is None


@pytest.mark.needs_vllm  # torch
def test_measured_and_checkpoint_figures_agree_when_the_engine_shares_the_targets_embedding(tmp_path):
    """Through the session: the checkpoint holds an embedding vLLM took from the target, which the
    worker reported as shared; the checkpoint figure leaves it out too, so the two agree."""
    import torch
    from safetensors.torch import save_file

    from specgate.checks import Verdict
    from specgate.testing import FakeScript, fake_session

    from ..fakes import fake_profile

    head = tmp_path / "eagle-head"
    head.mkdir()
    (head / "config.json").write_text((ROOT / "fixtures" / "zoo" / "eagle" / "config.json").read_text())
    save_file(
        {"embed_tokens.weight": torch.zeros(2048, 128), "fc.weight": torch.zeros(128, 256)}, head / "model.safetensors"
    )
    path = tmp_path / "fake.toml"
    path.write_text(
        fake_profile(
            f'[methods.eagle]\nspeculative_config = {{ method = "eagle", model = "{head}", '
            "num_speculative_tokens = 2 }\n"
        )
    )
    profile = load_profile(path, tmp_path)
    fc_mib = 128 * 256 * 2 / MIB  # dtype auto: 2 bytes
    for shared, verdict in ((["model.embed_tokens.weight"], Verdict.SKIP), ([], Verdict.FAIL)):
        script = FakeScript.from_dict({"methods": {"eagle": {"drafter_mib": fc_mib, "drafter_shared": shared}}})
        s = fake_session(profile, tmp_path, script)
        s.boot("baseline")
        s.judge("memory", "baseline")
        j = s.judge("memory", "eagle")
        assert j.verdict is verdict, j.message  # SKIP: consistent, and no stored baseline yet
        s.release_all()
    assert (
        "computed from its checkpoint (0.562 MiB)" in j.message
        and f"measured in the engine ({fc_mib:.3f} MiB)" in j.message
    )
