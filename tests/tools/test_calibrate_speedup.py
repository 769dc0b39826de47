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
