"""tools.zoo.measure with a fake engine on a virtual clock: how the card's C=1 speedups are paired."""

from pathlib import Path

import pytest

from specgate.backend import BatchResult
from specgate.figures.acceptance import SpecCounters
from specgate.figures.equivalence import GreedyOutput

ROOT = Path(__file__).resolve().parents[2]
TRUE_SPEEDUP = 1.25


class DriftingMachine:
    """Virtual time in which every prompt costs 0.2 % more than the one before (the machine keeps
    slowing down), as this machine's speed drifted by 25 % within one real run."""

    def __init__(self):
        self.now, self.prompts_run, self.alive = 0.0, 0, []

    def __call__(self):
        return self.now

    def run(self, cost: float) -> None:
        self.prompts_run += 1
        self.now += cost * (1 + self.prompts_run / 500)


class FakeEngine:
    def __init__(self, machine: DriftingMachine, method):
        self.machine, self.method = machine, method
        machine.alive.append(method.name)

    def run_batch(self, prompts, max_tokens):
        k = self.method.num_speculative_tokens
        for _ in prompts:
            self.machine.run(1 / TRUE_SPEEDUP if k else 1.0)
        out = {p.id: GreedyOutput((10, 11, 12), ()) for p in prompts}
        drafts = len(prompts)
        counters = (
            SpecCounters(drafts, drafts * k, drafts, (drafts,) + (0,) * (k - 1)) if k else SpecCounters(0, 0, 0, ())
        )
        return BatchResult(out, {p.id: [1, 2] for p in prompts}, counters)

    def shutdown(self):
        self.machine.alive.remove(self.method.name)


@pytest.mark.needs_vllm
def test_measure_pairs_each_method_round_with_a_baseline_round_so_drift_cancels(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    import specgate.engines.engine
    from tools.zoo import measure

    machine = DriftingMachine()
    boots = []

    def boot(profile, method, root, log_path):
        boots.append((method.name, list(machine.alive)))
        return FakeEngine(machine, method)

    monkeypatch.setattr(specgate.engines.engine, "boot_engine", boot)
    monkeypatch.setattr(measure.time, "perf_counter", machine)
    results = measure.measure(ROOT, ["ngram", "eagle3"], rounds=6, log_dir=tmp_path)

    # one baseline engine, alive next to every method's, and shut down at the end
    assert boots == [("baseline", []), ("ngram", ["baseline"]), ("eagle3", ["baseline"])]
    assert machine.alive == []
    # the machine slowed down by more than 10 % over the timed rounds; the pairs still see the true ratio
    assert max(results["baseline_rounds_s"]) / min(results["baseline_rounds_s"]) > 1.1
    for name in ("ngram", "eagle3"):
        rec = results["methods"][name]
        speed = rec["speedup_c1"]
        assert speed["n"] == 6 and rec["outputs_equal_baseline"]
        assert speed["low"] <= speed["median"] <= speed["high"]
        assert speed["median"] == pytest.approx(TRUE_SPEEDUP, rel=0.03)
        assert speed["high"] - speed["low"] < 0.02
    assert results["timing_tokens"] == 3 * results["timing_prompts"]
    assert results["methods"]["eagle3"]["acceptance"]["doc_prose"] == pytest.approx(2.0)


def _record(date, methods, **extra):
    rec = {
        "machine": "cpu-amd-epyc-2c",
        "prompts_sha256": "abc",
        "rounds": 6,
        "timing_prompts": 10,
        "timing_tokens": 480,
        "date": date,
        "samples": {"doc_prose": "text"},
    }
    rec["methods"] = {
        name: {"baseline_rounds_s": [base] * 2, "speedup_c1": {"median": speed}}
        for name, (base, speed) in methods.items()
    }
    rec["baseline_rounds_s"] = [s for r in rec["methods"].values() for s in r["baseline_rounds_s"]]
    return {**rec, **extra}


def test_merge_replaces_only_the_methods_measured_again(tmp_path):
    from tools.zoo.measure import merge_into

    previous = _record("2026-11-01", {"ngram": (5.0, 1.4), "mtp": (5.0, 1.06)})
    merged = merge_into(previous, _record("2026-11-24", {"mtp": (6.0, 1.2)}), tmp_path / "measured.json")
    assert merged["methods"]["ngram"] == previous["methods"]["ngram"]
    assert merged["methods"]["mtp"]["speedup_c1"]["median"] == 1.2
    # the card's ms per baseline token reads every kept round, old and new
    assert sorted(merged["baseline_rounds_s"]) == [5.0, 5.0, 6.0, 6.0]
    assert merged["date"] == "2026-11-24" and merged["samples"] == previous["samples"]


@pytest.mark.parametrize("key, value", [("machine", "cpu-intel-xeon-2c"), ("prompts_sha256", "def"), ("rounds", 3)])
def test_merge_refuses_figures_that_would_not_compare(tmp_path, key, value):
    from tools.zoo.measure import merge_into

    path = tmp_path / "measured.json"
    with pytest.raises(SystemExit) as err:
        merge_into(
            _record("2026-11-01", {"ngram": (5.0, 1.4)}),
            _record("2026-11-24", {"mtp": (6.0, 1.2)}, **{key: value}),
            path,
        )
    assert str(path) in str(err.value) and key in str(err.value) and "without --merge" in str(err.value)


def test_merge_with_a_broken_measured_file_stops_before_measuring(monkeypatch, tmp_path):
    from tools.zoo import measure

    (tmp_path / "fixtures" / "zoo").mkdir(parents=True)
    (tmp_path / "fixtures" / "zoo" / "measured.json").write_text("{ not json", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(measure, "measure", lambda *a: pytest.fail("measured despite the broken file"))
    with pytest.raises(SystemExit) as err:
        measure.main(["--methods", "mtp", "--merge"])
    assert "measured.json" in str(err.value) and "without --merge" in str(err.value)
    assert (tmp_path / "fixtures" / "zoo" / "measured.json").read_text(encoding="utf-8") == "{ not json"


def test_looped_share_counts_the_verbatim_repeats_of_the_cycle_an_output_ends_in():
    from tools.zoo.measure import looped_share

    assert looped_share(list(range(48))) == 0.0
    loop = [7, 8, 9, 10]  # "the word in the word in ..."
    assert looped_share(list(range(100, 124)) + loop * 6) == 20 / 48  # six turns: five repeat the first
    assert looped_share([5] * 48) == 47 / 48
    assert looped_share(list(range(100, 140)) + [0] * 8) == 0.0  # a short run (")))", blank lines) is no loop
    sentence = list(range(200, 220))  # a 20-token sentence twice, as the target's prose loops
    assert looped_share(list(range(100, 108)) + sentence * 2) == 20 / 48
    assert looped_share(list(range(100, 108)) + sentence * 2 + [1]) == 0.0  # it went on with something else
    assert looped_share(list(range(100, 140)) + loop * 2) == 0.0  # two turns of a short cycle: 8 tokens only
    assert looped_share([]) == 0.0
