"""The GPU profiles (fixtures/profiles/*-h100.toml, *-a100.toml) are run by users on their own runners,
never here; these tests check everything that can go wrong before a GPU is involved: they load, they
name real-looking hub models and the methods the issue asks for, and every key handed to vLLM is one
that vLLM (the CPU build installed here, same version as the CUDA wheel) accepts."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from specgate.profile import MODEL_FREE_METHODS, Profile, find_profile, load_profile

ROOT = Path(__file__).resolve().parents[2]
GPU_PROFILES = [
    "llama31-8b-h100",
    "qwen3-8b-h100",
    "mimo-7b-mtp-h100",
    "llama33-70b-tp4-a100",
    "gpt-oss-120b-h200",
    "gpt-oss-120b-tp2-h200",
]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# What the issue asks for, per profile: {method name: (method kind, drafter hub id or None)}.
REQUIRED = {
    "llama31-8b-h100": {
        "ngram": ("ngram", None),
        "suffix": ("suffix", None),
        "draft_model": ("draft_model", "meta-llama/Llama-3.2-1B-Instruct"),
        "eagle": ("eagle", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"),
        "eagle3": ("eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
        "mlp_speculator": ("mlp_speculator", "ibm-ai-platform/llama3-8b-accelerator"),
    },
    "qwen3-8b-h100": {
        "eagle3": ("eagle3", "AngelSlim/Qwen3-8B_eagle3"),
        "dspark": ("dspark", "deepseek-ai/dspark_qwen3_8b_block7"),
    },
    "mimo-7b-mtp-h100": {"mtp": ("mtp", None)},
    "llama33-70b-tp4-a100": {
        "ngram": ("ngram", None),
        "draft_model": ("draft_model", "meta-llama/Llama-3.2-1B-Instruct"),
        "eagle3": ("eagle3", "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"),
    },
    # the published EAGLE-3 study of this setup swept k = 2, 3, 4: one engine per draft length
    "gpt-oss-120b-h200": {f"eagle3@k{k}": ("eagle3", "nvidia/gpt-oss-120b-Eagle3-v2") for k in (2, 3, 4)},
    "gpt-oss-120b-tp2-h200": {f"eagle3@k{k}": ("eagle3", "nvidia/gpt-oss-120b-Eagle3-v2") for k in (2, 3, 4)},
}
TARGETS = {
    "llama31-8b-h100": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3-8b-h100": "Qwen/Qwen3-8B",
    "mimo-7b-mtp-h100": "XiaomiMiMo/MiMo-7B-RL",
    "llama33-70b-tp4-a100": "meta-llama/Llama-3.3-70B-Instruct",
    "gpt-oss-120b-h200": "openai/gpt-oss-120b",
    "gpt-oss-120b-tp2-h200": "openai/gpt-oss-120b",
}


def load(name: str) -> Profile:
    return load_profile(find_profile(name, ROOT), ROOT)


@pytest.fixture(scope="module")
def vllm_schema():
    """Field names of vLLM's SpeculativeConfig and EngineArgs, and the method names it accepts."""
    pytest.importorskip("vllm")
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
    from vllm.engine.arg_utils import EngineArgs

    def literals(tp) -> set[str]:
        out = set()
        for arg in typing.get_args(tp):
            out |= literals(arg) if typing.get_args(arg) else {arg}
        return out

    return {
        "speculative": {f.name for f in dataclasses.fields(SpeculativeConfig)},
        "engine": {f.name for f in dataclasses.fields(EngineArgs)},
        "methods": literals(SpeculativeMethod),
    }


