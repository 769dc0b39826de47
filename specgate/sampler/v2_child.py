"""Model Runner V2's rejection sampler driven without a model runner, inside a Python whose `vllm` is
a CUDA wheel's sources: specgate.sampler.v2 starts this module (`python -m specgate.sampler.v2_child`)
with that tree first on PYTHONPATH, on a CPU in Triton's interpreter or on a GPU for real.

The engine verifies drafts with `RejectionSampler.__call__(logits, input_batch, draft_logits)`
(rejection_sampler.py 0.33:416): it gathers each logits row's input token and position, runs the
`Sampler`'s `apply_sampling_params` (temperature, here) and calls `rejection_sample`. Everything it
reads is built here from vLLM's own classes: a `RequestState` and a `Sampler` whose requests are
added with `SamplingParams(temperature, seed)` (an unseeded request gets vLLM's own random seed,
drawn from numpy's generator, which is seeded with the batch's seed), and an `InputBatch` laid out
as the runner lays out a decode step. `path="rejection_sample"` instead calls `apply_sampling_params`
and `rejection_sample` directly, with the layout written here rather than gathered by vLLM.

Layout, both ways. Request r with drafts d_1..d_k is k + 1 logits rows at state slot
`slots[r]` (reversed batch order, so a kernel that mixes up the batch index and the state slot
shows): row j holds the target's logits at input position P + j, whose input token is the last
accepted token for j = 0 and d_j after it (`draft_sampled[j + 1] = d_{j+1}`); rows 0..k-1 verify
the drafts, row k is the bonus. P is the request's `position`, or PROMPT_LEN + OUTPUT_SO_FAR for a
request without one; the prefill is PROMPT_LEN tokens either way, so a step that starts at P >=
PROMPT_LEN is a decode step as the runner sees one (`num_computed_tokens` = P, the positions P + j
from `prepare_pos_seq_lens`, input_batch.py 0.32:374-381). Draft distributions go in as V2 keeps
them, pre-temperature: `draft_logits[slot, j] = T * log q_j` (the kernels divide by T), a tensor until
0.33 and a replicated `DraftLogitsCache` from 0.34 (`vllm_compat.v2_draft_logits`). Out of V2
come `sampled[r, :K+1]` and `num_sampled[r]`; a row of specgate's layout is
`sampled[r, :num_sampled[r]]`, then placeholders.

Protocol: pickled `(command, args)` tuples on stdin, pickled `("ok", value)` or `("error", text)`
replies on the original stdout; anything vLLM prints goes to stderr.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
import tempfile
import traceback
import types
from pathlib import Path

import numpy as np

from specgate import vllm_compat
from specgate.sampler.reference import PLACEHOLDER_TOKEN_ID, SpecRequest

PROMPT_LEN = 16  # every request's prefill: positions of the verified rows start at PROMPT_LEN + 3
OUTPUT_SO_FAR = 3
RS_UTILS = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
RS = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"

_mutants: dict[tuple, types.ModuleType] = {}  # patches -> V2's sampler module with them; reset() empties it


def reset() -> None:
    """Forget the patched copies of V2's sampler built so far (a test's: the next use builds them again)."""
    _mutants.clear()


def device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def setup() -> dict:
    """Import V2's sampler (shimmed on the interpreter) and say what runs."""
    import torch

    utils = importlib.import_module(RS_UTILS)
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if interpreted:
        from specgate.sampler import interpreter_shim

        interpreter_shim.apply(utils)
        interpreter_shim.host_buffers(importlib.import_module("vllm.v1.worker.gpu.buffer_utils"))
    importlib.import_module(RS)
    return {
        "release": vllm_compat.release(),
        "source": str(Path(utils.__file__).parents[5]),
        "device": str(device()),
        "interpreted": interpreted,
        "torch": torch.__version__,
    }


