"""Release-to-release work: an upgrade rehearsed old-vs-new in one run (rehearse, rehearse_requests),
the vLLM release matrix (matrix), the virtualenvs of other releases (venvs), calibrating a runner's
tolerances (calibrate), bisecting a regression over releases (bisect/), fetching a profile's hub
models before a run (download), and a new CUDA release met in one go (release_day: its sources read
with ast by vllm_tree / vllm_facts / vllm_speculators, compared by changes, turned into a runner
owner's to-do list by advice, the project's suites run on it by suites, printed by day_report).

Neighbours: below is everything a run is made of (run/, engines/, checks/, report/, store/, prompts/,
profile/); above is cli/ only, one module per `specgate` command, which parses the options and calls
in here. Nothing here builds or reads argparse options.
"""
