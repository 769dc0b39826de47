"""The directories an engine's sockets go in (specgate.lifetime.ipc): every socket path fits, and the
directory goes with its engine, or with its run when the reaper cleans up after it."""

import os
import shutil
import tempfile
import uuid

from specgate.engines.engine_args import ipc_env
from specgate.lifetime import ipc


def test_an_engines_sockets_go_in_a_directory_of_its_own_whose_paths_fit_a_socket(monkeypatch, tmp_path):
    """Every path vLLM would bind under it stays within sockaddr_un's 107 characters: where the temp
    directory's own path is too long, the directory goes in /tmp."""
    short = tempfile.mkdtemp(prefix="sg-")
    long = tmp_path / ("x" * 60)
    long.mkdir()
    try:
        for base, expected_parent in ((short, short), (str(long), "/tmp")):
            monkeypatch.setattr(tempfile, "tempdir", base)
            directory = ipc.make()
            try:
                assert str(directory.parent) == expected_parent and directory.is_dir()
                assert directory.name.startswith(f"specgate-ipc-{os.getpid()}-")
                assert len(f"{ipc_env(directory)['VLLM_RPC_BASE_PATH']}/{uuid.uuid4()}") <= 107
            finally:
                ipc.remove(directory)
            assert not directory.exists()
    finally:
        shutil.rmtree(short)
    assert ipc_env(None) == {}  # where no directory fits: vLLM's default


def test_the_reaper_removes_only_the_directories_of_the_run_that_ended(monkeypatch):
    base = tempfile.mkdtemp(prefix="sg-")
    monkeypatch.setattr(tempfile, "tempdir", base)
    try:
        ended, running = ipc.make(owner=4194301), ipc.make(owner=4194302)
        (ended / "a-socket").write_text("")
        ipc.remove_owned(4194301)
        assert not ended.exists() and running.is_dir()
    finally:
        shutil.rmtree(base)
