"""Measuring: the figures a run takes and their own arithmetic. Acceptance from the engine's
spec-decode counters (acceptance), greedy equivalence, tie-aware (equivalence), closed-loop load at a
concurrency (load), the scheduler's KV-cache counters (kvstats), memory readings (memory), confidence
intervals and other statistics (stats), what a request gave as a user sees it (completions) and the
two-sample test at T > 0 (two_sample).

Neighbours: below are profile/ (the tolerances and settings a figure is taken with), models, machine
and errors; above are store/ (stored figures), specgate.backend and engines/ (who fill these in),
checks/ (who judge them) and run/. No vLLM is imported here at module level, and nothing here boots
an engine.
"""
