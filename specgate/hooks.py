"""Hooks specgate adds to pytest (registered by the plugin). Implement them in a conftest.py.

    pytest_specgate_boot_engine(profile, method, root, log_path)   your own engine for a method

A conftest that supplies its own engine:

    from specgate.backend import Backend
    from specgate.hooks import Method, Profile

    def pytest_specgate_boot_engine(profile: Profile, method: Method, root, log_path) -> Backend | None:
        if method.kind == "ngram":
            return MyEngine(method.name, profile.target, method.speculative_config)
        return None  # every other method: specgate boots vLLM as usual

What the hook receives is public (these names, kept from release to release; the rest of either class is
specgate's own and may change in any commit):

    Profile   name, path (the profile file), target (as written: a local path, a hub id, or 'zoo:NAME',
              the embedded model in <root>/fixtures/zoo/NAME), dtype, hardware ('cpu' |
              'cuda'), max_model_len, max_tokens, seed, engine_kwargs and engine_env (every engine's
              arguments and environment), boot_timeout_s, stall_timeout_s (the run's deadlines, seconds),
              methods (name -> Method), baseline (the Method without speculation)
    Method    name ('baseline' for the engine without speculation), kind (speculative_config's method,
              'baseline'), speculative_config (None for the baseline), num_speculative_tokens,
              draft_model (a model reference as the target's, or None), engine_kwargs (this method's
              engine arguments over the profile's; `model` there replaces the target)

What it returns implements specgate.backend.Backend (every member the gate calls, each saying how an
engine declines what it cannot do); specgate.testing.FakeEngine is one, scripted.
"""

from __future__ import annotations

import pytest

from specgate.profile import Method, Profile

__all__ = ["Method", "Profile", "pytest_specgate_boot_engine"]  # the public surface (specgate.PUBLIC)


@pytest.hookspec(firstresult=True)
def pytest_specgate_boot_engine(profile: Profile, method: Method, root, log_path):
    """Return a live engine (a specgate.backend.Backend) for `method` of `profile`, or None to let
    specgate boot vLLM. `root` is the project root (where fixtures/profiles is), `log_path` the file the
    engine's own log belongs in (the summary and a boot failure quote it). Raise
    specgate.errors.EngineBootError for an engine that refuses to start: the method's tests error, or
    skip with your message where the profile's `expected_boot_error` matches it. A method's engine is
    asked for again only after the gate shut the last one down; the preemption scenario asks for a second
    engine of the method with more engine_kwargs (`num_gpu_blocks_override`: its KV cache in blocks), its
    log `<method>.preemption.log`. specgate.testing implements this hook with scripted FakeEngines."""
