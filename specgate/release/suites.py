"""The project's own test suites run against one vLLM release's sources, each pytest in a child process:
the contract suite (tests/contract, `SPECGATE_VLLM_SOURCE=<tree>`: every internal specgate reaches,
read from the tree) and the V2 sampler property suite (tests/property on Triton's interpreter,
`SPECGATE_CUDA_RELEASES=<release>`: the tests of that release, and the kernel mutants written into its
kernels). What each says is read back from its JUnit file: counts, the failing test ids with the first
line of each failure, the skip reasons, its wall time.

Neighbours: specgate.sampler.cuda_sources (the trees, the releases variable) below; release_day above.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from specgate.sampler import cuda_sources

CONTRACT, PROPERTIES = "contract", "properties"
TRACEBACK = "Traceback (most recent call last):"
SUITES = (CONTRACT, PROPERTIES)


@dataclass(frozen=True)
class Suite:
    """One suite's run: what it ran, how it ended, what failed (test id, first line of the failure)."""

    name: str
    command: str
    seconds: float
    returncode: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: tuple[tuple[str, str], ...] = ()
    skip_reasons: tuple[str, ...] = ()
    tail: str = ""  # the end of pytest's output when it wrote no JUnit file
    junit: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode in (0, 5) and not self.failed and not self.errors and bool(self.junit)

    def counts(self) -> str:
        parts = [f"{self.passed} passed", f"{self.failed} failed", f"{self.errors} errors", f"{self.skipped} skipped"]
        return ", ".join(parts)


@dataclass(frozen=True)
class Plan:
    """How a suite is run for `release` from the checkout `root`, writing into `out`."""

    root: Path
    out: Path
    timeout_s: float = 3600
    python: str = field(default=sys.executable)


def command(name: str, release: str, tree: Path, junit: Path) -> tuple[list[str], dict[str, str]]:
    """The pytest arguments and the environment a suite runs with."""
    # a module that fails to import is one error, and the other modules still run
    base = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", "--junitxml", str(junit)]
    if name == CONTRACT:
        return [*base, "tests/contract"], {"SPECGATE_VLLM_SOURCE": str(tree)}
    # V2's sampler on the interpreter for this release only (its subjects and tests carry its name), and the
    # kernel mutants, which are written into the newest release under test: this one
    return [*base, "tests/property", "-k", f"{release} or kernel_mutant"], {cuda_sources.RELEASES_VARIABLE: release}


def run(name: str, release: str, tree: Path, plan: Plan) -> Suite:
    plan.out.mkdir(parents=True, exist_ok=True)
    junit = plan.out / f"{name}.xml"
    junit.unlink(missing_ok=True)
    args, extra = command(name, release, tree, junit)
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plan.root), env.get("PYTHONPATH", "")]))
    shown = " ".join(f"{k}={v}" for k, v in extra.items()) + " pytest " + shlex.join(args[2:])
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [plan.python, *args], cwd=plan.root, env=env, capture_output=True, text=True, timeout=plan.timeout_s
        )
        returncode, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = 124
        output = f"stopped after {plan.timeout_s:.0f} s (--suite-timeout)\n" + _text(exc.stdout) + _text(exc.stderr)
    seconds = time.monotonic() - start
    (plan.out / f"{name}.log").write_text(output, encoding="utf-8")
    if not junit.is_file():
        return Suite(name, shown, seconds, returncode, tail="\n".join(output.strip().splitlines()[-12:]))
    return _read_junit(Suite(name, shown, seconds, returncode, junit=str(junit)), junit)


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _read_junit(suite: Suite, path: Path) -> Suite:
    from dataclasses import replace

    root = ET.parse(path).getroot()
    cases = list(root.iter("testcase"))
    failures, skips = [], []
    counts = {"failed": 0, "errors": 0, "skipped": 0}
    for case in cases:
        test_id = _test_id(case)
        for kind, key in (("failure", "failed"), ("error", "errors")):
            for node in case.findall(kind):
                counts[key] += 1
                failures.append((test_id, _first_line(node)))
        for node in case.findall("skipped"):
            counts["skipped"] += 1
            skips.append(_first_line(node))
    bad = {t for t, _ in failures}
    passed = sum(1 for c in cases if _test_id(c) not in bad and c.find("skipped") is None)
    reasons = tuple(dict.fromkeys(skips))
    return replace(suite, passed=passed, failures=tuple(failures), skip_reasons=reasons, **counts)


def _test_id(case: ET.Element) -> str:
    """tests.contract.test_x + test_y[p] -> tests/contract/test_x.py::test_y[p] (a class stays after ::)."""
    parts, name = case.get("classname", "").split("."), case.get("name", "")
    if parts == [""] and name.startswith("tests."):  # a module that could not be collected
        return name.replace(".", "/") + ".py (collecting it)"
    classes = [p for p in parts if p[:1].isupper()]
    module = "/".join(p for p in parts if p not in classes)
    return "::".join([f"{module}.py" if module else "", *classes, name]).lstrip(":")


def _first_line(node: ET.Element) -> str:
    """The failure's message; for pytest's generic ones ('collection failure'), the error its text ends with."""
    message, text = (node.get("message") or "").strip(), node.text or ""
    raised = [line[1:].strip() for line in text.splitlines() if line.startswith("E ") and line[1:].strip()]
    if raised and (not message or message in ("collection failure", "failed on setup with")):
        message = raised[-1] if "Error" in raised[-1] or "Exception" in raised[-1] else raised[0]
    lines = [" ".join(line.split()) for line in (message or text).splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(TRACEBACK):  # an error carried over from a child process: the one its traceback ends in
        carried = [e for e in raised if re.match(r"\w+(Error|Exception)\b:", e) and not e.endswith(TRACEBACK)]
        if carried:
            return f"{lines[0][: -len(TRACEBACK)]}... {' '.join(carried[0].split())}"[:240]
    return lines[0][:240]
