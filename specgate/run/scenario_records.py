"""What each scenario's measurement holds (specgate.run.scenarios measures them, checks/scenarios.py and
checks/requests.py judge them): plain records, no engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from specgate.backend import BatchResult, ShutdownReport
from specgate.figures.acceptance import SpecCounters
from specgate.figures.completions import Reply
from specgate.figures.kvstats import KvStats


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
class EdgeRun:
    replies: dict[str, Reply]  # case id -> what the engine answered
    counters: dict[str, SpecCounters]  # class -> the counters its batch moved
    seconds: dict[str, float] = field(default_factory=dict)  # batch -> its wall time
    # the split class's prompts sent one at a time first (prefilled whole), on a method's engine: case id -> reply,
    # and the counters they moved
    whole: dict[str, Reply] = field(default_factory=dict)
    whole_counters: SpecCounters | None = None


@dataclass
class Sampled:
    """Seeded samples at T > 0: per prompt its samples' first tokens, per category the counters they moved.
    `look`: "" when they were taken in one go (judged at the scenario's level); in two looks (LOOKS) "first"
    when the first share already failed the two-sample test and the rest was not taken, "second" when all
    were; either look of two is judged at half the level, so the two together keep it."""

    tokens: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    counters: dict[str, SpecCounters] = field(default_factory=dict)
    look: str = ""

    def level(self, level: float) -> float:
        """The level this sample's two-sample test is judged at, of the scenario's `level`."""
        return level / 2 if self.look else level


@dataclass
class RequestRun:
    replies: dict[str, Reply]  # case id -> what the engine answered
    counters: SpecCounters  # the matrix's requests (first sends and repeats)
    sampled: Sampled
    repaired: Sampled | None = None  # the same samples with vllm#55005's repair in the worker
    repair: str = ""  # the probe's finding that called for the repair
    repaired_replies: dict[str, Reply] = field(default_factory=dict)  # the seeded cases, repaired too
    seconds: dict[str, float] = field(default_factory=dict)  # where its time went: matrix, samples, repaired
