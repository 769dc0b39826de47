"""Run by Python at start-up in every process specgate starts an engine or server in (this directory
is put first on their PYTHONPATH by specgate.lifetime.watchdog.python_stacks_env).

It registers a faulthandler signal (SIGUSR2) that writes all of the process's thread stacks into the
file $SPECGATE_STACKS_FILE, so that the suite's watchdog can ask a stalled engine what it is doing
when py-spy cannot read it (not installed, or not allowed to trace). Then it runs the interpreter's
own sitecustomize, if there is one further on the path, as Python would have.
"""

import os

_path = os.environ.get("SPECGATE_STACKS_FILE")
if _path:
    try:
        import faulthandler
        import signal

        _fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        faulthandler.register(signal.SIGUSR2, file=_fd, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        pass


def _chain() -> None:
    import importlib.machinery
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_chain()
