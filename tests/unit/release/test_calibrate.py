"""`specgate calibrate` without engines: the slowed copies it adds, the tolerances it suggests from A/A
runs, what they catch, the file it writes and how a run picks it up, and baselines it never moves."""

import argparse
import json
import tomllib
from pathlib import Path

import pytest

from specgate.cli import calibrate as cli_calibrate
from specgate.errors import ProfileError
from specgate.profile import find_profile, load_profile
from specgate.release import calibrate
from specgate.store import tolerances

ROOT = Path(__file__).resolve().parents[3]


def test_the_calibration_profile_adds_a_slower_canary_of_each_method(tmp_path):
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    path = tmp_path / "cpu-tiny.toml"
    path.write_text(calibrate.calibration_profile(profile, ["ngram", "mtp"], 0.074))
    loaded = load_profile(path, ROOT)
    slowed = loaded.methods["ngram_slowed"]
    assert slowed.slow_steps == 0.074 and slowed.canary_of == {"speedup": "ngram"}
    assert slowed.speculative_config == profile.methods["ngram"].speculative_config
    assert loaded.methods["mtp_slowed"].engine_kwargs == profile.methods["mtp"].engine_kwargs  # MTP's own target


def run(path, rows, baselines=None):
    path.mkdir(parents=True)
    (path / "measurements.json").write_text(json.dumps(rows))
    if baselines is not None:
        (path / "baselines.json").write_text(json.dumps({"methods": baselines}))
    return path


def speed(method, key, value, high, cost=None):
    rows = [{"gate": "speedup", "method": method, "key": key, "metric": "speedup", "value": value, "ci_high": high}]
    if cost is not None:
        rows.append(
            {"gate": "speedup", "method": method, "key": key, "metric": "draft_cost", "value": cost, "ci_high": None}
        )
    return rows


def test_tolerances_hold_whichever_aa_run_stored_and_the_slowed_copy_is_counted_against_them(tmp_path):
    stored = {
        "ngram": {"speedup": {"C=1": {"speedup": 1.20, "draft_cost": 0.018}}},
        "ngram_slowed": {"speedup": {"C=1": {"speedup": 1.10, "draft_cost": 0.17}}},
    }
    update = run(tmp_path / "update", [], stored)
    # A/A: point figures 1.20 (stored), 1.10, 1.22 and upper bounds 1.18, 1.26: had the 1.22 run stored, the
    # 1.18 bound falls 3.3 % short; draft_cost 0.018 (stored), 0.020, 0.022: 0.004 apart
    judged = [
        run(tmp_path / "r1", speed("ngram", "C=1", 1.10, 1.18, 0.020) + speed("ngram_slowed", "C=1", 1.05, 1.12, 0.18)),
        run(
            tmp_path / "r2", speed("ngram", "C=1", 1.22, 1.26, 0.022) + speed("ngram_slowed", "C=1", 1.15, 1.21, 0.021)
        ),
    ]
    cells = calibrate.read_runs(update, judged)
    suggested = calibrate.suggest(cells, ["ngram"])["ngram"]
    assert suggested == {"speedup_rtol": 0.06, "draft_cost_tol": 0.01}  # 0.033 + 0.02 -> 0.06; 1.5 x 0.004 -> 0.01
    # run 1 of the slowed copy: upper bound 1.12 < 1.20 x 0.94 and draft_cost 0.18 > 0.018 + 0.01; run 2 neither
    assert calibrate.caught(cells, "ngram", "C=1", suggested) == (1, 1, 1, 2)
    text = "\n".join(calibrate.report(cells, ["ngram"], {"ngram": suggested}, 2, 0.074))
    assert "| ngram | C=1 | 0.917 | 0.0040 | 1/2 | 1/2 | 1/2 |" in text


