"""What is stored between runs: the baseline files and their format (baselines), a run's view of them
(baseline_store), their git history (history), a run's typed, versioned record (run.json: run_record),
the tolerances calibrated on one machine (tolerances) and which models at which revision a baseline
records (revisions).

Neighbours: below are profile/ (what a file is for), figures/ (the statistics a stored figure is held
with), models, machine and errors; above are checks/ (the bounds read from the store), report/, run/
(the session passes the history in) and release/ (calibration, bisection) and cli/. Nothing here boots an
engine or judges a figure.
"""
