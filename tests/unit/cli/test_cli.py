"""The `specgate` command: report regeneration, baseline diffs, error paths without tracebacks."""

import subprocess
import sys
from pathlib import Path

from specgate import cli, report
from specgate.store import baselines
from tests.unit.fakes import fake_profile
from tests.unit.report.test_report import fabricated_run, fabricated_table

PROV = {
    "vllm": "0.32.0",
    "torch": "2.13.0",
    "python": "3.11.7",
    "device": "cpu",
    "device_count": 2,
    "date": "2026-11-22T00:00:00+00:00",
    "git_revision": "abc1234",
}


def baseline_file(path, methods, profile="cpu-tiny", hardware="cpu-x-2c"):
    f = baselines.BaselineFile(path, profile, hardware, methods)
    baselines.write_atomic(f)
    return path


def old_and_new(tmp_path):
    old = baseline_file(
        tmp_path / "old.json",
        {
            "eagle": {
                "provenance": PROV,
                "acceptance": {"code": {"mean_acceptance_length": 2.0, "per_position": [0.6, 0.4]}},
            },
            "ngram": {"provenance": PROV, "memory": {"overhead": {"process_mib": 40.0}}},
        },
    )
    run_dir = tmp_path / "results" / "r2"
    baseline_file(
        run_dir / "baselines.json",
        {
            "eagle": {
                "provenance": dict(PROV, vllm="0.33.0"),
                "acceptance": {"code": {"mean_acceptance_length": 2.2, "per_position": [0.6, 0.45]}},
            },
            "ngram": {"provenance": PROV, "memory": {"overhead": {"process_mib": 40.0}}},
            "mtp": {"provenance": PROV, "acceptance": {"code": {"mean_acceptance_length": 1.7}}},
        },
    )
    return old, run_dir


