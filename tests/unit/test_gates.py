"""The gate registry (specgate/gates.py): one entry per gate, its typed keys written and read in one place,
each gate judged by exactly one check, and no gate compared with a spelled-out name anywhere else."""

import ast
import pickle
from pathlib import Path

import pytest

from specgate import gates
from specgate.checks.registry import CHECKS
from specgate.gates import ACCEPTANCE, GATES, MEMORY, SPEEDUP, Category, Level, gate_named
from specgate.profile import load_profile
from specgate.testing import fake_session

PACKAGE = Path(__file__).resolve().parents[2] / "specgate"


def test_every_gate_has_exactly_one_check_that_names_it(tmp_path):
    root = PACKAGE.parent
    session = fake_session(load_profile(root / "fixtures" / "profiles" / "cpu-tiny.toml", root), tmp_path)
    assert list(session.checks) == list(GATES) and set(CHECKS) == set(GATES)
    assert all(check.gate is gate for gate, check in session.checks.items())
    assert {gate_named(g) for g in GATES} == set(GATES) and gate_named("speedups") is None


@pytest.mark.parametrize(
    "gate, param, baseline, text",
    [
        (ACCEPTANCE, "doc_prose", False, "doc_prose"),
        (ACCEPTANCE, ("doc_prose", 0.7), False, "doc_prose@T0.7"),
        (SPEEDUP, 4, False, "C=4"),
        (SPEEDUP, None, False, "summary"),
        (MEMORY, None, True, "engine"),
        (MEMORY, None, False, "overhead"),
        (gates.EQUIVALENCE, None, True, "greedy"),
        (gates.LIFECYCLE, None, False, "lifecycle"),
        (gates.EDGES, None, False, "classes"),
    ],
)
def test_a_key_is_written_and_read_back_as_the_same_typed_value(gate, param, baseline, text):
    key = gate.key(param, baseline=baseline)
    assert key == text and gate.parse(text) == key and type(gate.parse(text)) is type(key)
    assert pickle.loads(pickle.dumps(key)) == key and type(pickle.loads(pickle.dumps(key))) is type(key)


def test_typed_keys_carry_their_values():
    assert ACCEPTANCE.parse("code@T0.5").temperature == 0.5 and ACCEPTANCE.parse("code").category == "code"
    assert SPEEDUP.parse("C=16").concurrency == 16 and SPEEDUP.parse("summary").concurrency is None
    assert Level(4) == "C=4" and Category("a", 0.0) == "a"
    with pytest.raises(ValueError, match="not a concurrency key"):
        SPEEDUP.parse("C=four")


def test_a_gate_is_its_name_and_survives_pickling_as_the_registry_entry():
    assert SPEEDUP == "speedup" and {"speedup": 1}[SPEEDUP] == 1
    assert pickle.loads(pickle.dumps(SPEEDUP)) is SPEEDUP


def _gate_comparisons(tree: ast.AST):
    """`gate == "speedup"`, `row["gate"] == "memory"`, `g in ("load", ...)`: a gate compared with its name."""
    names = {str(g) for g in GATES}

    def about_gate(node) -> bool:
        text = ast.unparse(node)
        return text in ("gate", "g") or text.endswith((".gate", "['gate']", '["gate"]', "get('gate')"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            spelled = [
                s
                for s in sides
                for c in ([s] if isinstance(s, ast.Constant) else getattr(s, "elts", []))
                if isinstance(c, ast.Constant) and c.value in names
            ]
            if spelled and any(about_gate(s) for s in sides):
                yield node.lineno


def test_no_module_compares_a_gate_with_its_spelled_out_name():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "gates.py"
        for line in _gate_comparisons(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, f"compare with the registry's entry (specgate.gates.SPEEDUP, ...), not its name: {found}"


def test_the_scan_finds_a_spelled_out_comparison():
    tree = ast.parse('if gate == "speedup" or row["gate"] in ("memory", "load"): pass')
    assert len(list(_gate_comparisons(tree))) == 2


def test_a_gate_test_may_ask_for_its_gates_axis_only():
    assert ACCEPTANCE.axis_problem(["judge", "method", "category", "temperature"]) == ""
    assert SPEEDUP.axis_problem(["judge", "engine_method", "concurrency", "benchmark"]) == ""
    assert SPEEDUP.axis_problem(["judge", "method"]) == ""  # the summary over the levels
    assert "asks for category" in SPEEDUP.axis_problem(["judge", "method", "category"])
    assert "its axis: none" in gates.EQUIVALENCE.axis_problem(["judge", "method", "concurrency"])
