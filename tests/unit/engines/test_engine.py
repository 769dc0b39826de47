"""The engine's environment: laid over os.environ for its lifetime, and put back as it was."""

import os

from specgate.engines import engine


def test_an_engine_environment_is_put_back_as_it_was(monkeypatch):
    monkeypatch.setenv("SPECGATE_TEST_KEPT", "before")
    monkeypatch.delenv("SPECGATE_TEST_NEW", raising=False)
    saved = engine._overlay_env({"SPECGATE_TEST_KEPT": "during", "SPECGATE_TEST_NEW": "1"})
    assert os.environ["SPECGATE_TEST_KEPT"] == "during" and os.environ["SPECGATE_TEST_NEW"] == "1"
    engine._restore_env(saved)
    assert os.environ["SPECGATE_TEST_KEPT"] == "before" and "SPECGATE_TEST_NEW" not in os.environ