def test_the_gpu_profiles_are_shipped():
    shipped = {p.stem for p in (ROOT / "fixtures" / "profiles").glob("*.toml")}
    assert set(GPU_PROFILES) <= shipped


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_gpu_profile_loads_with_gpu_settings(name):
    p = load(name)
    assert p.name == name
    assert p.hardware == "cuda"
    assert p.target == TARGETS[name]
    assert p.dtype == ("auto" if name.startswith("gpt-oss") else "bfloat16")  # gpt-oss: its MXFP4 checkpoint as served
    # general.jsonl, or SPEED-Bench's qualitative split where $SPECGATE_SPEED_BENCH_DIR points at it
    assert [src.path.name for src in p.sources] in (["general.jsonl"], ["qualitative.jsonl"])
    # bf16 on GPU: exact token equality would flag numerical near-ties, so tie-aware with a margin.
    assert p.equivalence.mode == "tie-aware"
    assert 0 < p.equivalence.logprob_margin <= 0.5
    assert p.equivalence.top_logprobs >= 2
    assert p.concurrency[0] == 1 and max(p.concurrency) >= 16 and list(p.concurrency) == sorted(p.concurrency)
    assert 64 <= p.max_tokens < p.max_model_len
    util = p.engine_kwargs["gpu_memory_utilization"]
    assert 0.5 <= util <= 0.95
    assert "max_model_len" not in p.engine_kwargs and "dtype" not in p.engine_kwargs  # top-level keys own these
    assert not p.engine_kwargs.get("enforce_eager", False), "speedup must be measured with CUDA graphs"
    assert 0 < p.tolerance.acceptance_rtol < 0.5 and 0 < p.tolerance.speedup_rtol < 0.5
    assert p.tolerance.memory_slack_mib >= 64  # GPU allocator noise; cpu-tiny's sub-MiB slack would flake


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_boot_deadlines_fit_a_first_load_of_the_profiles_models(name):
    # The suite's own boot_timeout_s bounds a boot (vLLM's VLLM_ENGINE_READY_TIMEOUT_S does not: it is
    # checked only after the start-up handshake, inside which the model loads); the engine also sets
    # vLLM's limit to it, so vLLM never gives up first.
    from specgate.engines.engine_args import vllm_deadline_env

    p = load(name)
    tp = p.engine_kwargs.get("tensor_parallel_size", 1)
    assert p.boot_timeout_s >= (1800 if tp >= 4 or name.startswith("gpt-oss") else 1200)
    assert p.stall_timeout_s >= 300  # a long prefill at the top concurrency, NCCL set-up at TP 4
    assert "VLLM_ENGINE_READY_TIMEOUT_S" not in p.engine_env
    assert vllm_deadline_env(p) == {"VLLM_ENGINE_READY_TIMEOUT_S": str(int(p.boot_timeout_s))}


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_gpu_profile_has_the_required_methods(name):
    p = load(name)
    for method, (kind, model) in REQUIRED[name].items():
        assert method in p.methods, f"{name}: missing {method}"
        m = p.methods[method]
        assert m.kind == kind
        assert m.draft_model == model


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_model_references_are_hub_ids(name):
    p = load(name)
    refs = {"target": p.target}
    for m in p.methods.values():
        for key in ("model", "tokenizer"):
            if key in m.speculative_config:
                refs[f"{m.name}.{key}"] = m.speculative_config[key]
        for key in ("model", "tokenizer"):
            if key in m.engine_kwargs:
                refs[f"{m.name}.engine.{key}"] = m.engine_kwargs[key]
    for where, ref in refs.items():
        assert not ref.startswith("zoo:"), f"{name}: {where} uses the embedded zoo ({ref})"
        assert HUB_ID.match(ref) and not Path(ref).is_absolute(), f"{name}: {where} = {ref!r} is not org/name"
    text = (ROOT / "fixtures" / "profiles" / f"{name}.toml").read_text()
    assert "zoo:" not in text


@pytest.mark.needs_vllm
@pytest.mark.parametrize("name", GPU_PROFILES)
def test_every_key_is_one_vllm_accepts(name, vllm_schema):
    p = load(name)
    bad = set(p.engine_kwargs) - vllm_schema["engine"]
    assert not bad, f"{name}: engine.kwargs {sorted(bad)} are not vLLM EngineArgs fields"
    for m in p.methods.values():
        sc = m.speculative_config
        bad = set(sc) - vllm_schema["speculative"]
        assert not bad, f"{name}.{m.name}: {sorted(bad)} are not vLLM SpeculativeConfig fields"
        assert "tensor_parallel_size" not in sc  # vLLM rejects it there: draft_tensor_parallel_size
        # A method this vLLM dropped (mlp_speculator on 0.33) is skipped at run time, naming the release;
        # a typo is a profile error (test_profile). Every other method must be one this vLLM offers.
        assert sc["method"] in vllm_schema["methods"] or m.name == "mlp_speculator", (
            f"{name}.{m.name}: {sc['method']!r}"
        )
        bad = set(m.engine_kwargs) - vllm_schema["engine"]
        assert not bad, f"{name}.{m.name}: engine.kwargs {sorted(bad)} are not vLLM EngineArgs fields"


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_num_speculative_tokens_is_sensible(name):
    for m in load(name).methods.values():
        k = m.num_speculative_tokens
        if m.kind == "suffix":
            assert 1 <= k <= 32  # an upper bound; suffix decoding picks the length per step
        elif m.kind in MODEL_FREE_METHODS:
            assert 1 <= k <= 8
        elif m.kind.endswith("mtp"):
            # MiMo-7B ships one MTP layer (num_nextn_predict_layers = 1) and vLLM's MiMo MTP drafts one
            # token per step.
            assert k == 1
        elif m.kind in ("dflash", "dspark"):
            # block drafters: one parallel forward drafts a whole block, k < the checkpoint's block size (16 / 3)
            assert 1 <= k <= 15, f"{name}.{m.name}: {k}"
        else:
            assert 1 <= k <= 5, f"{name}.{m.name}: {k} draft tokens is past where acceptance pays off"
        if m.kind in ("ngram", "ngram_gpu"):
            sc = m.speculative_config
            assert 1 <= sc["prompt_lookup_min"] <= sc["prompt_lookup_max"]


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_a_gpu_profile_boots_one_n_gram_engine(name):
    # On Model Runner V2 (CUDA's default) "ngram" and "ngram_gpu" build the same NgramGPUSpeculator
    # (tests/contract: test_ngram_and_ngram_gpu_are_one_speculator_on_model_runner_v2): a second is a
    # redundant engine, and the profile comments must not say they differ.
    kinds = [m.kind for m in load(name).methods.values()]
    assert sum(k in ("ngram", "ngram_gpu") for k in kinds) <= 1, f"{name}: {kinds}"
    assert "differ only in where the lookup runs" not in (ROOT / "fixtures" / "profiles" / f"{name}.toml").read_text()


