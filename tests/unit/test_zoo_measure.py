"""specgate.zoo.measure with a fake engine on a virtual clock: how the card's C=1 speedups are paired."""

from pathlib import Path

import pytest

from specgate.acceptance import SpecCounters
from specgate.engine import BatchResult
from specgate.equivalence import GreedyOutput

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
        counters = SpecCounters(drafts, drafts * k, drafts, (drafts,) + (0,) * (k - 1)) if k else SpecCounters(0, 0, 0, ())
        return BatchResult(out, {p.id: [1, 2] for p in prompts}, counters)

    def shutdown(self):
        self.machine.alive.remove(self.method.name)


def test_measure_pairs_each_method_round_with_a_baseline_round_so_drift_cancels(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    import specgate.engine
    from specgate.zoo import measure

    machine = DriftingMachine()
    boots = []

    def boot(profile, method, root, log_path):
        boots.append((method.name, list(machine.alive)))
        return FakeEngine(machine, method)

    monkeypatch.setattr(specgate.engine, "boot_engine", boot)
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