def sample(requests: list[SpecRequest], seed: int, rule: dict, path: str, mutant: tuple) -> np.ndarray:
    import torch

    dev = device()
    n, K = len(requests), max(r.num_drafts for r in requests)
    steps = max(K, 1)  # num_speculative_tokens: the engine's is at least 1 whatever the batch drafts
    vocab = requests[0].vocab_size
    slots = np.arange(n)[::-1].copy()
    num_logits = [r.num_drafts + 1 for r in requests]
    cu = np.concatenate([[0], np.cumsum(num_logits)]).astype(np.int32)
    local_pos = np.concatenate([np.arange(m) for m in num_logits]).astype(np.int32)
    slot_of_logit = np.repeat(slots, num_logits)
    starts = step_positions(requests)
    positions = (np.repeat(starts, num_logits) + local_pos).astype(np.int64)
    seq_lens = (starts + np.array(num_logits)).astype(np.int32)
    # Input tokens: the last accepted token (any id; 0 here), then the drafts.
    input_ids = np.concatenate([[0, *r.draft_token_ids] for r in requests]).astype(np.int32)
    logits = torch.from_numpy(np.concatenate([r.target_logits for r in requests])).to(dev)

    sampler = _sampler(requests, slots, seed, steps, vocab, dev, int(starts.max()))
    draft_logits = None
    if requests[0].draft_probs is not None:
        draft = np.zeros((n, steps, vocab), dtype=np.float32)
        with np.errstate(divide="ignore"):
            for r, slot in zip(requests, slots):
                scale = r.temperature if r.temperature > 0 else 1.0
                draft[slot, : r.num_drafts] = scale * np.log(r.draft_probs)
        draft_logits = vllm_compat.v2_draft_logits(torch.from_numpy(draft).to(dev))

    rs_module = importlib.import_module(RS)
    spec_config = _spec_config(rule, steps)
    rejection_sampler = rs_module.RejectionSampler(sampler, spec_config, dev)
    original = rs_module.rejection_sample
    kernels = _mutant(mutant) if mutant else importlib.import_module(RS_UTILS)
    rs_module.rejection_sample = kernels.rejection_sample
    t = lambda a, dtype: torch.from_numpy(np.ascontiguousarray(a)).to(device=dev, dtype=dtype)  # noqa: E731
    try:
        if path == "call":
            batch = vllm_compat.v2_input_batch(
                num_reqs=n,
                idx_mapping=t(slots, torch.int32),
                idx_mapping_np=slots,
                expanded_idx_mapping=t(slot_of_logit, torch.int32),
                expanded_local_pos=t(local_pos, torch.int32),
                input_ids=t(input_ids, torch.int32),
                positions=t(positions, torch.int64),
                logits_indices=t(np.arange(len(input_ids)), torch.int32),
                cu_num_logits=t(cu, torch.int32),
                cu_num_logits_np=cu,
                seq_lens=t(seq_lens, torch.int32),
                seq_lens_cpu_upper_bound=torch.from_numpy(seq_lens),
            )
            out = rejection_sampler(logits, batch, draft_logits)
            sampled, num_sampled = out.sampled_token_ids, out.num_sampled
        else:
            sampled, num_sampled = _direct(
                rejection_sampler,
                kernels,
                logits,
                draft_logits,
                input_ids,
                positions,
                seq_lens,
                cu,
                slots,
                slot_of_logit,
                local_pos,
                steps,
                t,
            )
    finally:
        rs_module.rejection_sample = original
    sampled, num_sampled = sampled.cpu().numpy(), num_sampled.cpu().numpy()
    rows = np.full((n, K + 1), PLACEHOLDER_TOKEN_ID, dtype=np.int64)
    for i, m in enumerate(num_sampled):
        rows[i, :m] = sampled[i, :m]
    return rows


def _direct(
    rejection_sampler,
    kernels,
    logits,
    draft_logits,
    input_ids,
    positions,
    seq_lens,
    cu,
    slots,
    slot_of_logit,
    local_pos,
    K,
    t,
):
    """`apply_sampling_params`, then `rejection_sample` with the layout written here (rejection_sampler.py
    0.33:264-295 makes the same two calls)."""
    import torch

    sampler = rejection_sampler.sampler
    expanded = t(slot_of_logit, torch.int32)
    pos, draft_sampled = t(positions, torch.int64), t(input_ids, torch.int64)
    processed = sampler.apply_sampling_params(
        logits, expanded, t(slots, torch.int32), slots, pos, draft_sampled, t(local_pos, torch.int32), seq_lens
    )
    states = sampler.sampling_states
    kwargs = {"use_fp64": sampler.use_fp64_gumbel, "use_block_verification": rejection_sampler.use_block_verification}
    if getattr(rejection_sampler, "fly_window_size", 0):
        kwargs.update(
            fly_window_size=rejection_sampler.fly_window_size,
            fly_entropy_threshold=rejection_sampler.fly_entropy_threshold,
            fly_entropy_top_k=rejection_sampler.fly_entropy_top_k,
        )
    return kernels.rejection_sample(
        processed,
        draft_logits,
        draft_sampled,
        t(cu, torch.int32),
        pos,
        t(slots, torch.int32),
        expanded,
        t(local_pos, torch.int32),
        states.temperature.gpu,
        states.seeds.gpu,
        K,
        rejection_sampler.synthetic_conditional_rates,
        **kwargs,
    )


