"""The CUDA wheel's sources for Model Runner V2's sampler: fetched once (only Python files and the
dist-info kept), found by release, and when they or triton are missing the V2 property tests skip
naming what is missing, never pass."""

from __future__ import annotations

import importlib.util
import subprocess
import zipfile
from pathlib import Path

import pytest

from specgate.sampler import cuda_sources as vllm_source
from specgate.sampler import v2 as rejection_v2
from tests.property.samplers import Subject


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGATE_VLLM_CUDA_SRC", str(tmp_path / "vllm-cuda-src"))
    return tmp_path / "vllm-cuda-src"


def fake_pip(calls: list, release: str = "0.33.0"):
    def run(cmd, **kwargs):
        calls.append(cmd)
        target = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(target / f"vllm-{release}-cp38-abi3-manylinux1_x86_64.whl", "w") as wheel:
            wheel.writestr("vllm/__init__.py", "__version__ = '0.33.0'\n")
            wheel.writestr("vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py", "# kernels\n")
            wheel.writestr("vllm/_C.abi3.so", b"\0ELF")
            wheel.writestr("vllm/model_executor/layers/fused_moe/configs/E=8.json", "{}")
            wheel.writestr(f"vllm-{release}.dist-info/METADATA", "Name: vllm\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run


def test_fetch_keeps_python_files_and_dist_info_once(cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(vllm_source.subprocess, "run", fake_pip(calls))
    assert "ci/setup-cpu.sh" in vllm_source.missing("0.33.0") and str(cache / "0.33.0") in vllm_source.missing("0.33.0")
    tree = vllm_source.fetch("0.33.0")
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    assert files == [
        "vllm-0.33.0.dist-info/METADATA",
        "vllm/__init__.py",
        "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
    ]
    assert calls[0][-1] == "vllm==0.33.0" and "--no-deps" in calls[0]
    assert vllm_source.missing("0.33.0") == "" and vllm_source.release_of(tree) == "0.33.0"
    vllm_source.fetch("0.33.0")  # idempotent: nothing downloaded again
    assert len(calls) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".fetch")], "temporary download left behind"


def test_an_interrupted_fetch_leaves_no_tree(cache, monkeypatch):
    def fail(cmd, **kwargs):
        raise subprocess.CalledProcessError(1, cmd)

    monkeypatch.setattr(vllm_source.subprocess, "run", fail)
    with pytest.raises(subprocess.CalledProcessError):
        vllm_source.fetch("0.32.0")
    assert vllm_source.missing("0.32.0") and not (cache / "0.32.0").exists()


def test_a_failed_download_raises_with_what_pip_said(cache, monkeypatch):
    said = "ERROR: No matching distribution found for vllm==0.99.0\n"
    monkeypatch.setattr(
        vllm_source.subprocess, "run", lambda cmd, **kwargs: subprocess.CompletedProcess(cmd, 1, "", said)
    )
    with pytest.raises(vllm_source.FetchError, match="No matching distribution found for vllm==0.99.0") as caught:
        vllm_source.fetch("0.99.0")
    assert caught.value.output == said and not (cache / "0.99.0").exists()


def test_the_releases_under_test_default_to_the_supported_ones(monkeypatch):
    monkeypatch.delenv(vllm_source.RELEASES_VARIABLE, raising=False)
    assert vllm_source.under_test() == vllm_source.RELEASES
    monkeypatch.setenv(vllm_source.RELEASES_VARIABLE, "0.34.0, 0.35.0")
    assert vllm_source.under_test() == ("0.34.0", "0.35.0")


def test_release_numbers_are_checked():
    with pytest.raises(ValueError, match="0.33.0"):
        vllm_source.fetch("latest")


def test_v2_tests_skip_naming_the_missing_sources(cache):
    with pytest.raises(pytest.skip.Exception, match=r"vLLM 0\.33\.0's CUDA sources are not in .*ci/setup-cpu\.sh"):
        Subject("v2", "standard", "0.33.0").built()


def test_v2_tests_skip_naming_missing_triton(cache, monkeypatch):
    (cache / "0.33.0" / "vllm" / "v1" / "worker" / "gpu").mkdir(parents=True)
    (cache / "0.33.0" / "vllm" / "__init__.py").write_text("")
    (cache / "0.33.0" / "vllm-0.33.0.dist-info").mkdir()
    real = rejection_v2.importlib.util.find_spec
    monkeypatch.setattr(rejection_v2.importlib.util, "find_spec", lambda name: None if name == "triton" else real(name))
    with pytest.raises(pytest.skip.Exception, match=r"triton is not installed \(pip install triton==3\.9\.0"):
        Subject("v2", "standard", "0.33.0").built()


def test_a_rule_the_release_lacks_skips_naming_it(cache):
    tree = cache / "0.32.0"
    (tree / "vllm" / "config").mkdir(parents=True)
    (tree / "vllm" / "v1" / "worker" / "gpu").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    (tree / "vllm-0.32.0.dist-info").mkdir()
    (tree / "vllm" / "config" / "speculative.py").write_text(
        'RejectionSampleMethod = Literal["standard", "synthetic", "block"]\n'
    )
    with pytest.raises(pytest.skip.Exception, match="vLLM 0.32.0 has no rejection_sample_method 'fly'"):
        Subject("v2", "fly", "0.32.0").built()


def test_v2_rules_are_checked():
    with pytest.raises(ValueError, match="rejection_sample_method"):
        rejection_v2.V2Rule("lossy")
    with pytest.raises(ValueError, match="fly_window_size"):
        rejection_v2.V2Rule("fly")


def test_v1_subjects_skip_in_the_tables_words_where_the_installed_vllm_has_no_v1(monkeypatch):
    """Where the installed vLLM is one without Model Runner V1 (CUDA 0.34.0), V1's sampler tests skip
    quoting specgate/vllm_compat/releases.py, before anything imports vLLM's V1 modules."""
    import sys

    from specgate import vllm_compat

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr(sys.modules["specgate.vllm_compat.release"], "identify", lambda source=None: ("0.34.0", "cuda"))
    monkeypatch.setattr(vllm_compat, "release", lambda: "vLLM 0.34.0")
    with pytest.raises(
        pytest.skip.Exception, match=r"V1 sampler: vLLM 0\.34\.0 \(installed\) has none: vLLM 0\.34\.0 deleted"
    ):
        Subject("v1").built()
