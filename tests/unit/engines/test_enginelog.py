"""Engine failure explanation and shutdown verdicts, without an engine."""

from pathlib import Path

import pytest

from specgate.backend import RELEASE_SLACK_BYTES, ShutdownReport
from specgate.engines import enginelog
from specgate.profile import find_profile, load_profile

ROOT = Path(__file__).resolve().parents[3]

# Shape of a real cpu-tiny boot failure: a harmless "Exception ignored" notice first, then the
# worker's root cause, then the wrappers the engine core and this process raise.
LOG = """\
INFO starting
Exception ignored in: <function Handler.__del__ at 0x1>
Traceback (most recent call last):
  File "x.py", line 1, in __del__
AssertionError: harmless notice
(Worker pid=1) ERROR 11-22 00:58:39 [multiproc_executor.py:953] Traceback (most recent call last):
(Worker pid=1) ERROR 11-22 00:58:39 [multiproc_executor.py:953]   File "loader.py", line 9, in load
(Worker pid=1) ERROR 11-22 00:58:39 [multiproc_executor.py:953]     raise ValueError(msg)
(Worker pid=1) ERROR 11-22 00:58:39 [multiproc_executor.py:953] ValueError: There is no module or parameter named 'lm_head'
(EngineCore pid=2) ERROR 11-22 00:58:42 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=2) ERROR 11-22 00:58:42 [core.py:1510] Exception: WorkerProc initialization failed
"""  # noqa: E501 (vLLM's log lines, as long as vLLM writes them)


def test_root_cause_is_the_first_real_traceback(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(LOG)
    reason, tail = enginelog.root_cause(log, RuntimeError("Engine core initialization failed"))
    assert reason == "ValueError: There is no module or parameter named 'lm_head'"
    assert tail.endswith("named 'lm_head'") and "harmless" not in tail


def test_without_a_traceback_the_exception_and_plain_tail_are_used(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("line 1\nline 2\n")
    reason, tail = enginelog.root_cause(log, RuntimeError("boom"))
    assert reason == "RuntimeError: boom" and tail == "line 1\nline 2"


# vLLM 0.31.0's server refusing mlp_speculator (engines/mlp_speculator-0.31.0.log of a real rehearsal): the
# exception's header line says only "1 validation error"; the sentence is on the next line, 10,575 characters.
SERVER_LOG = ROOT / "tests" / "unit" / "data" / "mlp_speculator-server-0.31.0.log"


def test_the_root_cause_carries_the_sentence_after_a_header_only_exception_line():
    reason, tail = enginelog.root_cause(SERVER_LOG, RuntimeError("exit code 1"))
    assert reason == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig Value error, "
        "Model architectures ['MLPSpeculatorPreTrainedModel'] are not supported for now."
    )
    assert tail.splitlines()[-1].lstrip().startswith("Value error, Model architectures")


def test_an_expected_refusal_is_matched_in_the_whole_log_of_a_server_that_did_not_boot():
    from specgate.engines.server import ServerError

    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    error = ServerError(
        "server 'mlp_speculator' exited with 1 before it answered /health: "
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
        SERVER_LOG,
    )
    assert max(len(line) for line in SERVER_LOG.read_text().splitlines()) > 10_000
    quote = profile.methods["mlp_speculator"].expected_refusal(enginelog.failure_text(error))
    assert quote == "Value error, Model architectures ['MLPSpeculatorPreTrainedModel'] are not supported for now."
    # any other method's refusal pattern does not match this log: its boot failure stays a failure
    assert profile.methods["ngram"].expected_refusal(enginelog.failure_text(error)) is None


def test_display_shortening_comes_after_matching():
    assert enginelog.shorten("x" * 500, 400) == "x" * 399 + "…"
    assert enginelog.shorten("short") == "short"


def test_shutdown_fails_on_leftover_processes_or_kept_memory():
    ok = ShutdownReport("m", 5.0, [], rss_before_boot=100, rss_after_shutdown=100)
    leaked_process = ShutdownReport("m", 5.0, [4242], 100, 100)
    kept_memory = ShutdownReport("m", 5.0, [], 100, 100 + RELEASE_SLACK_BYTES + 1)
    assert ok.released and not leaked_process.released and not kept_memory.released
    assert "4242" in leaked_process.describe() and "did not give back" in kept_memory.describe()


@pytest.fixture
def routed_vllm(tmp_path, request):
    """vLLM's records routed to an engine's log from the setup phase on, as a gate run's first boot leaves
    them: pytest then enters the test's own phase with "vllm" already a non-propagating logger. pytest's
    handlers filtered as the plugin filters them where it builds a gate session (this run has none)."""
    import logging

    from specgate.engines import logstream

    logger = logging.getLogger("vllm")
    before = (list(logger.handlers), logger.propagate, logger.level, logstream.STREAM.path)
    logging_plugin = request.config.pluginmanager.get_plugin("logging-plugin")
    logstream.keep_out_of_reports(logging_plugin)
    logstream.STREAM.route_to(tmp_path / "ngram.log")
    logstream.take_vllm_records()
    yield logstream
    for handler in logger.handlers[len(before[0]) :]:
        logger.removeHandler(handler)
    logger.propagate, logger.level, logstream.STREAM.path = before[1], before[2], before[3]
    for handler in (logging_plugin.caplog_handler, logging_plugin.report_handler):
        handler.removeFilter(logstream.not_routed)


def test_vllms_records_go_to_the_engines_log_not_into_the_running_tests_output(routed_vllm, tmp_path, caplog):
    import logging

    routed_vllm.take_vllm_records()  # idempotent: one handler
    assert sum(getattr(h, "stream", None) is routed_vllm.STREAM for h in logging.getLogger("vllm").handlers) == 1
    # what vLLM logs on its own thread while an engine is stopped on purpose
    logging.getLogger("vllm.v1.engine.async_llm").error("AsyncLLM output_handler failed.")
    routed_vllm.STREAM.route_to(tmp_path / "eagle.log")  # the next engine's log takes over
    logging.getLogger("vllm.v1.engine.core_client").info("[shutdown] MPClient: complete")
    logging.getLogger("specgate.elsewhere").warning("not vLLM's")
    assert "ERROR vllm.v1.engine.async_llm: AsyncLLM output_handler failed." in (tmp_path / "ngram.log").read_text()
    assert "INFO vllm.v1.engine.core_client: [shutdown] MPClient: complete" in (tmp_path / "eagle.log").read_text()
    # pytest 9 attached its handlers to the non-propagating "vllm" logger: the plugin's filter keeps them out
    assert "output_handler" not in caplog.text and "MPClient" not in caplog.text and "not vLLM's" in caplog.text
