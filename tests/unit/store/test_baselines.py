"""Baseline files: validation with clear errors, merge, atomic write, old -> new diff."""

import json
import re

import pytest

from specgate import machine
from specgate.checks.acceptance import acceptance_floors
from specgate.errors import BaselineError
from specgate.figures.acceptance import AcceptanceResult, SpecCounters
from specgate.settings import Spelling
from specgate.store import baselines

PROV = {
    "vllm": "0.32.0",
    "torch": "2.13.0",
    "python": "3.11.7",
    "device": "cpu",
    "device_count": 2,
    "date": "2026-11-22T00:00:00+00:00",
    "git_revision": "abc1234",
}


def stored(tmp_path, methods=None):
    f = baselines.BaselineFile(tmp_path / "b" / "cpu-x-2c.json", "p", "cpu-x-2c", methods or {})
    baselines.write_atomic(f)
    return f


def test_missing_file_is_an_empty_baseline(tmp_path):
    f = baselines.load(tmp_path / "none.json", "p", "h")
    assert f.methods == {} and f.entry("ngram", "acceptance", "code") is None


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"schema": 1, "profile": "p", "hardware": "cpu-x-2c", "methods": {"ng', "not valid JSON"),
        ('{"schema": 2, "profile": "p", "hardware": "cpu-x-2c", "methods": {}}', "'schema' is 2"),
        ('{"schema": 1, "profile": "p", "hardware": "cpu-x-2c"}', "'methods' is missing"),
        ('{"schema": 1, "profile": "p", "hardware": "cpu-x-2c", "methods": {"a": {"speed": {}}}}', "not one of"),
        (
            '{"schema": 1, "profile": "p", "hardware": "cpu-x-2c", "methods": {"a": {"acceptance": {"c": {"x": '
            '"1"}}}}}',
            "not a number",
        ),
        ('{"schema": 1, "profile": "q", "hardware": "cpu-x-2c", "methods": {}}', "is for profile 'q'"),
    ],
)
def test_bad_baseline_file_is_named_and_left_untouched(tmp_path, content, words):
    path = tmp_path / "cpu-x-2c.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=words) as err:
        baselines.load(path, "p", "cpu-x-2c", Spelling({"update_baselines": "--store"}))
    assert str(path) in str(err.value) and str(err.value).endswith("rerun with --store.")
    with pytest.raises(BaselineError, match="rerun with update_baselines"):  # no spelling: the setting's name
        baselines.load(path, "p", "cpu-x-2c")
    assert path.read_text() == content


def test_merge_replaces_what_was_measured_and_keeps_the_rest(tmp_path):
    old = stored(
        tmp_path,
        {
            "ngram": {
                "provenance": PROV,
                "acceptance": {"code": {"mean_acceptance_length": 2.0}, "prose": {"mean_acceptance_length": 1.2}},
            },
            "eagle": {"provenance": PROV, "acceptance": {"code": {"mean_acceptance_length": 1.8}}},
        },
    )
    new_prov = dict(PROV, vllm="0.33.0")
    merged = baselines.merge(old, {"ngram": {"acceptance": {"code": {"mean_acceptance_length": 2.5}}}}, new_prov)
    assert merged.entry("ngram", "acceptance", "code") == {"mean_acceptance_length": 2.5}
    assert merged.entry("ngram", "acceptance", "prose") == {"mean_acceptance_length": 1.2}
    assert merged.entry("eagle", "acceptance", "code") == {"mean_acceptance_length": 1.8}
    assert merged.methods["eagle"]["provenance"]["vllm"] == "0.32.0"
    assert merged.methods["ngram"]["provenance"]["vllm"] == "0.33.0"
    assert old.entry("ngram", "acceptance", "code") == {"mean_acceptance_length": 2.0}  # not mutated
    baselines.write_atomic(merged)
    again = baselines.load(old.path, "p", "cpu-x-2c")
    assert again.methods == merged.methods
    assert [p.name for p in old.path.parent.iterdir()] == [old.path.name]  # no temp file left


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    old = stored(tmp_path, {"ngram": {"acceptance": {"code": {"mean_acceptance_length": 2.0}}}})
    before = old.path.read_text()

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(baselines.os, "replace", explode)
    with pytest.raises(OSError):
        baselines.write_atomic(baselines.merge(old, {"ngram": {"acceptance": {"code": {"x": 1.0}}}}, PROV))
    assert old.path.read_text() == before
    assert [p.name for p in old.path.parent.iterdir()] == [old.path.name]