def test_the_tolerance_file_is_held_over_the_profile_on_its_machine_only(tmp_path):
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    path = tmp_path / "cpu-x-2c.tolerance.toml"
    path.write_text(
        tolerances.render(
            ["calibrated"], {"speedup_rtol": 0.12}, {"ngram": {"draft_cost_tol": 0.01}, "gone": {"draft_cost_tol": 0.5}}
        )
    )
    assert tomllib.loads(path.read_text())["methods"]["ngram"]["tolerance"] == {"draft_cost_tol": 0.01}
    held = tolerances.apply(profile, path)
    assert held.tolerance.speedup_rtol == 0.12 and held.methods["ngram"].tolerance == {"draft_cost_tol": 0.01}
    assert held.tolerance_file == str(path) and held.methods["draft_perturbed"].tolerance == {}  # a canary
    assert tolerances.apply(profile, tmp_path / "absent.toml") is profile
    path.write_text("[tolerance]\nspeedup_rtl = 0.1\n")
    with pytest.raises(ProfileError, match="holds speedup_rtl, which are not tolerances"):
        tolerances.apply(profile, path)


def test_a_method_tolerance_is_what_its_checks_read(tmp_path):
    from specgate.checks import Context

    profile = tolerances.apply(
        load_profile(find_profile("cpu-tiny", ROOT), ROOT),
        _file(tmp_path, "[methods.ngram.tolerance]\ndraft_cost_tol = 0.02\n"),
    )
    ctx = Context(profile, baselines=None)
    assert ctx.tolerance("ngram").draft_cost_tol == 0.02 and ctx.tolerance("draft_perturbed").draft_cost_tol == 0.0
    assert ctx.tolerance("suffix_throttled", "speedup").speedup_rtol == profile.tolerance.speedup_rtol  # its parent's


def _file(tmp_path, text):
    path = tmp_path / "t.tolerance.toml"
    path.write_text(text)
    return path