def step_positions(requests: list[SpecRequest]) -> np.ndarray:
    """Each request's P, the position of its first logits row (see the layout above)."""
    starts = np.array(
        [PROMPT_LEN + OUTPUT_SO_FAR if r.position is None else r.position for r in requests], dtype=np.int64
    )
    if (starts < PROMPT_LEN).any():
        raise ValueError(f"a decode step starts after the {PROMPT_LEN}-token prefill: positions {starts.tolist()}")
    return starts


def _sampler(requests, slots, seed, K, vocab, dev, last_start):
    """vLLM's V2 `Sampler` with these requests added as the runner adds them (SamplingParams); the
    request state holds sequences up to a step starting at `last_start` with K drafts."""
    RequestState = vllm_compat.load("vllm.v1.worker.gpu.states:RequestState")
    Sampler = vllm_compat.load("vllm.v1.worker.gpu.sample.sampler:Sampler")
    SamplingParams = vllm_compat.load("vllm.sampling_params:SamplingParams")
    n = len(requests)
    max_len = last_start + K + 2
    states = RequestState(n, max_len, n * (K + 1), K, vocab, dev)
    # The sampler reads only the reasoning config (thinking budgets) from the engine's config.
    sampler = Sampler(types.SimpleNamespace(reasoning_config=None), n, vocab, dev, states, num_speculative_tokens=K)
    np.random.seed(seed)  # unseeded requests draw their seed from numpy's global generator
    for r, slot in zip(requests, slots):
        sampler.add_request(int(slot), SamplingParams(temperature=float(r.temperature), seed=r.seed))
        states.prefill_len.np[slot] = PROMPT_LEN
    states.prefill_len.copy_to_uva()
    sampler.apply_staged_writes()
    return sampler


def _spec_config(rule: dict, K: int):
    """The fields of SpeculativeConfig that RejectionSampler.__init__ reads (rejection_sampler.py
    0.33:160-181); synthetic rates resolved by vLLM's own validator helper."""
    method = rule.get("method", "standard")
    rates = None
    if method == "synthetic":
        SpeculativeConfig = vllm_compat.load("vllm.config.speculative:SpeculativeConfig")
        rates = SpeculativeConfig._resolve_synthetic_acceptance_rates(
            K, rule.get("synthetic_acceptance_rates"), rule.get("synthetic_acceptance_length")
        )
    return types.SimpleNamespace(
        num_speculative_tokens=K,
        enable_adaptive_verification=False,
        rejection_sample_method=method,
        synthetic_acceptance_rates=rates,
        fly_window_size=rule.get("fly_window_size"),
        fly_entropy_threshold=rule.get("fly_entropy_threshold", 0.3),
        fly_entropy_top_k=rule.get("fly_entropy_top_k", 3),
    )


def _mutant(patches: tuple[tuple[str, str], ...]) -> types.ModuleType:
    """A copy of rejection_sampler_utils.py with each `old` text replaced by `new` (each must occur
    exactly once), loaded as its own module so the original stays untouched."""
    if patches not in _mutants:
        original = importlib.import_module(RS_UTILS)
        text = Path(original.__file__).read_text(encoding="utf-8")
        for old, new in patches:
            count = text.count(old)
            if count != 1:
                raise ValueError(f"mutant patch expects {old!r} once in {original.__file__}, found it {count} times")
            text = text.replace(old, new)
        directory = Path(tempfile.mkdtemp(prefix="specgate-mutant-"))
        path = directory / f"mutant_{len(_mutants)}.py"
        path.write_text(text, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"specgate_mutant_{len(_mutants)}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        if os.environ.get("TRITON_INTERPRET") == "1":
            from specgate.sampler import interpreter_shim

            interpreter_shim.apply(module)
        _mutants[patches] = module
    return _mutants[patches]


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # vLLM's log lines and prints go to stderr, not into the replies
    sys.stdout = sys.stderr
    requests_in = sys.stdin.buffer
    while True:
        try:
            command, args = pickle.load(requests_in)
        except EOFError:
            return
        try:
            if command == "setup":
                reply = ("ok", setup())
            elif command == "sample":
                reply = ("ok", sample(*args))
            elif command == "interpreter_fast":  # tests: outputs with and without the speed-up
                from specgate.sampler import interpreter_shim

                interpreter_shim.set_fast(*args)
                reply = ("ok", None)
            else:
                reply = ("error", f"unknown command {command!r}")
        except Exception:  # noqa: BLE001 - the parent raises it with the traceback
            reply = ("error", traceback.format_exc())
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()


if __name__ == "__main__":
    main()