def test_diff_table_shows_old_new_and_relative_change(tmp_path):
    old = stored(
        tmp_path, {"ngram": {"acceptance": {"code": {"mean_acceptance_length": 2.0, "per_position": [0.5, 0.25]}}}}
    )
    new = baselines.merge(
        old,
        {
            "ngram": {"acceptance": {"code": {"mean_acceptance_length": 1.5, "per_position": [0.5, 0.3]}}},
            "eagle": {"acceptance": {"code": {"mean_acceptance_length": 1.9}}},
        },
        PROV,
    )
    changes = baselines.diff(old, new)
    table = baselines.format_diff(changes, "title")
    assert "mean_acceptance_length" in table and "-25.0%" in table and "+20.0%" in table
    assert re.search(r"eagle +acceptance +code +\(1 values\).*new entry", table)
    assert len(changes) == 3  # per_position[0] did not move


def test_values_measured_as_none_are_left_out_so_the_file_loads_again(tmp_path):
    # suffix_throttled drafted nothing at C=4: its speedup record has no acceptance length
    old = stored(tmp_path, {})
    new = baselines.merge(old, {"canary": {"speedup": {"C=4": {"speedup": 0.7, "mean_acceptance_length": None}}}}, PROV)
    baselines.write_atomic(new)
    again = baselines.load(old.path, "p", "cpu-x-2c")
    assert again.entry("canary", "speedup", "C=4") == {"speedup": 0.7}
    assert [(c.field, c.new) for c in baselines.diff(old, new)] == [("speedup", 0.7)]


def test_hardware_keys_separate_devices():
    assert machine.hardware_key("NVIDIA H100 80GB HBM3", 1) == "nvidia-h100-80gb-hbm3-x1"
    assert machine.hardware_key("NVIDIA A100-SXM4-80GB", 4) == "nvidia-a100-sxm4-80gb-x4"
    assert machine.hardware_key("cpu", 2).startswith("cpu-") and machine.hardware_key("cpu", 2).endswith("-2c")


def result(drafts, accepted, per_pos):
    return AcceptanceResult(SpecCounters(drafts, drafts * len(per_pos), accepted, tuple(per_pos)), ())


def test_acceptance_check_fails_below_baseline_with_every_number_in_the_message():
    base = result(100, 150, [80, 50, 20]).record()
    worse = result(100, 100, [60, 30, 10])
    failures = [
        c.fails() for c in acceptance_floors(worse, base, 0.05, 0.10, {}, "vLLM 0.32.0, 2026-11-22") if c.fails()
    ]
    assert failures[0] == "mean acceptance length: measured 2, baseline 2.5 (vLLM 0.32.0, 2026-11-22), floor 2.375"
    assert len(failures) == 4  # the mean and all three positions


def test_acceptance_check_passes_unchanged_and_within_tolerance():
    base = result(100, 150, [80, 50, 20]).record()
    assert not [c for c in acceptance_floors(result(100, 150, [80, 50, 20]), base, 0.05, 0.10, {}) if c.fails()]
    assert not [c for c in acceptance_floors(result(100, 140, [78, 46, 18]), base, 0.05, 0.10, {}) if c.fails()]


def test_profile_floor_applies_without_a_baseline():
    checks = acceptance_floors(result(10, 27, [10, 9, 8]), None, 0.05, 0.1, {"acceptance_rate": 0.98})
    assert [c.fails() for c in checks] == ["acceptance rate (profile floor): measured 0.9, floor 0.98"]


def test_histogram_leaves_out_each_requests_prefill_step():
    r = AcceptanceResult.from_batch(SpecCounters(), {"a": [1, 4, 2, 1], "b": [1, 3]}, k=3)
    assert r.histogram == (0, 1, 1, 1, 1)
    assert json.loads(json.dumps(r.record()))["tokens_per_step_histogram"] == [0, 1, 1, 1, 1]


OLD_SPEED = {"speedup": {"C=1": {"speedup": 1.5}}, "memory": {"overhead": {"process_mib": 40.0}}}


