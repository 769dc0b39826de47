"""Release-to-release work: an upgrade rehearsed old-vs-new in one run (rehearse, rehearse_requests),
the vLLM release matrix (matrix), the virtualenvs of other releases (venvs), calibrating a runner's
tolerances (calibrate), bisecting a regression over releases (bisect/) and fetching a profile's hub
models before a run (download).

Neighbours: below is everything a run is made of (run/, engines/, checks/, report/, store/, prompts/,
profile/); above is cli/ only, one module per `specgate` command, which parses the options and calls
in here. Nothing here builds or reads argparse options.
"""
