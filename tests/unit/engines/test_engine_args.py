"""The environment an engine starts under: [engine] model_runner as vLLM reads it, and for V2 on a CPU without
triton-cpu, Triton's interpreter standing in (specgate.vllm_compat.interpreted), its sitecustomize run by the
engine's processes after specgate's stacks one, and any further one after it."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.engines import engine_args
from specgate.lifetime.watchdog import STACKS_DIR
from specgate.profile import load_profile
from specgate.vllm_compat import interpreted
from tests.unit.fakes import ROOT, fake_profile

NGRAM = '[methods.ngram]\nspeculative_config = { method = "ngram", num_speculative_tokens = 3 }\n'


def profile(tmp_path, runner="auto", hardware="cpu"):
    path = tmp_path / "p.toml"
    path.write_text(fake_profile(f'[engine]\nmodel_runner = "{runner}"\n' + NGRAM))
    return dataclasses.replace(load_profile(path, ROOT), hardware=hardware)


def env_of(tmp_path, prof):
    return engine_args.vllm_env(prof, tmp_path / "e.stacks", None)


def test_auto_leaves_the_runner_to_vllm(tmp_path):
    env = env_of(tmp_path, profile(tmp_path))
    assert "VLLM_USE_V2_MODEL_RUNNER" not in env and interpreted.FLAG not in env and "TRITON_INTERPRET" not in env


@pytest.mark.parametrize("runner, value", [("v1", "0"), ("v2", "1")])
def test_a_named_runner_is_asked_of_vllm_and_cuda_runs_no_interpreter(tmp_path, runner, value, installs):
    prof = profile(tmp_path, runner, "cuda")
    engine_args.engine_kwargs(prof, prof.methods["ngram"], ROOT)  # installs nothing: no interpreter asked for
    env = env_of(tmp_path, prof)
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == value
    assert interpreted.FLAG not in env and str(interpreted.SITE_DIR) not in env["PYTHONPATH"] and not installs


@pytest.fixture
def installs(monkeypatch):
    """No triton-cpu here; interpreted.install (which the engine's front end in this process gets) recorded."""
    calls = []
    monkeypatch.setattr(interpreted, "triton_cpu_installed", lambda: False)
    monkeypatch.setattr(interpreted, "install", lambda: calls.append(1))
    return calls


def test_v2_on_a_cpu_without_triton_cpu_runs_in_the_interpreter(tmp_path, monkeypatch, installs):
    prof = profile(tmp_path, "v2")
    engine_args.engine_kwargs(prof, prof.methods["ngram"], ROOT)
    assert installs == [1]  # in this process too, before it imports vLLM for the engine
    env = env_of(tmp_path, prof)
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1" and env["TRITON_INTERPRET"] == "1" and env[interpreted.FLAG] == "1"
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[:2] == [str(STACKS_DIR), str(interpreted.SITE_DIR)], paths
    monkeypatch.setattr(interpreted, "triton_cpu_installed", lambda: True)  # the real backend: nothing stands in
    env = env_of(tmp_path, profile(tmp_path, "v2"))
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1" and interpreted.FLAG not in env


def test_the_profiles_own_env_still_wins(tmp_path, installs):
    prof = dataclasses.replace(profile(tmp_path, "v2"), engine_env={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert env_of(tmp_path, prof)["VLLM_USE_V2_MODEL_RUNNER"] == "0"


def test_an_engine_process_gets_the_stand_in_and_every_sitecustomize_runs(tmp_path, monkeypatch, installs):
    """A Python started as an engine's processes are: the stacks file registered (specgate's first
    sitecustomize), Triton's "cpu" entry standing in (the second), and a sitecustomize of the user's further on
    the path still run (each chains to the next)."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(theirs), str(ROOT)]))
    env = {**os.environ, **env_of(tmp_path, profile(tmp_path, "v2"))}
    code = (
        "import os, faulthandler, signal, sys\n"
        "from triton.backends import backends\n"
        "from specgate.vllm_compat import interpreted\n"
        "print(os.environ.get('THEIRS_RAN'), 'cpu' in backends, not interpreted.triton_cpu_installed(),"
        " sys.modules['sitecustomize'].__file__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ran, stand_in, ours, last = out.stdout.split()
    assert (ran, stand_in, ours) == ("1", "True", "True"), out.stdout
    assert Path(last) == theirs / "sitecustomize.py"