def test_the_70b_profile_uses_four_a100s_with_tensor_parallelism():
    p = load("llama33-70b-tp4-a100")
    assert p.engine_kwargs["tensor_parallel_size"] == 4
    assert p.engine_kwargs.get("distributed_executor_backend", "mp") in ("mp", "ray")
    assert "A100" in p.description and "4x" in p.description
    # The drafters follow the target's TP size unless told otherwise; only 1 or 4 are legal in vLLM.
    for m in p.methods.values():
        assert m.speculative_config.get("draft_tensor_parallel_size", 4) in (1, 4)


def test_the_8b_and_mtp_profiles_fit_one_gpu():
    for name in ("llama31-8b-h100", "qwen3-8b-h100", "mimo-7b-mtp-h100"):
        p = load(name)
        assert p.engine_kwargs.get("tensor_parallel_size", 1) == 1
        assert "H100" in p.description


@pytest.mark.needs_vllm
def test_mlp_speculator_is_skipped_with_vllms_own_refusal(vllm_schema):
    """vLLM 0.32 keeps MLPSpeculator out of its registry; the profile mirrors cpu-tiny's expected
    boot error, and the pattern matches the message vLLM's registry actually raises."""
    gpu = load("llama31-8b-h100").methods["mlp_speculator"]
    cpu = load("cpu-tiny").methods["mlp_speculator"]
    assert gpu.expected_boot_error == cpu.expected_boot_error
    from vllm.model_executor.models.registry import ModelRegistry

    raise_unsupported = getattr(ModelRegistry, "_raise_for_unsupported", None)
    if raise_unsupported is None:
        pytest.skip("vLLM's registry has no _raise_for_unsupported here")
    with pytest.raises(ValueError) as excinfo:
        raise_unsupported(["MLPSpeculatorPreTrainedModel"])
    assert re.search(gpu.expected_boot_error, str(excinfo.value))


def test_mimo_loads_its_remote_config_class():
    # model_type "mimo" is defined by the checkpoint's own code, not by transformers or vLLM.
    assert load("mimo-7b-mtp-h100").engine_kwargs.get("trust_remote_code") is True


def test_the_published_setups_sweep_k_reach_their_concurrency_and_price_their_runner():
    oss = load("gpt-oss-120b-h200")
    assert oss.concurrency == (1, 5, 25, 50, 100, 200) and oss.usd_per_hour > 0
    assert [m.num_speculative_tokens for m in oss.methods.values() if m.sweep_of == "eagle3"] == [2, 3, 4]
    assert load("gpt-oss-120b-tp2-h200").engine_kwargs["tensor_parallel_size"] == 2
    assert oss.engine_kwargs.get("max_num_seqs", 0) >= max(oss.concurrency)
    llama = load("llama33-70b-tp4-a100")
    assert max(llama.concurrency) == 64 and 32 in llama.concurrency and llama.temperatures == (0.0, 0.5, 1.0)


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_a_gpu_profile_says_how_to_pin_its_models_and_names_no_revision_it_could_not_resolve(name):
    # Written without access to the hub: the pins come from the runner (`specgate download --pin`), never guessed.
    text = (ROOT / "fixtures" / "profiles" / f"{name}.toml").read_text()
    assert f"`specgate download --profile {name} --pin --write`" in text
    p = load(name)
    assert p.target_revision is None and p.code_revision is None
    assert all("revision" not in m.speculative_config for m in p.methods.values())
