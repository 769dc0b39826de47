"""One run: the session that composes the parts (session), every measurement taken once and stored for
the checks (measurements), the scenarios' runs, what they hold, and the edges' and the requests scenario's
requests (scenarios, scenario_records, edges, request_matrix), and the run's results: its table, summary
and files (results).

Neighbours: below are checks/ (the verdicts), report/ (what a person reads), engines/ (the host the
session drives), figures/, store/ (the session passes the baselines' history in), prompts/ and
profile/; above are plugin/ (pytest drives the session), specgate.testing, release/ and cli/.
"""