def test_report_regenerates_the_files_of_a_results_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    report.write_tables(tmp_path, fabricated_table(gates=("equivalence", "lifecycle")))  # no plots: fast
    fabricated_run().write(tmp_path / "run.json")
    assert cli.main(["report", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    assert str(tmp_path / "summary.md") in printed and str(tmp_path / "report.html") in printed
    assert "## lifecycle" in (tmp_path / "summary.md").read_text()
    assert "engine for medusa did not boot" in (tmp_path / "report.html").read_text()


def test_report_of_a_missing_dir_is_one_paragraph_and_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err and err.count("\n") == 1


def test_diff_of_a_baseline_file_and_a_run_is_a_markdown_table(tmp_path, capsys):
    old, run_dir = old_and_new(tmp_path)
    assert cli.main(["baselines", "diff", str(old), str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "| method | kind | key | value | old | new | change |" in out
    assert "| eagle | acceptance | code | mean_acceptance_length | 2 | 2.2 | +10.0% |" in out
    assert "| eagle | acceptance | code | per_position[1] | 0.4 | 0.45 | +12.5% |" in out
    assert "| mtp | acceptance | code | (1 values) | – | – | new entry |" in out
    assert "ngram" not in out.split("Provenance:")[0]  # unchanged values are not listed
    assert "- eagle: vLLM 0.32.0, 2026-11-22, rev abc1234 → vLLM 0.33.0" in out


def test_diff_exit_code_flag_reports_differences_like_git_diff(tmp_path, capsys):
    old, run_dir = old_and_new(tmp_path)
    assert cli.main(["baselines", "diff", "--exit-code", str(old), str(run_dir)]) == 1
    assert cli.main(["baselines", "diff", "--exit-code", str(old), str(old)]) == 0
    assert "No value changed." in capsys.readouterr().out


def test_diff_text_format_is_the_aligned_table(tmp_path, capsys):
    old, run_dir = old_and_new(tmp_path)
    assert cli.main(["baselines", "diff", "--format", "text", str(old), str(run_dir)]) == 0
    assert "+10.0%" in capsys.readouterr().out


def test_diff_across_profiles_says_so(tmp_path, capsys):
    a = baseline_file(tmp_path / "a.json", {}, profile="h100-llama")
    b = baseline_file(tmp_path / "b.json", {}, profile="a100-llama", hardware="nvidia-a100-sxm4-80gb-x4")
    assert cli.main(["baselines", "diff", str(a), str(b)]) == 0
    assert "Note: A is profile h100-llama on cpu-x-2c, B is profile a100-llama" in capsys.readouterr().out


def test_diff_of_two_machines_under_one_name_names_both(tmp_path, capsys):
    from specgate.machine import Identity

    zen4 = Identity({"kind": "cpu", "vendor": "AuthenticAMD", "name": "AMD EPYC", "family": 25, "model": 17})
    old = tmp_path / "cpu-x-2c.json"  # of before identities
    baselines.write_atomic(baselines.BaselineFile(old, "cpu-tiny", "cpu-x-2c", {}))
    new = tmp_path / f"cpu-x-2c.{zen4.id}.json"
    baselines.write_atomic(baselines.BaselineFile(new, "cpu-tiny", "cpu-x-2c", {}, zen4))
    assert cli.main(["baselines", "diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert f"Note: A is profile cpu-tiny on cpu-x-2c, B is profile cpu-tiny on cpu-x-2c, machine {zen4.id}." in out
    assert "A's machine: identity not recorded; B's: AMD EPYC (AuthenticAMD family 25 model 17, Zen 4)." in out


def test_diff_errors_name_the_file_and_exit_2(tmp_path, capsys):
    good, _ = old_and_new(tmp_path)
    truncated = tmp_path / "trunc.json"
    truncated.write_text('{"schema": 1, "profile": "p", "hardware": "h", "methods": {"ng')
    other_schema = tmp_path / "v2.json"
    other_schema.write_text('{"schema": 2, "profile": "p", "hardware": "h", "methods": {}}')
    (tmp_path / "empty_run").mkdir()
    cases = [
        (tmp_path / "missing.json", "does not exist"),
        (truncated, "not valid JSON"),
        (other_schema, "'schema' is 2"),
        (tmp_path / "empty_run", "directory without baselines.json"),
    ]
    for path, words in cases:
        assert cli.main(["baselines", "diff", str(good), str(path)]) == 2
        err = capsys.readouterr().err
        assert words in err and str(path) in err and "Traceback" not in err


def test_a_commands_own_flags_name_the_setting_at_fault(tmp_path, capsys):
    """`specgate calibrate --methods` is told of its --methods, not of the gate run's pytest option: the profile
    names the setting, the command how its user spells it."""
    (tmp_path / "fixtures" / "profiles").mkdir(parents=True)
    (tmp_path / "fixtures" / "profiles" / "fake.toml").write_text(
        fake_profile('[methods.ngram]\nspeculative_config = { method = "ngram", num_speculative_tokens = 2 }\n')
    )
    assert cli.main(["calibrate", "--root", str(tmp_path), "--profile", "fake", "--methods", "eagle"]) == 2
    assert capsys.readouterr().err.startswith("specgate: --methods: profile 'fake' ")
    assert cli.main(["calibrate", "--root", str(tmp_path), "--profile", "nope"]) == 2
    assert capsys.readouterr().err.startswith("specgate: --profile: no profile named 'nope'")


def test_usage_errors_exit_2(capsys):
    assert cli.main([]) == 2
    assert cli.main(["baselines", "merge", "a", "b"]) == 2
    assert cli.main(["--help"]) == 0
    assert "report" in capsys.readouterr().out


def test_diff_names_the_models_that_changed_before_the_figures(tmp_path, capsys):
    def entry(drafter_revision, length):
        models = {
            "target": {
                "ref": "meta-llama/Llama-3.1-8B-Instruct",
                "revision": "0e9e39f249a16976918f6564b8830bc894c89659",
            },
            "drafter": {"ref": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "revision": drafter_revision},
        }
        return {"provenance": dict(PROV, models=models), "acceptance": {"code": {"mean_acceptance_length": length}}}

    old = baseline_file(tmp_path / "old.json", {"eagle3": entry("abc1234" + "0" * 33, 2.0)})
    new = baseline_file(tmp_path / "new.json", {"eagle3": entry("def5678" + "0" * 33, 1.6)})
    assert cli.main(["baselines", "diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    moved = "- eagle3's drafter: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B abc1234 → def5678"
    assert moved in lines and lines.index(moved) < lines.index("| method | kind | key | value | old | new | change |")
    assert "target" not in out  # the target did not move
    assert cli.main(["baselines", "diff", "--format", "text", str(old), str(new)]) == 0
    assert (
        "  model: eagle3's drafter: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B abc1234 -> def5678" in capsys.readouterr().out
    )
    same_figures = baseline_file(tmp_path / "same.json", {"eagle3": entry("def5678" + "0" * 33, 2.0)})
    assert cli.main(["baselines", "diff", "--exit-code", str(old), str(same_figures)]) == 1  # the weights moved


def test_python_dash_m_specgate_is_the_specgate_command(tmp_path):
    """`python -m specgate ...` runs the command as `specgate ...` does: the same output and exit code, here
    for a diff with differences (--exit-code: 1) and a usage error (2)."""
    old, run_dir = old_and_new(tmp_path)
    script = Path(sys.executable).with_name("specgate")
    for args, code in ((["baselines", "diff", "--exit-code", str(old), str(run_dir)], 1), (["nonsense"], 2)):
        by_module = subprocess.run([sys.executable, "-m", "specgate", *args], capture_output=True, text=True)
        by_script = subprocess.run([str(script), *args], capture_output=True, text=True)
        assert by_module.returncode == by_script.returncode == code, (by_module.stderr, by_script.stderr)
        assert by_module.stdout == by_script.stdout and by_module.stderr == by_script.stderr
