"""Run by Python at start-up in every process of an engine or server whose profile runs Model Runner V2 on a
CPU in Triton's interpreter (this directory is put on their PYTHONPATH, after specgate's stacks directory, by
specgate.engines.engine_args, only for such a profile): where $SPECGATE_TRITON_INTERPRETED is 1, it stands
Triton's interpreter in for triton-cpu before vLLM is imported (specgate.vllm_compat.interpreted.install).
Then it runs the next sitecustomize further on the path, if there is one, as Python would have.
"""

import os
import sys

if os.environ.get("SPECGATE_TRITON_INTERPRETED") == "1":
    try:
        from specgate.vllm_compat import interpreted

        interpreted.install()
    except Exception as exc:  # vLLM then says it itself: "Model Runner V2 requires Triton."
        print(f"specgate: Triton's interpreter could not stand in for triton-cpu here: {exc!r}", file=sys.stderr)


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.abspath(p or ".") for p in sys.path]
    rest = sys.path[paths.index(here) + 1 :] if here in paths else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_chain()
