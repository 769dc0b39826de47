"""specgate's public surface (specgate.PUBLIC) is what users may import: the modules, each one's __all__ (the
names it offers) as pinned here, every name defined, and the docs import nothing outside it."""

import importlib
import re
from pathlib import Path

import pytest

import specgate

ROOT = Path(__file__).resolve().parents[2]
# the surface as released: changing it is a decision (and a line in the release notes), not a side effect
PINNED = {
    "specgate.testing": {"FakeBoot", "FakeEngine", "FakeScript", "fake_session"},
    "specgate.hooks": {"Method", "Profile", "pytest_specgate_boot_engine"},  # the hook and what it receives
    "specgate.backend": {  # the protocol, and what its members take and return
        "Backend",
        "BatchResult",
        "Completion",
        "GreedyOutput",
        "KvStats",
        "LoadRun",
        "MemoryReading",
        "Reply",
        "RequestTrace",
        "RequestsResult",
        "ShutdownReport",
        "SpecCounters",
    },
    "specgate.sampler": {  # the property suite's harness (why it ships: its docstring)
        "BlockReferenceSampler",
        "FlyReferenceSampler",
        "ReferenceSampler",
        "RejectionSampler",
        "SpecRequest",
        "SyntheticReferenceSampler",
        "V2Rule",
        "V2Sampler",
        "V2Unavailable",
        "emitted_tokens",
        "target_distribution",
        "top_k_entropy",
        "vllm_rejection_sample",
    },
    "specgate.errors": {
        "BaselineError",
        "EngineBootError",
        "EngineDied",
        "EngineStalled",
        "NotMeasurable",
        "ProfileError",
        "PromptSetError",
        "ResultsError",
        "SpecgateError",
        "ZooError",
    },
}


def test_the_public_surface_is_the_pinned_one():
    assert set(specgate.PUBLIC) == set(PINNED)


@pytest.mark.parametrize("module", sorted(PINNED))
def test_each_public_module_offers_its_names(module):
    mod = importlib.import_module(module)
    assert set(mod.__all__) == PINNED[module]
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert not missing, f"{module} lists {missing} in __all__ but does not define them"


def test_the_docs_import_nothing_private():
    # `from specgate.X import` / `import specgate.X` in README and docs/ name public modules only
    said = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        said |= {(path.name, m) for m in re.findall(r"(?:from|import) (specgate(?:\.\w+)+)", text)}
    private = sorted((f, m) for f, m in said if m not in PINNED)
    assert not private, f"documented imports of private modules: {private}"