def test_a_kept_group_of_figures_keeps_the_provenance_of_the_run_that_measured_it(tmp_path):
    # a file written before groups: one provenance, every group's
    old = stored(tmp_path, {"eagle": {"provenance": PROV, "acceptance": {"code": {"x": 1.0}}, **OLD_SPEED}})
    assert old.source("eagle", "speedup") == old.source("eagle", "acceptance") == "vLLM 0.32.0, 2026-11-22, rev abc1234"
    new_prov = dict(PROV, vllm="0.33.0", date="2026-12-01T00:00:00+00:00", git_revision="def5678")
    # the acceptance re-measured here; the speed and memory figures kept (stored on another machine, say)
    merged = baselines.merge(old, {"eagle": {"acceptance": {"code": {"x": 1.1}}, "speedup": {}}}, new_prov)
    assert merged.source("eagle", "acceptance") == "vLLM 0.33.0, 2026-12-01, rev def5678"
    assert merged.source("eagle", "structured") == "vLLM 0.33.0, 2026-12-01, rev def5678"  # portable, as acceptance
    assert (
        merged.source("eagle", "speedup") == merged.source("eagle", "memory") == "vLLM 0.32.0, 2026-11-22, rev abc1234"
    )
    prov = merged.methods["eagle"]["provenance"]
    assert prov["vllm"] == "0.33.0" and set(prov["groups"]) == {"speed", "memory"}  # the newest, and what it kept
    assert baselines.measured_by(merged) == ["vLLM 0.32.0 (2026-11-22)", "vLLM 0.33.0 (2026-12-01)"]
    baselines.write_atomic(merged)
    again = baselines.load(old.path, "p", "cpu-x-2c")  # the schema reads it back
    assert again.source("eagle", "speedup") == "vLLM 0.32.0, 2026-11-22, rev abc1234"
    # a later run that re-measures the speed figures only: they take its stamp, acceptance keeps 0.33.0's
    third = dict(PROV, vllm="0.34.0", date="2026-12-09T00:00:00+00:00")
    later = baselines.merge(again, {"eagle": {"speedup": {"C=1": {"speedup": 1.6}}}}, third)
    assert later.source("eagle", "speedup").startswith("vLLM 0.34.0, 2026-12-09")
    assert later.source("eagle", "acceptance").startswith("vLLM 0.33.0, 2026-12-01")
    assert later.source("eagle", "memory").startswith("vLLM 0.32.0, 2026-11-22")
    # everything re-measured by one run: one provenance again, no groups
    whole = baselines.merge(later, {"eagle": {"acceptance": {"code": {"x": 1}}, **OLD_SPEED}}, third)
    assert "groups" not in whole.methods["eagle"]["provenance"]
    # a method whose run stored nothing is not restamped
    assert baselines.merge(later, {"eagle": {"speedup": {}}}, PROV).methods == later.methods


def test_the_models_of_each_group_are_recorded_and_a_diff_names_the_ones_that_moved(tmp_path):
    def models(drafter):
        return {"eagle": {"target": {"ref": "zoo:target", "revision": "sha256:" + "a" * 64}, "drafter": drafter}}

    head = {"ref": "org/head", "revision": "1" * 40}
    old = baselines.merge(
        stored(tmp_path), {"eagle": {"acceptance": {"code": {"x": 1.0}}, **OLD_SPEED}}, PROV, models(head)
    )
    assert old.models("eagle", "speedup")["drafter"] == head
    moved = {"ref": "org/head", "revision": "2" * 40}
    new = baselines.merge(old, {"eagle": {"acceptance": {"code": {"x": 0.9}}}}, PROV, models(moved))
    assert new.models("eagle", "acceptance")["drafter"] == moved and new.models("eagle", "speedup")["drafter"] == head
    assert baselines.model_lines(old, new) == ["eagle's drafter: org/head 1111111 -> 2222222"]
    table = baselines.format_diff(baselines.diff(old, new), "title", old, new)
    assert "  model: eagle's drafter: org/head 1111111 -> 2222222" in table.splitlines()
    same = baselines.merge(old, {"eagle": {"acceptance": {"code": {"x": 1.0}}}}, PROV, models(head))
    assert baselines.format_diff([], "t", old, same) == "t: no value changed"
    unrecorded = stored(tmp_path, {"eagle": {"provenance": PROV, "acceptance": {"code": {"x": 1.0}}}})
    assert baselines.model_lines(unrecorded, new) == []  # nothing recorded on one side: not a move
