"""Endpoint mode end to end: `vllm serve` of the profile's target with its ngram method on loopback,
measured by a second pytest run with --specgate-endpoint (started and stopped here).

It runs before any in-process engine boots (it has no `specgate` marker, so it keeps its place before
the gate tests), so two engines never share the machine.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.engines.endpoint import Endpoint
from specgate.engines.server import Server, ServerError
from specgate.figures.load import trial_prompts
from specgate.lifetime import reaper

pytestmark = pytest.mark.gpu
SERVED_METHOD = "ngram"


@pytest.fixture(scope="module")
def server(specgate_plan):
    """`vllm serve` with exactly the engine arguments the in-process gate uses for this method."""
    if SERVED_METHOD not in specgate_plan.profile.methods:
        pytest.skip(f"profile {specgate_plan.profile.name} has no method '{SERVED_METHOD}' to serve")
    method = specgate_plan.profile.methods[SERVED_METHOD]
    log = specgate_plan.out_dir / "engines" / "endpoint-server.log"
    try:
        with Server(Path(sys.executable), specgate_plan.profile, method, specgate_plan.root, log) as running:
            yield running.url
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)


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
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
        "-q",
        "--specgate-profile",
        str(specgate_plan.profile.path),
        "--specgate-endpoint",
        f"{SERVED_METHOD}={server}",
        "--specgate-out",
        str(out),
        "--benchmark-disable",
        str(specgate_plan.root / "tests" / "gate"),
        "-k",
        "not endpoint",
    ]
    reaper.set_phase("endpoint test: the gate in endpoint mode")
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
    lengths = [
        r["value"]
        for r in table
        if r["method"] == SERVED_METHOD and r["gate"] == "acceptance" and r["metric"] == "mean_acceptance_length"
    ]
    assert len(lengths) == len(specgate_plan.inputs.categories()) and all(1.0 < x <= 4.0 for x in lengths), lengths
