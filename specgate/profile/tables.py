"""A profile's tables, each key declared once on its dataclass field (specgate.profile.schema.setting):
[tolerance], [equivalence], [speedup] and [scenarios.preemption|prefix_soak|structured]."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specgate.gates import SCENARIOS, Gate
from specgate.profile.prompt_sources import PromptSource, parse_sources
from specgate.profile.schema import held_as_float, non_negative, one_of, positive, relative, rule, setting, share


@dataclass(frozen=True)
class Tolerance:
    """How far a measurement may fall from its stored baseline before the gate fails."""

    acceptance_rtol: float = setting(0.05, float, bound=relative, doc="mean acceptance length per category, relative")
    position_rtol: float = setting(0.10, float, bound=relative, doc="each per-position acceptance rate, relative")
    sampled_acceptance_rtol: float = setting(
        0.05, float, bound=relative, doc="mean acceptance length per category at T > 0 (the requests scenario)"
    )
    # The load gate (checks/load.py): the mean acceptance length the speedup trials moved at each concurrency
    # level. 0 = acceptance_rtol, where A/A runs show the figure deterministic (float32 CPU); elsewhere (bf16,
    # a batch-dependent drafter) the A/A spread `specgate calibrate` suggests.
    load_acceptance_rtol: float = setting(
        0.0, float, bound=relative, doc="mean acceptance length per concurrency level (0: acceptance_rtol)"
    )
    # How often a method drafted (figures.acceptance.Drafting), per category and per concurrency level: the share
    # of decode steps that drafted and the draft tokens proposed per output token, each held to its stored figure
    # x (1 - draft_rtol); where the method's speculative_config has a dynamic-speculation schedule
    # (num_speculative_tokens_per_batch_size), draft tokens per output token also x (1 + draft_rtol): its policy.
    draft_rtol: float = setting(
        0.05, float, bound=relative, doc="drafted steps' share and draft tokens per output token, relative"
    )
    # Each request's acceptance length on the greedy pass (checks/distribution.py), for profiles whose acceptance
    # A/A runs show deterministic (float32 CPU: cpu-tiny); 0 = not judged per request.
    request_acceptance_rtol: float = setting(
        0.0, float, bound=relative, doc="each request's acceptance length, relative (0: not judged)"
    )
    collapsed_share: float = setting(
        0.0, float, bound=relative, doc="the share of a category's requests allowed below request_acceptance_rtol"
    )
    speedup_rtol: float = setting(0.15, float, bound=relative, doc="speedup per concurrency level, relative")
    memory_rtol: float = setting(0.10, float, bound=relative, doc="each memory figure, relative")
    memory_slack_mib: float = setting(64.0, float, bound=non_negative, doc="MiB on top: weights and device memory")
    process_slack_mib: float = setting(
        256.0, float, bound=non_negative, doc="MiB on top: peak process memory (allocator noise run to run)"
    )
    # Speedup ratios are only comparable on a machine as fast as the one that stored them: when the
    # baseline engine's throughput this run is off its stored value by more than this (relative, either
    # way), the speedup gate judges coarsely instead (below). 0 = never (dedicated GPUs).
    machine_rtol: float = setting(0.0, float, bound=relative, doc="the baseline engine's speed off its stored value")
    # Speedups stored on another machine (or on this one under other load) are judged against
    # stored x (1 - coarse_speedup_rtol). On cpu-tiny the ratios moved by -22 % to +9 % between two
    # machines of one CPU name; with speedup_rtol's 15 % on top: 1 - 0.78 x 0.85 = 0.34.
    coarse_speedup_rtol: float = setting(0.35, float, bound=relative, doc="speedups stored on another machine")
    # The geometric mean of a method's speedups over the concurrency levels fails when the geometric
    # mean of the levels' upper bounds falls this far below the stored value. A starting point for
    # GPU runners; cpu-tiny sets its measured level tolerance (0.15): there the geomean moved 7 %
    # between two runs of unchanged code (ngram 1.127 -> 1.050).
    geomean_rtol: float = setting(0.10, float, bound=relative, doc="geometric mean of the speedups over the levels")
    # > 0: TTFT p95 with speculation, relative to the baseline engine's in the same trials, may grow
    # this far over its stored value before the gate fails (0 = shown, not gated: tails are noisy).
    ttft_p95_rtol: float = setting(0.0, float, bound=relative, doc="TTFT p95 relative to the baseline engine's")
    # The step-cost check beside the speedup (0 = shown, not gated), from the worker's timers in one
    # timed trial per level: a drafting call may cost this much more of a verification step than
    # stored (draft_cost, absolute: 0.05 = 5 % of a step), and a verification step this much more,
    # relative, than stored against a plain step of the baseline engine (verify_cost). Judged against
    # this machine's own baselines (or, for a canary, its parent measured in the same run).
    draft_cost_tol: float = setting(0.0, float, bound=non_negative, doc="a drafting call's cost, absolute")
    verify_cost_rtol: float = setting(0.0, float, bound=relative, doc="a verification step's cost, relative")
    # > 0: portable figures (acceptance, drafter weights, KV tokens lost) must also stay within this of
    # the best value the baseline file's git history stored for the same inputs (checks/drift.py).
    drift_rtol: float = setting(0.0, float, bound=relative, doc="portable figures against the history's best")


@dataclass(frozen=True)
class Equivalence:
    """Greedy-equivalence rule: `exact`, or `tie-aware` within `logprob_margin` nats, forgiving near-ties
    in at most `max_forgiven_share` of a comparison's prompts (a verifier bug whose many divergences
    each look small still fails)."""

    mode: str = setting(
        "exact",
        str,
        bound=one_of(("exact", "tie-aware"), "'exact' or 'tie-aware'"),
        doc="exact, or tie-aware (bf16: near-ties forgiven)",
    )
    top_logprobs: int = setting(5, int, bound=positive, doc="the baseline engine's logprobs kept per position")
    logprob_margin: float = setting(0.0, float, bound=non_negative, doc="tie-aware: the largest forgiven gap, nats")
    max_forgiven_share: float = setting(
        0.0, float, bound=share("the prompts"), doc="tie-aware (required there): the most prompts forgiven, as a share"
    )


@dataclass(frozen=True)
class Speedup:
    """How the speedup gate loads each engine: `trials` closed-loop runs per concurrency level, each
    of `requests_per_slot` x C requests (at least `min_requests`); the first wave of C requests is
    warm-up. More trials narrow the confidence interval, which tightens the gate."""

    trials: int = setting(
        5,
        int,
        bound=rule(lambda v: v >= 2, "must be >= 2 (a confidence interval needs repeats)"),
        doc="paired trials per engine and level",
    )
    requests_per_slot: int = setting(3, int, bound=positive, doc="requests per trial: this x C")
    min_requests: int = setting(6, int, bound=positive, doc="requests per trial at least")
    temperature: float = setting(0.0, float, bound=non_negative, doc="the load's sampling temperature")
    # One extra trial per level with timers in the worker around the target's forward pass and the
    # drafter, for the cost ratio c of the analytic speedup (off: no model check).
    measure_step_costs: bool = setting(True, bool, doc="time a drafting call and a verification step")
    # Alternate each method trial with a trial of the baseline engine, kept alive next to the
    # method's: both sides of every ratio then see the same machine state. Needs memory for two
    # engines (fine on CPU; not with two large models on one GPU, where one-at-a-time holds).
    interleave_baseline: bool = setting(False, bool, doc="the baseline engine alive beside each method's")
    max_tokens: int = setting(0, int, bound=non_negative, doc="output tokens per load request; 0 = the profile's")
    # Sequential trials: while a cell's interval straddles its floor, add `step_trials` paired trials,
    # up to `max_trials` (0 = never: `trials` only). Cells the evidence already decides cost nothing more.
    max_trials: int = setting(0, int, doc="sequential trials up to this many (0: off)")
    step_trials: int = setting(2, int, bound=positive, doc="trials added per sequential step")
    # The load's own prompts (e.g. a SPEED-Bench throughput split); empty = the profile's prompts.
    prompts: tuple[PromptSource, ...] = setting(
        (), list, doc="the load's own prompt sets", parse=lambda check, key, value, _: parse_sources(check, key, value)
    )

    def num_requests(self, concurrency: int) -> int:
        return max(self.min_requests, self.requests_per_slot * concurrency, 2 * concurrency + 1)


@dataclass(frozen=True)
class Preemption:
    """The preemption scenario: each method's engine booted again with a KV cache holding `kv_share` of
    what the profile's prompts need when all are sent at once (prompt + max_tokens each), so requests
    are preempted and resumed mid-speculation."""

    kv_share: float = setting(
        0.3,
        float,
        doc="the share of the load's KV cache the scenario engine gets",
        parse=held_as_float(
            lambda v: (
                None
                if 0 < v < 1
                else (f"is the share of the load's KV cache the scenario engine gets, in (0, 1); got {v!r}.")
            )
        ),
    )


@dataclass(frozen=True)
class PrefixSoak:
    """The prefix-cache soak: `rounds` replays of `per_category` prompts of each category (0 = all)
    on one engine with prefix caching on, `max_tokens` each (0 = the profile's); the last rounds'
    acceptance may fall `acceptance_rtol` below the first round's."""

    rounds: int = setting(
        4,
        int,
        bound=rule(lambda v: v >= 2, "must be >= 2 (a replay needs a first round)"),
        doc="replays of the prompts",
    )
    per_category: int = setting(4, int, bound=non_negative, doc="prompts of each category (0: all)")
    max_tokens: int = setting(0, int, bound=non_negative, doc="output tokens each (0: the profile's)")
    acceptance_rtol: float = setting(
        0.02,
        float,
        bound=rule(lambda v: 0 <= v < 1, "must be in [0, 1)"),
        doc="the last round's acceptance below the first's, relative",
    )


@dataclass(frozen=True)
class Structured:
    """The structured-output scenario: the prompts of `prompts` decoded under the JSON schema in
    `schema` with vLLM's structured outputs, `max_tokens` each (0 = the profile's)."""

    # As written until resolve.py finds them (then absolute paths that exist).
    prompts: Path = setting(kind=str, required="is required.", doc="tool-call prompts (our schema)")
    schema: Path = setting(kind=str, required="is required.", doc="the JSON schema their output is decoded under")
    max_tokens: int = setting(0, int, bound=non_negative, doc="output tokens each (0: the profile's)")


@dataclass(frozen=True)
class Requests:
    """The requests scenario (specgate.run.request_matrix): every method's engine is sent the profile's
    prompts under a matrix of request parameters (stop strings at every offset inside an accepted
    draft, caps, min_tokens, penalties, logit processors, logprobs, streaming, seeded sampling) and each
    request is compared with the baseline engine's same request; plus `samples` seeded samples of
    `sampled_tokens` tokens for `sampled_per_category` prompts of each category, whose token
    distribution must equal the baseline engine's by a two-sample test at `level`."""

    per_category: int = setting(1, int, bound=positive, doc="prompts of each category in the matrix")
    logprob_atol: float = setting(
        0.0, float, bound=non_negative, doc="logprob values may differ by this much (0: float32, exact)"
    )
    sampled_per_category: int = setting(1, int, bound=non_negative, doc="prompts of each category sampled at T > 0")
    samples: int = setting(
        96, int, bound=rule(lambda v: v >= 8, "must be >= 8 (a two-sample test needs samples)"), doc="samples a prompt"
    )
    sampled_tokens: int = setting(4, int, bound=positive, doc="tokens of each sample compared")
    temperature: float = setting(
        1.0, float, bound=rule(lambda v: 0 < v <= 2, "must be in (0, 2]"), doc="the samples' temperature"
    )
    level: float = setting(
        0.001,
        float,
        bound=rule(lambda v: 0 < v < 0.5, "must be in (0, 0.5)"),
        doc="the two-sample test's level (false alarms per method and run)",
    )


@dataclass(frozen=True)
class Edges:
    """The traffic-edges scenario (specgate.run.edges): every method's engine and the baseline's get requests at
    the shapes production sends and the plain gate does not: prompts of `block_multiples` x the KV block size
    and one token either side; requests that run to max_model_len, their outputs `edge_tokens` + 0..k long so
    the edge falls at every offset of a draft window; long prompts sent together past the scheduler's token
    budget (split prefills); outputs that end at EOS (or, where no greedy output does, at a stop token) at
    each offset of a draft window for `eos_prompts` prompts. Each request is compared with the baseline
    engine's, its counters with its output, and each class's acceptance is stored and judged."""

    block_multiples: tuple[int, ...] = setting(
        (1, 2),
        list,
        doc="prompt lengths at these multiples of the KV block size, and one token either side",
        parse=lambda check, key, value, _: _positive_ints(check, key, value),
    )
    edge_tokens: int = setting(
        8, int, bound=positive, doc="the shortest output of a request run to max_model_len (then + 1 .. + k)"
    )
    eos_prompts: int = setting(2, int, bound=non_negative, doc="prompts whose output ends at EOS (0: none)")
    max_tokens: int = setting(
        0, int, bound=non_negative, doc="output tokens of the block and split classes (0: the profile's)"
    )
    logprob_atol: float = setting(
        0.0, float, bound=non_negative, doc="the context-edge requests' logprob values may differ by this much"
    )
    # A class is a few requests of a few steps: where the scheduler splits a prefill or starts a request's decode
    # one step earlier, a step more or less drafts, and the class's mean acceptance length moves with it.
    acceptance_rtol: float = setting(
        0.15, float, bound=relative, doc="each class's mean acceptance length below its stored figure, relative"
    )


def _positive_ints(check, key: str, value) -> tuple[int, ...]:
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        raise check.fail(key, f"must be a non-empty list of integers >= 1, got {value!r}.")
    return tuple(value)


@dataclass(frozen=True)
class KnownIssue:
    """A bug the gate finds in a released vLLM, recorded so that its failure is reported as known, not as
    this build's regression: `[known_issues."vllm#55005"]` with the check (a gate) and the cases (its
    failing parts, e.g. the requests scenario's classes) it explains, for these methods, on these releases."""

    check: str = setting(kind=str, required="is required (the gate it explains, e.g. 'requests').", doc="the gate")
    cases: tuple[str, ...] = setting(
        kind=list, required="is required (what of the check it explains).", doc="the check's cases it explains"
    )
    methods: tuple[str, ...] = setting(kind=list, required="is required.", doc="the methods it explains")
    releases: tuple[str, ...] = setting(
        kind=list, required="is required (the vLLM releases it is present in).", doc="releases where it reproduces"
    )
    note: str = setting("", str, doc="what the bug is, where it is filed")


@dataclass(frozen=True)
class Scenarios:
    """Where vLLM's own spec-decode bug reports come from, each off (None) unless the profile enables it."""

    preemption: Preemption | None = setting(None, dict, table=Preemption, doc="requests preempted under KV pressure")
    prefix_soak: PrefixSoak | None = setting(None, dict, table=PrefixSoak, doc="prefix-cache reuse over rounds")
    structured: Structured | None = setting(None, dict, table=Structured, doc="output under a JSON schema")
    requests: Requests | None = setting(None, dict, table=Requests, doc="requests as users send them")
    edges: Edges | None = setting(
        None, dict, table=Edges, doc="traffic at the edges: blocks, max_model_len, splits, EOS"
    )

    @property
    def enabled(self) -> tuple[Gate, ...]:
        """The scenarios this profile runs: those whose table it has."""
        return tuple(g for g in SCENARIOS if getattr(self, g) is not None)
