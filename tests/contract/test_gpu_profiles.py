"""Every GPU profile boots on every supported CUDA release as far as its configuration goes: each key of
each method's `speculative_config` is a field of that release's SpeculativeConfig, and not one it calls
deprecated; each engine argument (the profile's, the method's, specgate's own) is a field of its
AsyncEngineArgs; and no profile forces a model runner the release does not have (vLLM 0.34.0 removed
`disable_padded_drafter_batch` and `use_heterogeneous_vocab`, deprecated `parallel_drafting`, and raises
on `VLLM_USE_V2_MODEL_RUNNER=0`). Read from each release's source before a runner boots one engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specgate import vllm_compat
from specgate.engines.engine_args import engine_kwargs
from specgate.profile import find_profile, load_profile

from .sources import vllm_root, where

ROOT = Path(__file__).resolve().parents[2]
SPECULATIVE_CONFIG = "vllm.config.speculative:SpeculativeConfig"
ENGINE_ARGS = "vllm.engine.arg_utils:AsyncEngineArgs"


def gpu_profiles() -> list:
    out = []
    for path in sorted((ROOT / "fixtures" / "profiles").glob("*.toml")):
        profile = load_profile(find_profile(path.stem, ROOT), ROOT)
        if profile.hardware != "cpu":
            out.append(profile)
    return out


def configuration_problems(profile, source) -> list[str]:
    """What `source`'s vLLM would refuse (or ignore) of `profile`'s engines, one line each."""
    text = vllm_root(source).joinpath("vllm", "config", "speculative.py").read_text(encoding="utf-8")
    out = []
    for method in profile.methods.values():
        kwargs = engine_kwargs(profile, method, ROOT)
        sc = kwargs.pop("speculative_config", None) or {}
        for found in vllm_compat.problems(vllm_compat.Internal(ENGINE_ARGS, "", fields=tuple(kwargs)), source):
            out.append(f"{profile.name} / {method.name}: engine arguments: {found}")
        for found in vllm_compat.problems(vllm_compat.Internal(SPECULATIVE_CONFIG, "", fields=tuple(sc)), source):
            out.append(f"{profile.name} / {method.name}: speculative_config: {found}")
        for key in sc:
            if said := re.search(rf'"({re.escape(key)} is deprecated[^"]*)"', text):
                out.append(f"{profile.name} / {method.name}: speculative_config.{key}: vLLM says {said.group(1)!r}")
    if profile.engine_env.get("VLLM_USE_V2_MODEL_RUNNER") == "0" and (gone := vllm_compat.v1_gone(source)):
        out.append(f"{profile.name}: [engine] env VLLM_USE_V2_MODEL_RUNNER = '0' asks for Model Runner V1: {gone}")
    return out


@pytest.mark.parametrize("profile", gpu_profiles(), ids=lambda p: p.name)
def test_a_gpu_profiles_engines_are_configured_as_this_vllm_reads_them(profile, source):
    found = configuration_problems(profile, source)
    assert not found, f"{where(source)}: " + "\n".join(found)


def test_what_0_34_removed_or_deprecated_is_named_and_0_33_takes_it(tmp_path):
    """The check fails where it must: a profile setting the keys 0.34.0 removed (and the one it deprecated)
    and forcing V1 is refused on 0.34.0's sources, each named, and accepted on 0.33.0's, which has them."""
    from specgate.sampler import cuda_sources

    for release in ("0.33.0", "0.34.0"):
        if reason := cuda_sources.missing(release):
            pytest.skip(reason)
    text = (ROOT / "fixtures" / "profiles" / "llama31-8b-h100.toml").read_text(encoding="utf-8")
    old = "num_speculative_tokens = 4 }\n\n[methods.eagle3_dynamic]"
    assert old in text
    text = text.replace(
        old,
        "num_speculative_tokens = 4, disable_padded_drafter_batch = true, use_heterogeneous_vocab = false, "
        "parallel_drafting = false }\n\n[methods.eagle3_dynamic]",
    ).replace("[engine]\n", '[engine]\nenv = { VLLM_USE_V2_MODEL_RUNNER = "0" }\n', 1)
    path = tmp_path / "llama31-8b-h100.toml"
    path.write_text(text, encoding="utf-8")
    profile = load_profile(path, ROOT)
    assert configuration_problems(profile, cuda_sources.tree("0.33.0")) == []
    found = "\n".join(configuration_problems(profile, cuda_sources.tree("0.34.0")))
    assert "eagle3: speculative_config: vllm.config.speculative:SpeculativeConfig has no field(s) " in found
    assert "['disable_padded_drafter_batch', 'use_heterogeneous_vocab']" in found
    assert "speculative_config.parallel_drafting: vLLM says 'parallel_drafting is deprecated and has no effect" in found
    assert "VLLM_USE_V2_MODEL_RUNNER = '0' asks for Model Runner V1: vLLM 0.34.0 deleted Model Runner V1" in found
