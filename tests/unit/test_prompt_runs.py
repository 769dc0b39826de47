"""A run on SPEED-Bench-shaped prompts, with fake engines: the speedup gate loads its own set, the summary
names each set's source and prompts per category, run.json records the ids and what did not fit, and the
report's heatmap and per-category tables take SPEED-Bench's 11 categories."""

import json
import time
from pathlib import Path

import pytest

from specgate.profile import load_profile
from specgate.profile.prompt_sources import SPEED_BENCH_ENV
from specgate.run import results
from specgate.testing import fake_session

ROOT = Path(__file__).resolve().parents[2]
SPEED_BENCH = ROOT / "tests" / "unit" / "data" / "speed_bench"
PROFILE = f"""
name = "fake"
hardware = "cpu"
target = "{ROOT / "fixtures" / "zoo" / "target"}"
max_model_len = 1024
max_tokens = 8
concurrency = [1]
prompts = [{{ speed_bench = "qualitative", per_category = 1, dir = "{SPEED_BENCH}" }}]
[methods.good]
speculative_config = {{ method = "ngram", num_speculative_tokens = 2 }}
[speedup]
max_tokens = 32
trials = 2
prompts = [{{ speed_bench = "throughput_2k", dir = "{SPEED_BENCH}" }}]
"""
FALLBACK = f"""
name = "fake"
hardware = "cpu"
target = "{ROOT / "fixtures" / "zoo" / "target"}"
max_model_len = 512
max_tokens = 8
concurrency = [1]
prompts = [{{ speed_bench = "qualitative", per_category = 1, fallback = "fixtures/prompts/embedded.jsonl" }}]
[methods.good]
speculative_config = {{ method = "ngram", num_speculative_tokens = 2 }}
"""


def profile_from(tmp_path, text):
    path = tmp_path / "fake.toml"
    path.write_text(text)
    return load_profile(path, ROOT)


@pytest.fixture
def session(tmp_path):
    s = fake_session(profile_from(tmp_path, PROFILE), tmp_path)
    yield s
    s.release_all()


@pytest.mark.needs_vllm
def test_the_speedup_gate_loads_its_own_set_and_acceptance_keeps_the_qualitative_one(session):
    for method in ("baseline", "good"):
        session.judge("speedup", method, 1)
    sent = {
        r.prompt_id for m in ("baseline", "good") for run in session.store.load_trials(m, 1).runs for r in run.requests
    }
    assert sent == {f"throughput_2k/{tier}-{i}" for tier in ("low_entropy", "mixed", "high_entropy") for i in (0, 1)}
    assert session.store.load_inputs.max_prompt_tokens == 1024 - 32
    assert len(session.plan.inputs.tokenized()) == 11 and all(
        p.id.startswith("qualitative/") for p in session.plan.inputs.tokenized()
    )


@pytest.mark.needs_vllm
def test_summary_and_run_json_name_each_sets_source_per_category_counts_ids_and_skips(session, tmp_path):
    session.judge("equivalence", "baseline")
    for method in ("baseline", "good"):
        session.judge("speedup", method, 1)
    lines = session.summary_lines()
    acceptance = next(line for line in lines if line.startswith("prompts for equivalence and acceptance: "))
    assert (
        f"SPEED-Bench qualitative ({SPEED_BENCH / 'qualitative.jsonl'}): 11 categories x 1 of 3 (seeded draw) = 11 "
        "prompts" in acceptance
    )
    load = next(line for line in lines if line.startswith("prompts for the speedup load (32 output tokens each): "))
    assert load.endswith("3 categories x 2 = 6 prompts; 3 longer than 992 tokens skipped"), load
    run = results.run_record(session, [], time.time(), lines)
    record = json.loads(json.dumps(run.prompts))  # as run.json holds it
    (acc,) = record["equivalence_acceptance"]["entries"]
    assert acc["per_category"] == 1 and len(acc["prompt_ids"]) == 11 and acc["used"] == {c: 1 for c in acc["available"]}
    assert (
        acc["available"]["coding"] == 3
        and acc["skipped_too_long"] == []
        and record["equivalence_acceptance"]["tokenized"]
    )
    (speed,) = record["speedup"]["entries"]
    assert speed["per_category"] == "all" and speed["too_long"] == "skip" and len(speed["prompt_ids"]) == 6
    assert sorted(speed["skipped_too_long"]) == [
        f"throughput_2k/{t}-2" for t in ("high_entropy", "low_entropy", "mixed")
    ]
    assert record["speedup"]["max_prompt_tokens"] == 992


@pytest.mark.needs_vllm
def test_the_draw_is_the_same_in_every_run(tmp_path):
    ids = []
    for _ in range(2):
        s = fake_session(profile_from(tmp_path, PROFILE), tmp_path)
        ids.append([p.id for p in s.plan.inputs.tokenized()])
    assert ids[0] == ids[1]


def test_a_fallback_is_said_in_the_summary_notes_and_collects_the_fallbacks_categories(tmp_path, monkeypatch):
    monkeypatch.delenv(SPEED_BENCH_ENV, raising=False)
    s = fake_session(profile_from(tmp_path, FALLBACK), tmp_path)
    assert s.plan.inputs.categories()[0] == "code_continuation" and len(s.plan.inputs.loaded()) == 60
    lines = s.summary_lines()
    note = (
        f"equivalence and acceptance prompts: SPEED-Bench qualitative is not on this machine (set ${SPEED_BENCH_ENV} "
        "to its directory), so fixtures/prompts/embedded.jsonl stands in"
    )
    assert (
        note in lines
        and "prompts (every gate): fixtures/prompts/embedded.jsonl: 5 categories x 12 = 60 prompts" in lines
    )
    assert note in results.run_record(s, [], time.time(), lines).notes


@pytest.mark.needs_vllm
def test_the_report_takes_eleven_categories(session, tmp_path):
    """The acceptance heatmap, per-position curves and the per-category table read categories from the data."""
    from specgate import report

    categories = session.plan.inputs.categories()
    assert len(categories) == 11
    for category in categories:
        session.judge("acceptance", "good", category)
    table = report.normalize(results.measurement_table(session.judgements.values()))
    fig = report.plot_acceptance_heatmap(table)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == categories
    assert report.plot_position_curves(table) is not None
    paths = results.write_run(session, [], time.time(), session.summary_lines())
    markdown = paths["summary"].read_text()
    assert all(f"| good | {c} |" in markdown for c in categories)
    assert (tmp_path / "results" / "plots" / "acceptance_heatmap.png").is_file()
    assert (
        len(json.loads(paths["run"].read_text())["prompts"]["equivalence_acceptance"]["entries"][0]["prompt_ids"]) == 11
    )
