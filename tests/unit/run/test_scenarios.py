"""The requests scenario's samples at T > 0 (specgate.run.scenarios.ScenarioRuns._samples), on a scripted
engine: in one go, or, where vllm#55005's probe fails, in two looks that stop when the first already fails. The
preemption engine's KV cache, sized in the blocks of the run's own engines (their block size, not a table's)."""

import contextlib
from dataclasses import dataclass, replace
from pathlib import Path

from specgate.backend import RequestsResult
from specgate.figures.acceptance import SpecCounters
from specgate.figures.completions import Completion, Reply
from specgate.profile import BASELINE, load_profile
from specgate.run.request_matrix import RequestCase
from specgate.run.scenario_records import RequestRun, Sampled
from specgate.run.scenarios import FIRST_LOOK_SHARE, SAMPLE_SEEDS, ScenarioRuns

ROOT = Path(__file__).resolve().parents[3]
PROFILE = load_profile(ROOT / "fixtures" / "profiles" / "cpu-tiny.toml", ROOT)
SAMPLES = PROFILE.scenarios.requests.samples


@dataclass
class Prompt:
    id: str
    category: str
    token_ids: tuple


class Inputs:
    max_prompt_tokens = 100

    def tokenized(self):
        return [Prompt("a-1", "a", (1,) * 100), Prompt("b-1", "b", (2,) * 100)]


class Store:
    profile, inputs = PROFILE, Inputs()

    def __init__(self, engine=None):
        self.scripted = engine

    def measuring(self, fn, *args):
        return fn(*args)

    def engine(self, name):
        return self.scripted


class Matrix:
    window, cases = 4, ()


class Scripted:
    """Samples token 9 then the seed's parity (or token 7 throughout: another distribution)."""

    def __init__(self, other=False):
        self.other, self.seeds = other, []

    def token_budget(self):
        return 2048

    def run_requests(self, requests, what, limit):
        replies = {}
        for tag, _, params, _ in requests:
            self.seeds.append((tag.split("@")[1], params["seed"]))
            ids = (7, 7, 7, 7) if self.other else (9, params["seed"] % 2, 9, 9)
            replies[tag] = Reply((Completion(ids, "", "length", None),))
        return RequestsResult(replies, SpecCounters(len(requests), 3 * len(requests), 2 * len(requests), ()))


def runs(engine=None):
    runs = ScenarioRuns(Store(engine))
    runs._matrix = Matrix()
    return runs


def baseline():
    return runs()._samples(Scripted(), "baseline")


def test_samples_in_one_go_are_judged_at_the_scenarios_level():
    engine = Scripted()
    sampled = runs()._samples(engine, "ngram")
    assert sampled.look == "" and sampled.level(0.001) == 0.001
    assert {len(v) for v in sampled.tokens.values()} == {SAMPLES}
    seed = SAMPLE_SEEDS[False]
    assert sorted(engine.seeds) == sorted((p, seed + i) for p in ("a-1", "b-1") for i in range(SAMPLES))


def test_a_sampler_that_fails_at_the_first_look_is_not_sampled_further():
    engine = Scripted(other=True)
    sampled = runs()._samples(engine, "ngram", baseline())
    first = SAMPLES // FIRST_LOOK_SHARE
    assert sampled.look == "first" and sampled.level(0.001) == 0.0005
    assert {len(v) for v in sampled.tokens.values()} == {first} and len(engine.seeds) == 2 * first
    assert sampled.counters["a"].num_drafts == first  # the scripted counters: one draft per request


def test_a_sampler_that_passes_the_first_look_is_sampled_whole_in_seed_order():
    engine = Scripted()
    sampled = runs()._samples(engine, "ngram", baseline())
    assert sampled.look == "second" and sampled.level(0.001) == 0.0005
    assert sampled.tokens == runs()._samples(Scripted(), "ngram").tokens  # the same samples as in one go
    assert len(engine.seeds) == len(set(engine.seeds)) == 2 * SAMPLES  # none taken twice
    assert sampled.counters["a"].num_drafts == SAMPLES  # both looks' counters added


def test_a_look_of_two_is_judged_at_half_the_level():
    assert Sampled(look="first").level(0.002) == Sampled(look="second").level(0.002) == 0.001


def test_a_level_the_permutation_test_cannot_halve_takes_one_look():
    low = ScenarioRuns(Store())
    low._matrix = Matrix()
    config = replace(PROFILE.scenarios.requests, level=0.0005)  # half of it: 1 / (3999 + 1), no p below it
    low.store.profile = replace(PROFILE, scenarios=replace(PROFILE.scenarios, requests=config))
    assert low._samples(Scripted(other=True), "ngram", baseline()).look == ""


