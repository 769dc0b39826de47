"""`specgate release-day`: the report printed and written, the suites it was asked to run and their exit
code, and bad input / no network as one paragraph with its own exit code, no traceback."""

from __future__ import annotations

import pytest

from specgate import cli
from specgate.release import suites
from specgate.sampler import cuda_sources
from specgate.vllm_compat import releases
from tests.unit.release.vllm_trees import index, pair, supported


@pytest.fixture
def trees(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGATE_VLLM_CUDA_SRC", str(tmp_path / "src"))
    monkeypatch.setattr(releases, "RELEASES", supported("1.0.0"))
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("PIP_INDEX_URL", index(tmp_path / "index", "1.0.0", "1.1.0"))  # no test reaches PyPI
    return pair(tmp_path / "src")


def test_the_report_without_suites(trees, tmp_path, capsys):
    assert cli.main(["release-day", "1.1.0", "--no-contract", "--no-properties", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "# vLLM 1.1.0 release day\n\nCompared with vLLM 1.0.0: the newest supported release before it"
    )
    for heading in (
        "### methods",
        "### model runners",
        "### speculators Model Runner V2 builds",
        "## What a runner's owner must do before moving to 1.1.0",
        "## Verdict",
    ):
        assert heading in out
    assert "no suite ran; not run: contract, properties" in out and "(exit 0)" in out
    assert (tmp_path / "out" / "report.md").read_text() == out


def test_a_failing_suite_is_exit_1_with_its_failures(trees, tmp_path, capsys, monkeypatch):
    # the child pytest itself is tests/unit/release/test_suites.py's; here what the command makes of its result
    failed = suites.Suite(
        "contract",
        "pytest tests/contract",
        3.0,
        1,
        5,
        1,
        0,
        2,
        (("tests/contract/test_x.py::test_y[source-1.1.0-a:b]", "AssertionError: a:b changed"),),
        junit=str(tmp_path / "contract.xml"),
    )
    monkeypatch.setattr(suites, "run", lambda name, release, tree, plan: failed)
    assert cli.main(["release-day", "1.1.0", "--since", "1.0.0", "--no-properties", "--out", str(tmp_path / "o")]) == 1
    out = capsys.readouterr().out
    assert "Compared with vLLM 1.0.0: --since." in out
    assert "### contract suite (tests/contract): 5 passed, 1 failed, 0 errors, 2 skipped in 3 s" in out
    assert "- tests/contract/test_x.py::test_y[source-1.1.0-a:b]: AssertionError: a:b changed" in out
    assert "contract FAILED; not run: properties: the suite needs work" in out and "(exit 1)" in out


def not_on_the_index(release):
    said = (
        f"ERROR: Could not find a version that satisfies the requirement vllm=={release} (from versions: 1.0.0, 1.1.0)"
    )
    raise cuda_sources.FetchError(release, said)


@pytest.mark.parametrize(
    ("release", "code", "words"),
    [("latest", 2, "'latest' is not a vLLM release number"), ("1.2.0", 2, "vLLM 1.2.0 is not on PyPI")],
)
def test_bad_input_is_one_paragraph_and_exit_2(trees, capsys, monkeypatch, release, code, words):
    monkeypatch.setattr(cuda_sources, "fetch", not_on_the_index)  # pip itself: tests/unit/release/test_release_day.py
    assert cli.main(["release-day", release, "--no-contract", "--no-properties"]) == code
    captured = capsys.readouterr()
    assert words in captured.err and "Traceback" not in captured.err and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1


def test_no_network_is_exit_3(trees, monkeypatch, capsys):
    said = "WARNING: Retrying after connection broken by 'NewConnectionError(...: Connection refused)': /simple/vllm/"

    def offline(release):
        raise cuda_sources.FetchError(release, said)

    monkeypatch.setattr(cuda_sources, "fetch", offline)
    assert cli.main(["release-day", "1.2.0", "--no-contract", "--no-properties"]) == 3
    assert "PyPI could not be reached" in capsys.readouterr().err


def test_help_names_the_options_and_exit_codes(capsys):
    assert cli.main(["release-day", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--since", "--no-contract", "--no-properties", "--suite-timeout", "--out", "--root"):
        assert option in text
    assert "3: PyPI unreachable" in " ".join(text.split())
