"""The fast loop's promise, kept: a run that deselects `needs_vllm` imports neither torch nor vLLM.

When the marker expression says `not needs_vllm` (tests/README.md, "The fast loop"), importing
`torch` or `vllm` (or any of their submodules) fails with ImportError for the whole session, and the
test, fixture or test module that tried fails naming what it imported and the fix: mark it
`needs_vllm`, or import lazily what only the marked tests need. Code that probes with
`importlib.util.find_spec` still sees what is installed; only the import itself is refused, so the
loop also shows how the code behaves where torch and vLLM are absent.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys

import pytest

HEAVY = ("torch", "vllm")
_FAST_LOOP = re.compile(r"\bnot\s+needs_vllm\b")


class HeavyImportGuard(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on sys.meta_path: finds `torch` / `vllm` and refuses to execute them, noting each try."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in HEAVY:
            return None
        for finder in sys.meta_path:  # what is installed stays visible to find_spec probes
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    refused = importlib.machinery.ModuleSpec(name, self, origin=spec.origin)
                    refused.submodule_search_locations = spec.submodule_search_locations
                    return refused
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        self.refused.append(module.__name__)
        raise ImportError(f"import of {module.__name__} refused: {_advice()}", name=module.__name__)


def _advice() -> str:
    return (
        "the fast loop (-m '... not needs_vllm') imports neither torch nor vLLM; mark the test "
        "`@pytest.mark.needs_vllm` (a whole file: pytestmark) or import the heavy module lazily, inside "
        "the code that needs it"
    )


def _guard(config: pytest.Config) -> HeavyImportGuard | None:
    return config.stash.get(_GUARD_KEY, None)


_GUARD_KEY = pytest.StashKey[HeavyImportGuard]()
_SEEN_KEY = pytest.StashKey[list]()  # per test: how many refusals there were before its setup


def pytest_configure(config: pytest.Config) -> None:
    if not _FAST_LOOP.search(config.getoption("markexpr", "") or ""):
        return
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in HEAVY)
    if loaded:
        raise pytest.UsageError(
            f"{', '.join(loaded[:3])} already imported before the tests were collected "
            f"(a plugin or conftest): {_advice()}"
        )
    guard = HeavyImportGuard()
    sys.meta_path.insert(0, guard)
    config.stash[_GUARD_KEY] = guard


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = _guard(config)
    if guard is not None and guard in sys.meta_path:
        sys.meta_path.remove(guard)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test module that imports torch or vLLM at its top fails to collect, saying so."""
    guard = _guard(collector.config)
    before = len(guard.refused) if guard else 0
    report = yield
    if guard and guard.refused[before:] and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid}: imported {', '.join(dict.fromkeys(guard.refused[before:]))}: {_advice()}"
        )
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    guard = _guard(item.config)
    if guard is not None:
        item.stash[_SEEN_KEY] = [len(guard.refused)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test (its fixtures included) that tried to import torch or vLLM fails, whatever it did with the
    ImportError (caught it, skipped on it), naming the modules."""
    guard = _guard(item.config)
    report = yield
    if guard is None:
        return report
    seen = item.stash.setdefault(_SEEN_KEY, [len(guard.refused)])  # set before setup ran
    if guard.refused[seen[0] :] and not report.failed:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: imported {', '.join(dict.fromkeys(guard.refused[seen[0] :]))}: {_advice()}"
    seen[0] = len(guard.refused)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Last word: nothing heavy was imported at all (a hook or a thread may have done it outside a test)."""
    guard = _guard(session.config)
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in HEAVY) if guard else []
    if loaded:
        session.config.get_terminal_writer().line(
            f"fast loop: {', '.join(loaded[:3])} got imported: {_advice()}", red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