class Unrepairable(Scripted):
    """A sampler the probe shows broken whose repair cannot be put in (the worker call failed)."""

    def sampling_broken(self):
        return "vllm#55005"

    @contextlib.contextmanager
    def sampling_repaired(self):
        yield ""


def test_shipped_samples_stopped_at_the_first_look_are_taken_whole_when_no_repair_follows():
    engine = Unrepairable(other=True)
    scenario = runs(engine)
    scenario._requests[BASELINE] = RequestRun({}, SpecCounters(), baseline())
    run = scenario.requests("ngram")
    assert run.repaired is None and run.sampled.look == "second"  # judged as the second look, at half the level
    assert {len(v) for v in run.sampled.tokens.values()} == {SAMPLES} and len(engine.seeds) == 2 * SAMPLES


class Limits(Scripted):
    """Records each batch's requests per sample count (n) and the in-flight limit it was sent with."""

    def __init__(self):
        super().__init__()
        self.batches = []

    def run_requests(self, requests, what, limit):
        self.batches.append((what, sorted({p.get("n", 1) for _, _, p, _ in requests}), limit))
        if what.startswith("samples"):
            return super().run_requests(requests, what, limit)
        return RequestsResult({t: Reply((Completion((9,), "", "length", None),)) for t, *_ in requests}, SpecCounters())


def test_seeded_requests_of_one_sample_are_not_held_to_the_limit_of_those_of_three():
    seeded = {"temperature": 0.8, "seed": 1, "max_tokens": 4}
    cases = (
        RequestCase("seeded@a-1", "seeded", "a-1", {**seeded, "n": 3}),
        RequestCase("min_p@a-1", "processors", "a-1", {**seeded, "min_p": 0.2}),
        RequestCase("seeded@b-1", "seeded", "b-1", {**seeded, "n": 3}),
    )
    engine = Limits()
    scenario = runs(engine)
    scenario._matrix.cases = cases
    scenario.requests(BASELINE)
    sent = [(n, limit) for what, n, limit in engine.batches if what == "its seeded requests"]
    # 2048 tokens a step over (100 prompt + 4 window + 1) tokens a sample: 18 in flight of one sample, 5 of three
    assert sent == [([1], 2048 // 105 - 1), ([3], 2048 // (105 * 3) - 1)]


class KvEngine:
    """An engine that says its block size; the preemption scenario's boots it as `blocks` blocks."""

    def __init__(self, block_size, blocks=None):
        self.block_size, self.blocks, self.down = block_size, blocks, False

    def kv_block_size(self):
        return self.block_size

    def kv_stats(self):
        from specgate.figures.kvstats import KvStats

        return KvStats()

    def run_batch(self, prompts, max_tokens):
        return "batch"

    def shutdown(self):
        self.down = True


class KvHost:
    def __init__(self, up: dict, booted_block_size: int):
        self.up, self.booted_block_size, self.boots = up, booted_block_size, []

    def live(self, name):
        return self.up.get(name)

    def scenario_engine(self, name, scenario, num_gpu_blocks_override):
        self.boots.append(KvEngine(self.booted_block_size, num_gpu_blocks_override))
        return self.boots[-1]


def preemption_runs(host):
    store = Store()
    store.host = host
    return ScenarioRuns(store)


def test_the_preemption_cache_is_sized_in_the_block_size_an_engine_of_the_run_says():
    """Blocks of 64 (CUDA vLLM 0.34's default) where the table guesses 16: the method's engine, up, says 64."""
    runs = preemption_runs(KvHost({"ngram": KvEngine(64)}, booted_block_size=64))
    run = runs.preemption("ngram")
    assert run.kv_blocks == runs.kv_blocks(64)[0] and len(runs.store.host.boots) == 1
    assert runs.kv_blocks(64) != runs.kv_blocks(16)
    runs = preemption_runs(KvHost({BASELINE: KvEngine(32)}, booted_block_size=32))  # else the baseline engine's
    assert runs.preemption("ngram").kv_blocks == runs.kv_blocks(32)[0]


def test_an_engine_booted_on_a_wrong_guess_is_booted_again_with_its_own_block_size():
    runs = preemption_runs(KvHost({}, booted_block_size=64))  # nothing up: the table's 128 (cpu) is guessed
    run = runs.preemption("ngram")
    first, second = runs.store.host.boots
    assert first.down and first.blocks == runs.kv_blocks(128)[0]
    assert second.blocks == run.kv_blocks == runs.kv_blocks(64)[0] and run.blocks_needed == runs.kv_blocks(64)[1]
    runs = preemption_runs(KvHost({}, booted_block_size=128))  # a right guess boots once
    runs.preemption("ngram")
    assert len(runs.store.host.boots) == 1
