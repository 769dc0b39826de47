"""Model Runner V2's plants on a runner made of the parts they patch (no vLLM): each changes what it says it
changes in a verification step's output, a step's requests, the grammar layout or the Sampler's stages, and
nothing else; a runner without the part says so. On a real V2 engine: tests/system/test_v2_plants.py."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from specgate.engines import plants, plants_v1, plants_v2
from specgate.profile.plants import FRONTEND, PLANTS

pytestmark = pytest.mark.needs_vllm  # V2's outputs are torch tensors here
torch = None  # imported by the fixture below: the fast loop imports no torch
VOCAB = 100


class Verifier:
    """A rejection sampler whose __call__ returns the next prepared output (V2's returns a SamplerOutput)."""

    def __init__(self, *outs):
        self.outs, self.sampler = list(outs), SimpleNamespace(apply_sampling_params=lambda logits, *a: logits)

    def __call__(self, logits, input_batch, draft_logits=None):
        return self.outs.pop(0)


def output(tokens, sampled, k=3):
    """A SamplerOutput of rows `tokens` (padded with 0), each row emitting its first `sampled` tokens."""
    rows = torch.tensor([[*t, *[0] * (k + 1 - len(t))] for t in tokens])
    n = torch.tensor(sampled, dtype=torch.int32)
    return SimpleNamespace(sampled_token_ids=rows, num_sampled=n, num_rejected=(k + 1) - n)


def batch(req_ids, drafts, computed=None):
    """An InputBatch of `req_ids`, each verifying `drafts[i]` after its last sampled token (input id 7)."""
    inputs, cu = [], [0]
    for d in drafts:
        inputs += [7, *d]
        cu.append(cu[-1] + 1 + len(d))
    return SimpleNamespace(
        req_ids=req_ids,
        num_reqs=len(req_ids),
        input_ids=torch.tensor(inputs),
        logits_indices=torch.arange(len(inputs)),
        cu_num_logits=torch.tensor(cu, dtype=torch.int32),
        num_computed_tokens_np=np.array(computed or [10] * len(req_ids)),
        idx_mapping_np=np.arange(len(req_ids)),
    )


def runner(*outs, **parts):
    """A V2 runner with the parts the plants read (add_requests records what it was given)."""
    added = []
    r = SimpleNamespace(
        rejection_sampler=Verifier(*outs),
        req_states=SimpleNamespace(prompt_len=SimpleNamespace(np=np.array([4, 4, 4]))),
        add_requests=added.append,
        speculator=SimpleNamespace(),
        sampler=None,
        structured_outputs_worker=None,
        vocab_size=VOCAB,
        max_model_len=64,
        num_speculative_steps=3,
        added=added,
    )
    for name, value in parts.items():
        setattr(r, name, value)
    return r


def plant(r, name):
    return plants.install(SimpleNamespace(model_runner=r), name)


@pytest.fixture(autouse=True)
def _torch():
    global torch
    torch = pytest.importorskip("torch")


def test_every_plant_has_a_v1_and_a_v2_form():
    worker_side = set(PLANTS) - set(FRONTEND) | {"logit_bias_bonus_only"}
    assert set(plants_v2.PLANTS) == worker_side and set(plants_v1.PLANTS) == worker_side


def test_verification_emits_the_rejected_draft_instead_of_the_targets_token():
    out = output([[11, 12], [21, 22, 23, 24]], [2, 4])  # row 0 rejected its 2nd draft; row 1 accepted all three
    r = runner(out)
    assert plant(r, "verify_emits_draft") is None
    r.rejection_sampler(None, batch(["a", "b"], [[11, 31, 32], [21, 22, 23]]))
    assert out.sampled_token_ids[0, :2].tolist() == [11, 31] and out.sampled_token_ids[1].tolist() == [21, 22, 23, 24]
    assert out.num_sampled.tolist() == [2, 4]


def test_keeping_one_token_less_moves_it_from_sampled_to_rejected_for_the_named_prompt_only():
    out = output([[1, 2, 3], [4, 5, 6]], [3, 3])
    r = runner(out)
    assert plant(r, "accept_less_for_prompt:3") is None
    r.rejection_sampler(None, batch(["code-03#0", "code-04#0"], [[1, 2, 9], [4, 5, 9]]))
    assert out.num_sampled.tolist() == [2, 3] and out.num_rejected.tolist() == [2, 1]


def test_a_wrong_token_only_in_batches_as_large_as_asked():
    small, large = output([[1, 2]], [2]), output([[1, 2], [3, 4]], [2, 2])
    r = runner(small, large)
    assert plant(r, "wrong_token_in_large_batches:2") is None
    r.rejection_sampler(None, batch(["a"], [[1, 9, 9]]))
    r.rejection_sampler(None, batch(["a", "b"], [[1, 9, 9], [3, 9, 9]]))
    assert small.sampled_token_ids[0, :2].tolist() == [1, 2] and large.sampled_token_ids[:, 1].tolist() == [3, 5]


def test_wrong_tokens_in_large_batches_then_the_verification_of_the_4n_th_request_never_returns(monkeypatch):
    import time

    large = [output([[1, 2], [3, 4]], [2, 2]) for _ in range(3)]
    small = output([[1, 2]], [2])
    r = runner(*large, small, output([[1, 2], [3, 4]], [2, 2]))
    assert plant(r, "wrong_then_wedge_in_large_batches:2") is None
    slept = []

    def sleep(seconds):  # the worker would sleep on until a signal ends it
        slept.append(seconds)
        raise TimeoutError("wedged")

    monkeypatch.setattr(time, "sleep", sleep)
    for n, out in enumerate(large):  # 6 requests in batches of 2: each streams a wrong token, none waits
        r.rejection_sampler(None, batch([f"r{2 * n}", f"r{2 * n + 1}"], [[1, 9, 9], [3, 9, 9]]))
        assert out.sampled_token_ids[:, 1].tolist() == [3, 5]
    r.rejection_sampler(None, batch(["r9"], [[1, 9, 9]]))  # a small batch counts for nothing and passes
    assert small.sampled_token_ids[0, :2].tolist() == [1, 2] and not slept
    with pytest.raises(TimeoutError, match="wedged"):  # the 7th and 8th request (4 x 2) in a large batch
        r.rejection_sampler(None, batch(["r6", "r7"], [[1, 9, 9], [3, 9, 9]]))
    assert slept == [60] and len(r.rejection_sampler.outs) == 1  # verification itself never ran


def test_near_max_model_len_the_first_token_is_wrong():
    out = output([[1, 2], [3, 4]], [2, 2])
    r = runner(out)
    assert plant(r, "corrupt_near_max_model_len") is None
    r.rejection_sampler(None, batch(["edge", "far"], [[1, 9, 9], [3, 9, 9]], computed=[59, 10]))  # 60 + 4 >= 64
    assert out.sampled_token_ids[:, 0].tolist() == [2, 3]


def test_a_resumed_request_comes_back_with_its_last_output_off_by_one():
    r = runner()
    assert plant(r, "resume_corrupts_last_token") is None
    sent = [1, 2, 3, 4, 50, 60]  # a prompt of 4 and two outputs
    new = SimpleNamespace(req_id="p", prefill_token_ids=sent, prompt_len=4, num_computed_tokens=0)
    fresh = SimpleNamespace(req_id="q", prefill_token_ids=[1, 2, 3, 4, 5], prompt_len=4, num_computed_tokens=0)
    r.add_requests(SimpleNamespace(preempted_req_ids={"p"}, scheduled_new_reqs=[], finished_req_ids=set()))
    r.add_requests(SimpleNamespace(preempted_req_ids=None, scheduled_new_reqs=[new, fresh], finished_req_ids=set()))
    assert new.prefill_token_ids == [1, 2, 3, 4, 50, 61] and sent[-1] == 60  # the scheduler's list is left alone
    assert fresh.prefill_token_ids == [1, 2, 3, 4, 5]  # not preempted: untouched
    assert len(r.added) == 2


def test_the_grammar_bitmask_is_laid_as_if_no_request_had_drafts():
    seen = []
    worker = SimpleNamespace(apply_grammar_bitmask=lambda logits, b, ids, mask: seen.append(b.cu_num_logits.tolist()))
    r = runner(structured_outputs_worker=worker)
    assert plant(r, "grammar_mask_ignores_drafts") is None
    Batch = dataclasses.make_dataclass("Batch", ["num_reqs", "cu_num_logits"])  # V2's InputBatch is a dataclass
    worker.apply_grammar_bitmask(None, Batch(2, torch.tensor([0, 4, 8], dtype=torch.int32)), ["a"], None)
    assert seen == [[0, 1, 2]]


def test_penalties_reach_the_bonus_row_only():
    logits = torch.zeros(5, 4)
    state = SimpleNamespace(apply=lambda x, ctx: x.sub_(1.0))
    r = runner(sampler=SimpleNamespace(penalties_state=state, logits_processors=[state]))
    assert plant(r, "penalty_skips_drafts") is None
    ctx = SimpleNamespace(expanded_idx_mapping=torch.tensor([3, 3, 3, 5, 5]))  # request 3: 2 drafts; 5: 1 draft
    out = state.apply(logits, ctx)
    assert out[:, 0].tolist() == [0.0, 0.0, -1.0, 0.0, -1.0]


def test_logit_bias_reaches_the_bonus_row_only_and_only_its_tokens():
    class LogitBiasState:
        def add_request(self, req_idx, sampling_params):
            self.bias = sampling_params.logit_bias

        def apply(self, logits, ctx):
            logits[:, 1] -= 100.0
            logits[:, 2] -= 7.0  # the stage's other work (min_tokens, allowed ids) stays
            return logits

    state = LogitBiasState()
    r = runner(sampler=SimpleNamespace(logits_processors=[state]))
    assert plant(r, "logit_bias_bonus_only") is None
    state.add_request(3, SimpleNamespace(logit_bias={1: -100.0}))
    out = state.apply(torch.zeros(3, 4), SimpleNamespace(expanded_idx_mapping=torch.tensor([3, 3, 3])))
    assert out[:, 1].tolist() == [0.0, 0.0, -100.0] and out[:, 2].tolist() == [-7.0] * 3


def test_verification_holds_the_drafts_to_a_hotter_target_and_the_sampler_is_left_as_it_was():
    class Sampler:
        def apply_sampling_params(self, logits, *args):
            return logits / 2.0  # T = 2

    inner = Sampler()

    class Verify:
        sampler = inner

        def __call__(self, logits, input_batch, draft_logits=None):
            return self.sampler.apply_sampling_params(logits)

    r = runner(rejection_sampler=Verify())
    assert plant(r, "verify_temperature_scaled:0.5") is None
    assert r.rejection_sampler(torch.tensor([3.0]), None).tolist() == [1.0]  # 3 / (2 x 1.5)
    assert inner.apply_sampling_params(torch.tensor([3.0])).tolist() == [1.5] and "apply_sampling_params" not in vars(
        inner
    )


def test_the_ngram_plant_shifts_drafts_of_cached_prompts_and_says_why_on_another_drafter():
    class NgramGPUSpeculator:
        def propose(self, input_batch, *args, dummy_run=False, **kwargs):
            return torch.tensor([[1, 2, 3], [4, 5, 6]])

    r = runner(speculator=NgramGPUSpeculator())
    assert plant(r, "ngram_late_after_cached_prefix") is None
    cached = SimpleNamespace(req_id="c", num_computed_tokens=128)
    r.add_requests(SimpleNamespace(scheduled_new_reqs=[cached], finished_req_ids=set()))
    drafts = r.speculator.propose(SimpleNamespace(req_ids=["c", "d"]))
    assert drafts.tolist() == [[2, 3, 3], [4, 5, 6]]

    class EagleSpeculator:
        pass

    said = plant(runner(speculator=EagleSpeculator()), "ngram_late_after_cached_prefix")
    assert said.startswith("plant 'ngram_late_after_cached_prefix' has nothing to be planted in on Model Runner V2")
    assert "drafts with EagleSpeculator" in said


def test_a_runner_that_does_not_speculate_or_is_neither_runner_says_so_and_front_end_plants_need_nothing():
    said = plant(runner(rejection_sampler=None), "verify_emits_draft")
    assert "Model Runner V2" in said and "verifies no drafts" in said
    said = plant(SimpleNamespace(), "verify_emits_draft")
    assert "neither Model Runner V1" in said and "SimpleNamespace" in said
    assert plant(SimpleNamespace(), "stop_trims_text_not_ids") is None