def test_baselines_an_interrupted_calibration_moved_aside_are_put_back(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECGATE_BASELINES_DIR", raising=False)
    kept = tmp_path / "baselines" / "cpu-tiny.kept"
    kept.mkdir(parents=True)
    (kept / "cpu-x-2c.json").write_text("{}")
    assert "put back" in calibrate.restore_kept(tmp_path, "cpu-tiny")
    assert (tmp_path / "baselines" / "cpu-tiny" / "cpu-x-2c.json").is_file() and not kept.exists()
    kept.mkdir()
    assert (
        "compare them" in calibrate.restore_kept(tmp_path, "cpu-tiny") and kept.exists()
    )  # both there: said, not moved


def test_the_gate_says_when_an_interrupted_calibration_left_baselines_aside(tmp_path, monkeypatch):
    from specgate.store.baseline_store import BaselineStore

    monkeypatch.delenv("SPECGATE_BASELINES_DIR", raising=False)
    (tmp_path / "baselines" / "cpu-tiny.kept").mkdir(parents=True)
    store = BaselineStore(tmp_path, load_profile(find_profile("cpu-tiny", ROOT), ROOT), "cpu-x-2c")
    assert any(
        "cpu-tiny.kept holds baselines an interrupted calibration moved aside" in line for line in store.header()
    )


def test_the_tie_aware_rule_comes_from_the_honest_near_ties_of_the_aa_runs(tmp_path):
    def eq(method, compared, diverged, forgiven, gaps):
        rows = [
            {"gate": "equivalence", "method": method, "key": "greedy", "metric": m, "value": v, "position": None}
            for m, v in (("compared", compared), ("diverged", diverged), ("forgiven", forgiven))
        ]
        return rows + [
            {
                "gate": "equivalence",
                "method": method,
                "key": "greedy",
                "metric": "logprob_gap",
                "value": g,
                "position": i,
            }
            for i, g in enumerate(gaps)
        ]

    runs = [
        run(tmp_path / "r1", eq("ngram", 60, 1, 0, [0.03125]) + eq("mtp", 60, 2, 3, [0.03125, 0.03125, 0, 0, 0])),
        run(tmp_path / "r2", eq("ngram", 60, 1, 0, [0.03125]) + eq("mtp", 60, 2, 2, [0.03125, 0.03125, 0, 0])),
    ]
    divergences = calibrate.read_divergences(runs)
    assert divergences["mtp"].gaps[0] == [0.03125, 0.03125, 0, 0, 0] and divergences["mtp"].gapless == 0
    rule = calibrate.suggest_rule(divergences)
    assert rule == {"logprob_margin": 0.0625, "max_forgiven_share": 0.1}  # mtp's 5 of 60, plus one: 6 / 60
    assert "mtp: at most 5 of 60 prompts in a run" in "\n".join(calibrate.equivalence_lines(divergences, rule))


def test_the_tolerance_file_may_set_the_tie_aware_rule(tmp_path):
    profile = load_profile(find_profile("llama31-8b-h100", ROOT), ROOT)
    held = tolerances.apply(
        profile, _file(tmp_path, "[equivalence]\nlogprob_margin = 0.25\nmax_forgiven_share = 0.15\n")
    )
    assert (held.equivalence.logprob_margin, held.equivalence.max_forgiven_share, held.equivalence.mode) == (
        0.25,
        0.15,
        "tie-aware",
    )
    with pytest.raises(ProfileError, match=r"\[equivalence\] holds mode"):
        tolerances.apply(profile, _file(tmp_path, "[equivalence]\nmode = 1\n"))


def test_acceptance_rtol_comes_from_the_largest_aa_drop_of_a_category(tmp_path):
    stored = {
        "suffix": {
            "acceptance": {"doc_prose": {"mean_acceptance_length": 2.0}, "code": {"mean_acceptance_length": 3.0}}
        }
    }
    update = run(tmp_path / "update", [], stored)

    def acc(key, value):
        return {
            "gate": "acceptance",
            "method": "suffix",
            "key": key,
            "metric": "mean_acceptance_length",
            "value": value,
        }

    judged = [
        run(tmp_path / "r1", [acc("doc_prose", 1.986), acc("code", 3.0)]),
        run(tmp_path / "r2", [acc("doc_prose", 2.0), acc("code", 3.03)]),
    ]
    acceptance = calibrate.read_runs(update, judged, "acceptance")
    assert (
        calibrate.suggest({}, ["suffix"], acceptance)["suffix"]["acceptance_rtol"] == 0.015
    )  # 0.7 % + 0.5 %, rounded up
    deterministic = calibrate.read_runs(
        update, [run(tmp_path / "r3", [acc("doc_prose", 2.0), acc("code", 3.0)])], "acceptance"
    )
    assert calibrate.suggest({}, ["suffix"], deterministic)["suffix"]["acceptance_rtol"] == 0.01  # the floor


def test_request_acceptance_rtol_comes_from_the_largest_aa_drop_of_one_request(tmp_path):
    stored = {"eagle": {"acceptance": {"code": {"mean_acceptance_length": 2.0, "requests": {"code-01": [2.0, 2.0]}}}}}
    update = run(tmp_path / "update", [], stored)

    def request(value):
        row = {"gate": "acceptance", "method": "eagle", "key": "code", "metric": "request_acceptance_length[code-01]"}
        return {**row, "value": value}

    judged = [run(tmp_path / "r1", [request(1.8)]), run(tmp_path / "r2", [request(2.0)])]  # 10 % below, then equal
    suggested = calibrate.suggest({}, ["eagle"], calibrate.read_runs(update, judged, "acceptance"))["eagle"]
    assert suggested["request_acceptance_rtol"] == 0.105  # 10 % + 0.5 %


def test_load_acceptance_rtol_comes_from_the_largest_aa_drop_of_a_level(tmp_path):
    stored = {"suffix": {"load": {"C=1": {"mean_acceptance_length": 3.6}, "C=16": {"mean_acceptance_length": 3.3}}}}
    update = run(tmp_path / "update", [], stored)

    def level(key, value):
        return {"gate": "load", "method": "suffix", "key": key, "metric": "mean_acceptance_length", "value": value}

    judged = [
        run(tmp_path / "r1", [level("C=1", 3.6), level("C=16", 3.1)]),  # 6.1 % below its stored figure
        run(tmp_path / "r2", [level("C=1", 3.55), level("C=16", 3.3)]),
    ]
    suggested = calibrate.suggest({}, ["suffix"], None, calibrate.read_runs(update, judged, "load"))["suffix"]
    assert suggested == {"speedup_rtol": suggested["speedup_rtol"], "load_acceptance_rtol": 0.07}  # 6.1 % + 0.5 %
    assert "test_outputs_and_acceptance_hold_at_each_concurrency" in calibrate.CALIBRATED_TESTS  # no extra engine time


def test_a_storing_run_that_kept_no_speed_figures_stops_calibrate_before_the_judged_runs(tmp_path, monkeypatch):
    gates = []

    def gate(root, profile_path, methods, out, scratch, update):
        gates.append(out.name)
        # a disturbed machine: acceptance stored for both, speed figures for ngram's slowed copy only
        stored = {m: {"acceptance": {"doc_prose": {"mean_acceptance_length": 2.0}}} for m in methods}
        stored["ngram_slowed"]["speedup"] = {"C=1": {"speedup": 1.1}}
        run(out, [], stored)
        return 1.0

    monkeypatch.setattr(calibrate, "run_gate", gate)
    args = argparse.Namespace(
        root=ROOT, profile="cpu-tiny", methods="ngram", runs=3, slowdown=0.074, slowed=None, write=False, out=tmp_path
    )
    with pytest.raises(calibrate.CalibrationError, match=r"kept no speed figures for ngram: .*disturbed") as err:
        cli_calibrate.main(args)
    assert "ngram_slowed" not in str(err.value).split("for ")[1].split(":")[0]
    assert gates == ["update"]  # no judged run was spent on it


def test_a_level_no_judged_run_measured_stops_calibrate_saying_where(tmp_path, monkeypatch):
    """A level with a stored speedup that no judged run measured (each run's trials there were disturbed: not
    judged, not recorded) has no A/A figure: calibrate stops, naming the method and level, and writes no table
    or tolerances (it once suggested speedup_rtol 0.02, the floor, from no figure). A level one judged run
    measured keeps that run's figure (the disturbed cell is dropped, as docs/speedup-gate.md's calibrations)."""
    gates = []

    def gate(root, profile_path, methods, out, scratch, update):
        gates.append(out.name)
        if update:
            run(out, [], {m: {"speedup": {"C=1": {"speedup": 1.2}, "C=4": {"speedup": 1.5}}} for m in methods})
        else:  # C=1 measured in run 1 only; ngram's C=4 disturbed in both, its slowed copy's in run 2 only
            rows = [r for m in methods for r in speed(m, "C=1", 1.2, 1.3, 0.02)] if out.name == "run-1" else []
            run(out, rows + (speed("ngram_slowed", "C=4", 1, 1.1) if out.name == "run-1" else []))
        return 1.0

    monkeypatch.setattr(calibrate, "run_gate", gate)
    args = argparse.Namespace(
        root=ROOT, profile="cpu-tiny", methods="ngram", runs=2, slowdown=0.074, slowed=None, write=False, out=tmp_path
    )
    with pytest.raises(
        calibrate.CalibrationError, match=r"none of the 2 judged runs .* kept a speedup for ngram at C=4: "
    ) as err:
        cli_calibrate.main(args)
    assert "ngram_slowed" not in str(err.value) and "C=1" not in str(err.value)
    assert gates == ["update", "run-1", "run-2"]
    assert not (tmp_path / "calibration.md").exists()


def test_draft_rtol_comes_from_the_largest_aa_move_of_a_categorys_or_a_levels_drafted_steps(tmp_path):
    stored = {
        "suffix": {
            "acceptance": {"code": {"draft_share": 0.5, "draft_tokens_per_token": 0.9}},
            "load": {"C=16": {"draft_share": 0.6, "draft_tokens_per_token": 1.0}},
        }
    }
    update = run(tmp_path / "update", [], stored)

    def row(gate, key, metric, value):
        return {"gate": gate, "method": "suffix", "key": key, "metric": metric, "value": value}

    judged = [
        run(tmp_path / "r1", [row("acceptance", "code", "draft_share", 0.48), row("load", "C=16", "draft_share", 0.6)]),
        # a policy is held both ways: 3 % more draft tokens than stored counts as much as 3 % fewer
        run(tmp_path / "r2", [row("load", "C=16", "draft_tokens_per_token", 1.03)]),
    ]
    acceptance, load = (calibrate.read_runs(update, judged, gate) for gate in ("acceptance", "load"))
    assert calibrate.suggest({}, ["suffix"], acceptance, load)["suffix"]["draft_rtol"] == 0.045  # 4 % + 0.5 %
