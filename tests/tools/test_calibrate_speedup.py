"""tools/calibrate_speedup's step-cost report: the A/A limit and what a ceiling there catches."""

from tools.calibrate_speedup import report_step_costs


def test_step_cost_report_gives_the_aa_limit_and_the_slowed_copys_catches(capsys):
    costs = {
        ("ngram", "C=1"): {0: 0.100, 1: 0.110, 2: 0.095, 3: 0.104},  # run 0: the update run's stored value
        ("ngram_slow10", "C=1"): {0: 0.250, 1: 0.240, 2: 0.100, 3: 0.260},
    }
    report_step_costs({}, costs)
    line = next(s for s in capsys.readouterr().out.splitlines() if s.strip().startswith("ngram "))
    assert "A/A runs 0.095-0.110: no false alarm with draft_cost_tol >= 0.010" in line
    # excess over ngram in the same run: 0.130, 0.005, 0.156; only those above the A/A limit 0.010 count
    assert "ngram_slow10 exceeds it in the same run by 0.130 (0.005-0.156): caught 2/3" in line


def test_step_cost_report_says_when_nothing_was_timed(capsys):
    report_step_costs({}, {})
    assert "none measured" in capsys.readouterr().out


def test_each_check_is_counted_on_its_own_from_the_values_and_bounds(capsys):
    from tools.calibrate_speedup import check_verdicts, report_checks

    def row(method, metric, value, bound, ci_high=None):
        return {"gate": "speedup", "method": method, "key": "C=1", "metric": metric, "value": value,
                "bound": bound, "ci_high": ci_high}

    runs = [  # run 1: the speedup false-alarms on ngram; the step cost catches the slowed copy alone
        [row("ngram", "speedup", 1.20, 1.25, ci_high=1.24), row("ngram", "draft_cost", 0.017, 0.069),
         row("ngram_slow10", "speedup", 1.10, 1.14, ci_high=1.20), row("ngram_slow10", "draft_cost", 0.20, 0.067)],
        # run 2: both catch it; the speedup was not judged for ngram (no bound: a disturbed cell)
        [row("ngram", "speedup", 1.30, None, ci_high=1.40), row("ngram", "draft_cost", 0.018, 0.069),
         row("ngram_slow10", "speedup", 0.90, 1.20, ci_high=1.00), row("ngram_slow10", "draft_cost", 0.19, 0.068)],
    ]
    verdicts = {}
    for table in runs:
        for cell, failed in check_verdicts(table).items():
            verdicts.setdefault(cell, []).append(failed)
    report_checks(verdicts)
    out = capsys.readouterr().out
    assert "ngram          C=1    speedup false alarms 1/1; step cost false alarms 0/2" in out
    assert "ngram_slow10   C=1    speedup caught 1/2; step cost caught 2/2" in out


def _calibrate_until_sigterm(tmp_path):
    """Run the calibration on profile `calib` in tmp_path with a gate run that stores baselines and hangs;
    SIGTERM it once the gate run has started. Returns what baselines/calib held during the gate run."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    started = tmp_path / "started"
    code = ("import time, pathlib, tools.calibrate_speedup as c\n"
            "def gate(*a, **k):\n"
            "    d = pathlib.Path('baselines/calib'); held = sorted(p.name for p in d.glob('*')) if d.exists() else []\n"
            "    d.mkdir(parents=True, exist_ok=True); (d / 'cpu-x.json').write_text('{\"calibration\": true}')\n"
            f"    t = pathlib.Path({str(started)!r} + '.tmp'); t.write_text(' '.join(held)); t.rename({str(started)!r})\n"
            "    time.sleep(60)\n"
            "c.run_gate = gate\nc.main(['--profile', 'calib', '--runs', '1'])\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env)
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    held = started.read_text()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    return held


def test_a_sigterm_puts_the_checkouts_baselines_back(tmp_path):
    """The calibration moves baselines/<profile> aside while it runs; a SIGTERM mid-run must restore it."""
    stored = tmp_path / "baselines" / "calib" / "cpu-x.json"
    stored.parent.mkdir(parents=True)
    stored.write_text('{"kept": true}')
    held = _calibrate_until_sigterm(tmp_path)
    assert held == "", "the calibration did not move the checkout's baselines aside"
    assert stored.read_text() == '{"kept": true}' and not (tmp_path / "baselines" / "calib.kept").exists()


def test_a_checkout_without_baselines_is_left_without_them(tmp_path):
    """Where the checkout had no baselines for the profile, the calibration's own are not left behind."""
    _calibrate_until_sigterm(tmp_path)
    assert not (tmp_path / "baselines" / "calib").exists()
