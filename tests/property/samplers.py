"""The samplers the properties run against, by name, and what each costs.

A `Subject` is a `specgate.sampler.reference.RejectionSampler` with a name and its own budget: the
references and vLLM's V1 sampler (in this process) take the full budget; Model Runner V2's sampler
in Triton's interpreter (specgate.sampler.v2, ~15-40 ms per request) takes a smaller one, stated
with its power in properties.py. Building one that cannot run here skips, naming what is missing.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest

from specgate.sampler import cuda_sources as vllm_source
from specgate.sampler.reference import (
    BlockReferenceSampler,
    FlyReferenceSampler,
    ReferenceSampler,
    SyntheticReferenceSampler,
)

from .strategies import BUDGETS, PROFILE

# Every CUDA release of specgate/vllm_compat/releases.py, oldest first: its V2 sampler from its sources;
# $SPECGATE_CUDA_RELEASES names others instead (a release not yet in the table: specgate release-day).
V2_RELEASES = vllm_source.under_test()

# Budgets: Hypothesis examples per property, per profile (strategies.BUDGETS; requests per
# statistical case: properties.py, the same in every profile).
EXAMPLES, V2_EXAMPLES = BUDGETS[PROFILE]

# The parameters each non-default rule runs with in the properties.
SYNTHETIC_RATES = (0.8, 0.35)  # unconditional: P(at least i + 1 drafts kept), k = 2
SYNTHETIC_LENGTH = 1.6  # mean emitted tokens; vLLM resolves it to rates (0.6, 0.0) for k = 2
FLY_WINDOW, FLY_THRESHOLD, FLY_TOP_K = 1, 0.3, 3


@dataclass(frozen=True)
class Subject:
    """A sampler under test: `kind` reference | v1 | v2 (interpreter) | v2-gpu, one rule."""

    kind: str
    rule: str = "standard"
    release: str = ""  # V2 on the interpreter: the CUDA sources' release
    options: tuple = ()  # rule parameters, as V2Rule fields: (("synthetic_acceptance_length", 1.6),)
    mutant: object = None  # V2 only: a mutants.KernelMutant applied to a copy of the kernels
    sampler: object = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        where = {"reference": "reference", "v1": "v1", "v2": f"v2-{self.release}", "v2-gpu": "v2-gpu"}[self.kind]
        extra = "".join(f"-{k.split('_')[-1]}" for k, _ in self.options)
        return f"{where}-{self.rule}{extra}" + (f"-{self.mutant.name}" if self.mutant else "")

    @property
    def interpreted(self) -> bool:
        return self.kind == "v2"

    @property
    def examples(self) -> int:
        return V2_EXAMPLES if self.interpreted else EXAMPLES

    def __call__(self, requests, *, seed: int = 0):
        return self.sampler(requests, seed=seed)

    def built(self) -> Subject:
        """This subject with its sampler, or pytest.skip naming what is missing."""
        from dataclasses import replace

        return replace(self, sampler=_build(self))


def rule_options(rule: str, options: tuple = ()) -> dict:
    params = dict(options)
    if rule == "synthetic" and "synthetic_acceptance_length" not in params:
        params.setdefault("synthetic_acceptance_rates", SYNTHETIC_RATES)
    if rule == "fly":
        params = {
            "fly_window_size": FLY_WINDOW,
            "fly_entropy_threshold": FLY_THRESHOLD,
            "fly_entropy_top_k": FLY_TOP_K,
            **params,
        }
    return params


def synthetic_rates(subject: Subject, k: int = len(SYNTHETIC_RATES)) -> tuple[float, ...]:
    """The unconditional rates a synthetic subject accepts at, for a batch with k drafts."""
    params = rule_options("synthetic", subject.options)
    return tuple(
        SyntheticReferenceSampler(
            params.get("synthetic_acceptance_rates"), length=params.get("synthetic_acceptance_length")
        ).unconditional_rates(k)
    )


def reference_for(rule: str, options: tuple = ()):
    params = rule_options(rule, options)
    if rule == "block":
        return BlockReferenceSampler()
    if rule == "synthetic":
        return SyntheticReferenceSampler(
            params.get("synthetic_acceptance_rates"), length=params.get("synthetic_acceptance_length")
        )
    if rule == "fly":
        return FlyReferenceSampler(
            params["fly_window_size"], params["fly_entropy_threshold"], params["fly_entropy_top_k"]
        )
    return ReferenceSampler()


def _build(subject: Subject):
    if subject.kind == "reference":
        return reference_for(subject.rule, subject.options)
    if subject.kind == "v1":
        if importlib.util.find_spec("vllm") is None:
            pytest.skip("vLLM is not installed (pip install -e '.[cpu]' or '.[gpu]')")
        from specgate import vllm_compat

        if gone := vllm_compat.v1_gone():  # the installed vLLM has no V1 sampler to test
            pytest.skip(f"V1 sampler: {vllm_compat.release()} (installed) has none: {gone}")
        from specgate.sampler.v1 import sampler_device, vllm_rejection_sample

        try:
            sampler_device()  # a broken install fails here, loudly
        except RuntimeError as exc:
            pytest.skip(str(exc))
        return vllm_rejection_sample
    from specgate.sampler import v2 as rejection_v2

    if subject.kind == "v2-gpu":
        if reason := _no_gpu_v2():
            pytest.skip(reason)
        source = None
    else:
        if reason := vllm_source.missing(subject.release):
            pytest.skip(f"V2 sampler on Triton's interpreter: {reason}")
        source = vllm_source.tree(subject.release)
        if reason := rejection_v2.unavailable(source):
            pytest.skip(f"V2 sampler on Triton's interpreter: {reason}")
        if subject.rule not in (offered := rules_offered(source)):
            pytest.skip(f"vLLM {subject.release} has no rejection_sample_method '{subject.rule}' (it offers {offered})")
    rule = rejection_v2.V2Rule(subject.rule, **rule_options(subject.rule, subject.options))
    patches = subject.mutant.patches if subject.mutant else ()
    sampler = rejection_v2.V2Sampler(source, rule, mutant=patches, name=subject.name)
    try:
        rejection_v2.worker(source)
    except rejection_v2.V2Unavailable as exc:
        pytest.skip(str(exc))
    return sampler


def rules_offered(source) -> list[str]:
    """The `rejection_sample_method` values of an unpacked vLLM tree (its RejectionSampleMethod Literal)."""
    from specgate import vllm_compat

    text = (source / "vllm" / "config" / "speculative.py").read_text(encoding="utf-8")
    return vllm_compat.literal_from_source(text, "RejectionSampleMethod")


def rules_of(release: str) -> tuple[str, ...]:
    """The rules `release` offers, read from its sources; every rule specgate knows (V2Rule) where they are
    not unpacked, whose subjects then skip saying so."""
    from specgate.sampler.v2 import RULES

    if vllm_source.missing(release):
        return RULES
    return tuple(rules_offered(vllm_source.tree(release)))


def _no_gpu_v2() -> str:
    """'' when the installed vLLM is a CUDA build on a visible GPU."""
    try:
        import torch
    except ImportError:
        return "V2 sampler on a GPU: torch is not installed"
    if not torch.cuda.is_available():
        return "V2 sampler on a GPU: no GPU here (CPU runs it on Triton's interpreter, the v2-<release> samplers)"
    if importlib.util.find_spec("vllm") is None:
        return "V2 sampler on a GPU: vLLM is not installed"
    return ""


def subjects(rule: str, *, reference: bool = True, v1: bool = False, options: tuple = ()) -> list[Subject]:
    """Every sampler that runs `rule`: the reference, V1 (standard only), V2 per release and on a GPU."""
    out = [Subject("reference", rule, options=options)] if reference else []
    if v1:
        out.append(Subject("v1", rule, options=options))
    out += [Subject("v2", rule, release, options) for release in V2_RELEASES]
    out.append(Subject("v2-gpu", rule, options=options))
    return out


def ids(items) -> list[str]:
    return [s.name for s in items]
