"""The scenarios' measurements: where vLLM's own spec-decode bug reports came from, off the gate's plain
path (each prompt sent once, ample KV cache, free text). Each is measured once per method and cached,
like the plain gates' measurements (specgate.measurements), and judged in checks/scenarios.py.

    preemption   the method's engine booted again with a KV cache holding `kv_share` of what the
                 profile's prompts need at once, all of them sent together: requests are preempted
                 and resumed mid-speculation (vLLM's own counter says how many)
    prefix_soak  the method's engine, prefix cache emptied, replays a few prompts of each category for
                 `rounds` rounds: acceptance and the prefix-cache hit rate per round
    structured   tool-call-shaped prompts decoded under a JSON schema (vLLM's structured outputs)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace

from specgate.backend import BatchResult, ShutdownReport
from specgate.kvstats import KvStats
from specgate.profile import BASELINE

# vLLM's default KV block size per platform, for sizing the preemption engine's cache (a profile's
# engine kwargs may set another; the scenario fails as "not exercised" if the guess was wrong).
DEFAULT_BLOCK_SIZE = {"cpu": 128, "cuda": 16}


@dataclass
class PreemptionRun:
    kv_blocks: int  # the scenario engine's KV cache (num_gpu_blocks_override)
    blocks_needed: int  # what the load needs with every request in the cache at once
    batch: BatchResult
    stats: KvStats  # moved by the load; usage read after it
    shutdown: ShutdownReport | None = None


@dataclass
class SoakRound:
    batch: BatchResult
    stats: KvStats


@dataclass
class ScenarioRuns:
    """Every scenario's measurements of a run (the session builds it over the measurement store)."""

    store: object  # measurements.MeasurementStore
    _preemption: dict[str, PreemptionRun] = field(default_factory=dict)
    _soak: dict[str, list[SoakRound]] = field(default_factory=dict)
    _structured: dict[str, BatchResult] = field(default_factory=dict)
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
    def kv_blocks(self) -> tuple[int, int]:
        """(blocks the scenario engine gets, blocks the load needs at once): kv_share of what the largest
        max_num_seqs requests need together (at most that many run at once), and never fewer than one
        request of max_model_len needs (vLLM refuses to boot below that)."""
        size = int(self.profile.engine_kwargs.get("block_size") or DEFAULT_BLOCK_SIZE[self.profile.hardware])
        per_request = sorted(
            (math.ceil((len(p.token_ids) + self.profile.max_tokens) / size) for p in self.store.inputs.tokenized()),
            reverse=True,
        )
        needed = sum(per_request[: self.profile.engine_kwargs.get("max_num_seqs") or len(per_request)])
        floor = math.ceil(self.profile.max_model_len / size) + 1
        return max(floor, int(self.profile.scenarios.preemption.kv_share * needed)), needed

    def preemption(self, name: str) -> PreemptionRun:
        def measure() -> PreemptionRun:
            blocks, needed = self.kv_blocks()
            engine = self.store.host.scenario_engine(name, "preemption", num_gpu_blocks_override=blocks)
            report = None
            try:
                before = engine.kv_stats()
                batch = self.store.measuring(engine.run_batch, self.store.inputs.tokenized(), self.profile.max_tokens)
                stats = engine.kv_stats() - before
            finally:
                report = engine.shutdown()
            return PreemptionRun(blocks, needed, batch, stats, report)

        return self._once("preemption", name, self._preemption, measure)

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

        return self._once("prefix_soak", name, self._soak, measure)

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

        return self._once("structured", name, self._structured, measure)


def with_kv_blocks(method, blocks: int):
    """`method` booted with a KV cache of `blocks` blocks."""
    return replace(method, engine_kwargs={**method.engine_kwargs, "num_gpu_blocks_override": blocks})
