"""What vLLM is given for one method's engine, in process (engine.py) or as a server (server.py): the
engine arguments (the profile's, the method's, zoo references as local paths) and the environment
it starts under (`vllm_env`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specgate.lifetime.watchdog import python_stacks_env
from specgate.models import resolve as resolve_model
from specgate.profile import Method, Profile
from specgate.vllm_compat import interpreted


def engine_kwargs(profile: Profile, method: Method, root: Path) -> dict[str, Any]:
    """The engine arguments (vLLM EngineArgs fields) for this method; zoo references become local paths. Asked
    before this process imports vLLM for the profile's engines (an in-process engine's boot, a server's start):
    where they run V2 in Triton's interpreter, the interpreter stands in for triton-cpu here first, as vLLM's front
    end here checks V2's config against Triton (specgate.vllm_compat.interpreted)."""
    if interpreted.wanted(profile.hardware, profile.model_runner):
        interpreted.install()
    kwargs: dict[str, Any] = dict(
        model=resolve_model(profile.target, root),
        dtype=profile.dtype,
        max_model_len=profile.max_model_len,
        seed=profile.seed,
        disable_log_stats=False,  # the spec-decode counters need stats on
    )
    kwargs.update(profile.engine_kwargs)
    own = method.engine_kwargs
    # the profile's pins apply to the profile's target and tokenizer, not to a method's own (its kwargs pin those)
    pins = {"revision": profile.target_revision, "code_revision": profile.code_revision}
    pins = {k: v for k, v in pins.items() if v and "model" not in own}
    if profile.tokenizer_revision and "tokenizer" not in own:
        pins["tokenizer_revision"] = profile.tokenizer_revision
    kwargs.update(pins)
    kwargs.update(own)
    for key in ("model", "tokenizer"):  # a method may bring its own target (MTP lives in the target)
        if key in kwargs:
            kwargs[key] = resolve_model(kwargs[key], root)
    if method.speculative_config is not None:
        sc = dict(method.speculative_config)
        for key in ("model", "tokenizer"):
            if key in sc:
                sc[key] = resolve_model(sc[key], root)
        if "model" not in sc and method.kind.endswith("mtp"):
            # vLLM loads an MTP drafter from the target's repository at the drafter's own revision (default: the
            # newest), not the target's: the target's pins are the drafter's too
            for key in ("revision", "code_revision"):
                if kwargs.get(key):
                    sc.setdefault(key, kwargs[key])
        kwargs["speculative_config"] = sc
    return kwargs


def vllm_deadline_env(profile: Profile) -> dict[str, str]:
    """vLLM's own start-up limit, set no lower than the suite's boot deadline. It does not bound a boot
    (it is checked only after the start-up handshake, inside which the model loads: v1/engine/
    core_client.py 0.33:762 vs v1/engine/utils.py 0.33:1392-1451), but where it applies it must not
    give up before boot_timeout_s does. Read when vLLM is imported: set before that."""
    return {"VLLM_ENGINE_READY_TIMEOUT_S": str(int(profile.boot_timeout_s))}


def vllm_env(profile: Profile, stacks: Path, ipc: Path | None) -> dict[str, str]:
    """The variables every engine and server starts under: where its Python stacks go on a deadline, vLLM's
    start-up limit, where its sockets go, its model runner, and the profile's own [engine] env (last: they win)."""
    env = {**python_stacks_env(stacks), **vllm_deadline_env(profile), **ipc_env(ipc)}
    return {**env, **runner_env(profile, env["PYTHONPATH"]), **profile.engine_env}


def runner_env(profile: Profile, pythonpath: str) -> dict[str, str]:
    """The profile's [engine] model_runner: VLLM_USE_V2_MODEL_RUNNER where it names one; for V2 on a CPU without
    triton-cpu, Triton's interpreter in its place (specgate.vllm_compat.interpreted: its sitecustomize goes on
    PYTHONPATH right after the stacks directory, which runs it; this process gets it from engine_kwargs)."""
    if profile.model_runner == "auto":
        return {}
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1" if profile.model_runner == "v2" else "0"}
    if interpreted.wanted(profile.hardware, profile.model_runner):
        head, *rest = pythonpath.split(os.pathsep)
        env.update(interpreted.environment(), PYTHONPATH=os.pathsep.join([head, str(interpreted.SITE_DIR), *rest]))
    return env


def ipc_env(directory: Path | None) -> dict[str, str]:
    """Where vLLM binds its ZeroMQ sockets: `directory` (specgate.lifetime.ipc), or vLLM's default."""
    return {} if directory is None else {"VLLM_RPC_BASE_PATH": str(directory)}
