"""The run session: one object per pytest run that owns the profile, the prompts and the engines.

It keeps at most one engine alive: asking for another method's engine shuts the current one down
first (and records whether its memory came back). Results are cached per method so several gate
tests of one method share one engine and one generation pass. No pytest in here; plugin.py adapts it.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from specgate.engine import Engine, ShutdownReport, boot_engine
from specgate.equivalence import Divergence, GreedyOutput, compare
from specgate.errors import EngineBootError
from specgate.profile import BASELINE, Method, Profile
from specgate.prompts import TokenizedPrompt, load_prompts, tokenize
from specgate.zoo import resolve as resolve_model


@dataclass
class MethodRecord:
    """What happened to one method's engine in this run (for the summary)."""

    method: str
    boots: int = 0
    boot_s: list[float] = field(default_factory=list)
    shutdown: ShutdownReport | None = None
    boot_error: EngineBootError | None = None
    skipped_reason: str | None = None
    compared: int = 0
    identical: int = 0
    numerical: int = 0
    diverged: int = 0


@dataclass(frozen=True)
class EquivalenceFinding:
    prompt: TokenizedPrompt
    divergence: Divergence


class GateSession:
    def __init__(self, profile: Profile, methods: list[Method], root: Path, out_dir: Path):
        self.profile = profile
        self.methods = methods
        self.root = Path(root)
        self.out_dir = Path(out_dir)
        self.records: dict[str, MethodRecord] = {m: MethodRecord(m) for m in [BASELINE, *(m.name for m in methods)]}
        self._by_name = {BASELINE: profile.baseline, **{m.name: m for m in methods}}
        self._engine: Engine | None = None
        self._prompts: list[TokenizedPrompt] | None = None
        self._tokenizer = None
        self._greedy: dict[str, dict[str, GreedyOutput]] = {}
        self.started = time.monotonic()

    # -- inputs ---------------------------------------------------------------------------------
    @property
    def method_order(self) -> list[str]:
        return list(self.records)

    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(resolve_model(self.profile.target, self.root))
        return self._tokenizer

    def prompts(self) -> list[TokenizedPrompt]:
        """Every prompt, validated and tokenized once with the target's tokenizer."""
        if self._prompts is None:
            loaded = load_prompts(self.profile.prompts)
            self._prompts = tokenize(loaded, self.tokenizer(), self.profile.max_model_len - self.profile.max_tokens)
        return self._prompts

    def decode(self, token_id: int) -> str:
        return self.tokenizer().decode([token_id])

    # -- engines --------------------------------------------------------------------------------
    def engine(self, name: str) -> Engine:
        """The live engine for `name`, booting it (after shutting down any other) if needed."""
        record = self.records[name]
        if record.boot_error is not None:
            raise record.boot_error
        if self._engine is not None and self._engine.method.name == name and self._engine.alive:
            return self._engine
        self.release_current()
        self.prompts()  # fail on bad prompts before paying for a boot
        log_path = self.out_dir / "engines" / f"{name}.log"
        record.boots += 1
        try:
            self._engine = boot_engine(self.profile, self._by_name[name], self.root, log_path)
        except EngineBootError as exc:
            record.boot_error = exc
            raise
        record.boot_s.append(self._engine.boot_s)
        return self._engine

    def release_current(self) -> ShutdownReport | None:
        if self._engine is None:
            return None
        engine, self._engine = self._engine, None
        report = engine.shutdown()
        self.records[engine.method.name].shutdown = report
        return report

    def release(self, name: str) -> ShutdownReport | None:
        """Shut down `name`'s engine if it is the live one; return its shutdown report."""
        if self._engine is not None and self._engine.method.name == name:
            return self.release_current()
        return self.records[name].shutdown

    def expected_boot_failure(self, name: str, error: EngineBootError) -> str | None:
        """The skip reason when the profile says this method may not boot here and it did not."""
        import re

        pattern = self._by_name[name].expected_boot_error
        if pattern and re.search(pattern, f"{error}\n{error.log_tail}"):
            reason = f"method '{name}' cannot run on this engine; vLLM said: {error.reason or error}"
            self.records[name].skipped_reason = reason
            return reason
        return None

    # -- measurements ---------------------------------------------------------------------------
    def greedy_outputs(self, name: str) -> dict[str, GreedyOutput]:
        """Greedy outputs of every prompt for `name` (the baseline also keeps top-k logprobs)."""
        if name not in self._greedy:
            engine = self.engine(name)
            top = self.profile.equivalence.top_logprobs if name == BASELINE else 0
            self._greedy[name] = engine.greedy(self.prompts(), self.profile.max_tokens, top)
        return self._greedy[name]

    def equivalence(self, name: str) -> list[EquivalenceFinding]:
        """Every prompt whose output differs from the baseline's, classified; records the counts."""
        reference = self.greedy_outputs(BASELINE)
        outputs = self.greedy_outputs(name)
        record = self.records[name]
        findings = []
        record.compared = record.identical = record.numerical = record.diverged = 0
        for prompt in self.prompts():
            record.compared += 1
            div = compare(reference[prompt.id], outputs[prompt.id].token_ids, self.profile.equivalence)
            if div is None:
                record.identical += 1
                continue
            if div.numerical:
                record.numerical += 1
            else:
                record.diverged += 1
            findings.append(EquivalenceFinding(prompt, div))
        return findings

    def describe(self, finding: EquivalenceFinding, name: str) -> str:
        rule = self.profile.equivalence
        return (
            f"method '{name}', prompt {finding.prompt.id} ({finding.prompt.category}) "
            + finding.divergence.describe(self.decode, rule.logprob_margin, rule.mode)
        )

    # -- summary --------------------------------------------------------------------------------
    @property
    def engines_booted(self) -> int:
        return sum(len(r.boot_s) for r in self.records.values())

    def summary_lines(self) -> list[str]:
        ran = [r for r in self.records.values() if r.boot_s and r.method != BASELINE]
        failed = [r for r in self.records.values() if r.boot_error]
        lines = [
            f"profile {self.profile.name} ({self.profile.path}); results in {self.out_dir}",
            f"engines booted: {self.engines_booted} (methods run: {len(ran)} + {len(self.records[BASELINE].boot_s)} baseline"
            f"{f'; {len(failed)} failed to boot' if failed else ''}); wall time {time.monotonic() - self.started:.0f} s",
        ]
        for r in self.records.values():
            if not r.boots:
                state = "not run"
            elif r.skipped_reason:
                state = f"skipped: {r.skipped_reason}"
            elif r.boot_error:
                state = f"boot failed: {r.boot_error.reason or r.boot_error}"
            else:
                boot = ", ".join(f"{s:.1f}" for s in r.boot_s)
                state = f"boot {boot} s"
                if r.shutdown:
                    sd = r.shutdown
                    state += (
                        f"; footprint {sd.footprint / 2**30:.2f} GiB; shutdown {sd.shutdown_s:.1f} s, "
                        f"not returned {sd.memory_not_returned / 2**30:.2f} GiB"
                    )
                if r.compared:
                    state += f"; greedy: {r.identical}/{r.compared} identical, {r.numerical} near-ties, {r.diverged} diverged"
            lines.append(f"  {r.method:<14} {state}")
        boots = Counter({r.method: r.boots for r in self.records.values() if r.boots > 1})
        if boots:
            lines.append(f"  warning: booted more than once: {dict(boots)} (tests were reordered?)")
        return lines
