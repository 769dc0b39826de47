"""The drift check: a portable figure held to the best value in the baseline file's git history, on a
history built in a temporary git repository (three committed updates, each measured by another vLLM,
each within the gate's own tolerance of the one before)."""

import shutil
import subprocess
import warnings

import pytest

from specgate import machine
from specgate.checks import Verdict
from specgate.checks.drift import DriftWarning
from specgate.cli import history as cli_history
from specgate.profile import load_profile
from specgate.store import history
from specgate.store.run_record import GATE, RunRecord
from specgate.testing import FakeScript, fake_session

from ..fakes import fake_profile

pytestmark = (
    pytest.mark.needs_vllm
)  # fake gate sessions: a boot tokenizes with the target's transformers tokenizer (imports torch)

CATEGORY = "doc_prose"
PROFILE = fake_profile("""
[methods.good]
speculative_config = { method = "ngram", num_speculative_tokens = 3 }
[methods.worse]
speculative_config = { method = "ngram", num_speculative_tokens = 3 }
canary_of = { acceptance = "good" }
[tolerance]
acceptance_rtol = 0.05
drift_rtol = 0.08
""")
# Each release accepts a little less: mean acceptance length 3.0 -> 2.917 -> 2.833, each update within
# acceptance_rtol 0.05 of the one before; the run on "0.32.0" (2.75) is too, but 8.3 % below the best.
RELEASES = (("0.29.0", 2.0, "2026-01-10"), ("0.30.0", 1.9, "2026-02-10"), ("0.31.0", 1.82, "2026-03-10"))


def git(root, *args, date="2026-01-01"):
    env = {
        "GIT_AUTHOR_DATE": f"{date}T12:00:00+00:00",
        "GIT_COMMITTER_DATE": f"{date}T12:00:00+00:00",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def load(root, extra=""):
    path = root / "fake.toml"
    path.write_text(extra + PROFILE)  # top-level keys before the tables
    return load_profile(path, root)


def run(profile, root, accepted, vllm, monkeypatch, update=False, methods=("good",)):
    monkeypatch.setattr(machine, "module_version", lambda module: vllm if module == "vllm" else "2.13.0")
    script = FakeScript.from_dict({"methods": {m: {"accepted": accepted} for m in methods}})
    session = fake_session(
        profile, root, script, methods=list(methods), update_baselines=update, hardware="cpu-test-2c"
    )
    judged = {m: session.judge("acceptance", m, CATEGORY) for m in methods}
    if update:
        session.write_baselines()
    session.release_all()
    return judged, session


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A checkout whose baseline file was updated three times, by vLLM 0.29.0, 0.30.0 and 0.31.0."""
    git(tmp_path, "init", "-q")
    profile = load(tmp_path)
    git(tmp_path, "add", "fake.toml")
    git(tmp_path, "commit", "-q", "-m", "profile")
    for vllm, accepted, date in RELEASES:
        judged, _ = run(profile, tmp_path, accepted, vllm, monkeypatch, update=True)
        assert judged["good"].verdict is not Verdict.FAIL  # each update alone passes the gate
        git(tmp_path, "add", "baselines")
        git(tmp_path, "commit", "-q", "-m", f"baselines from vLLM {vllm}", date=date)
    return tmp_path


def test_a_slow_drift_that_each_update_hid_fails_naming_the_first_drop_and_the_releases(repo, monkeypatch):
    profile = load(repo)
    judged, _ = run(profile, repo, 1.75, "0.32.0", monkeypatch)
    j = judged["good"]
    assert j.verdict is Verdict.FAIL
    assert len(j.messages) == 1  # the latest baseline alone (1.82 x 0.95) would have passed it
    message = j.message
    best_rev, first_drop = (
        line.split()[0][:7]
        for line in git(repo, "log", "--reverse", "--format=%H %s", "--", "baselines").splitlines()[:2]
    )
    assert f"the best the baseline history stored, 3 at rev {best_rev} (2026-01-10, vLLM 0.29.0" in message
    assert f"It first dropped at rev {first_drop} (2026-02-10, vLLM 0.30.0" in message and "3 -> 2.917" in message
    assert "vLLM since the best: 0.29.0 -> 0.30.0 -> 0.31.0 -> 0.32.0 (this run)" in message
    assert "drift_rtol 0.08 allows down to 2.76" in message
    row = next(r for r in j.rows if r.metric == "drift_mean_acceptance_length")
    assert (row.value, row.baseline, row.failing) == (2.75, 3.0, True)


def test_a_figure_within_drift_rtol_of_its_best_passes_and_canaries_are_not_held_to_it(repo, monkeypatch):
    judged, _ = run(load(repo), repo, 1.85, "0.32.0", monkeypatch, methods=("good", "worse"))
    assert judged["good"].verdict is Verdict.PASS
    assert judged["worse"].verdict is Verdict.FAIL and "cannot fail here" in judged["worse"].message


def test_drift_warn_warns_instead_of_failing(repo, monkeypatch):
    profile = load(repo, 'drift = "warn"\n')
    with pytest.warns(DriftWarning, match="first dropped"):
        judged, _ = run(profile, repo, 1.75, "0.32.0", monkeypatch)
    assert judged["good"].verdict is Verdict.PASS


def test_drift_since_forgets_the_updates_before_a_date(repo, monkeypatch):
    profile = load(repo, 'drift_since = "2026-03-01"\n')
    judged, _ = run(profile, repo, 1.75, "0.32.0", monkeypatch)
    assert judged["good"].verdict is Verdict.PASS  # the best since then is 0.31.0's 2.833


def test_an_update_run_still_says_the_figure_drifted(repo, monkeypatch):
    judged, _ = run(load(repo), repo, 1.75, "0.32.0", monkeypatch, update=True)
    assert judged["good"].verdict is Verdict.FAIL and "first dropped" in judged["good"].message


def test_new_inputs_start_a_new_series_instead_of_reading_as_drift(repo, monkeypatch):
    """Another method setting (a retrained drafter, other prompts) is not the same measurement."""
    profile = load(repo)
    (repo / "fake.toml").write_text(
        (repo / "fake.toml")
        .read_text()
        .replace(
            'method = "ngram", num_speculative_tokens = 3 }',
            'method = "ngram", num_speculative_tokens = 3, prompt_lookup_max = 5 }',
            1,
        )
    )
    judged, _ = run(load_profile(repo / "fake.toml", repo), repo, 1.75, "0.32.0", monkeypatch)
    assert judged["good"].verdict is Verdict.PASS
    assert profile.path == repo / "fake.toml"


def test_without_git_or_in_a_shallow_clone_drift_is_not_judged_and_the_summary_says_so(
    repo, monkeypatch, tmp_path_factory
):
    shallow = tmp_path_factory.mktemp("shallow") / "clone"
    git(repo, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    judged, session = run(load(shallow), shallow, 1.75, "0.32.0", monkeypatch)
    assert judged["good"].verdict is Verdict.PASS  # the latest baseline alone: 2.75 against 2.833 x 0.95
    assert any(
        "drift (tolerance.drift_rtol 0.08) not judged: this is a shallow clone" in line for line in session.header()
    )
    shutil.rmtree(repo / ".git")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DriftWarning)
        judged, session = run(load(repo), repo, 1.85, "0.32.0", monkeypatch)
    assert judged["good"].verdict is Verdict.PASS
    assert any("not judged" in line and "not a git checkout" in line for line in session.header())


def test_the_history_table_lists_each_update_with_its_vllm_and_marks_the_release_changes(repo):
    h = history.read(repo, "fake")
    rows = cli_history.table(h)
    assert [(r.vllm, round(r.figures["acceptance"], 2)) for r in rows] == [
        ("0.29.0", 3.0),
        ("0.30.0", 2.92),
        ("0.31.0", 2.83),
    ]
    assert [(old, new) for _, old, new in cli_history.releases(rows)] == [("0.29.0", "0.30.0"), ("0.30.0", "0.31.0")]
    # one hardware name's history: every identity's file of that name (here this machine's), and no other name's
    named = history.read(repo, "fake", "cpu-test-2c")
    assert [u.path for u in named.updates] == [u.path for u in h.updates] and named.updates[0].path.endswith(
        f"cpu-test-2c.{machine.this_identity('cpu').id}.json"
    )
    assert history.read(repo, "fake", "cpu-other-2c").updates == []


def test_specgate_history_writes_the_table_and_plots_with_a_results_directory_after_the_updates(
    repo, capsys, monkeypatch
):
    from specgate import cli
    from specgate.report import plots

    monkeypatch.setattr(plots, "DPI", 30)
    run_dir = repo / "results" / "20260401-120000"
    run_dir.mkdir(parents=True)
    committed = next((repo / "baselines" / "fake").glob("cpu-test-2c.*.json")).read_text()  # this machine's
    (run_dir / "baselines.json").write_text(committed.replace('"0.31.0"', '"0.32.0"').replace("2.833333", "2.75"))
    RunRecord(GATE, run_dir.name, "fake", started="2026-04-01T12:00:00+00:00", vllm="0.32.0").write(
        run_dir / "run.json"
    )
    out = repo / "results" / "history"
    assert (
        cli.main(
            [
                "history",
                str(run_dir),
                "--profile",
                str(repo / "fake.toml"),
                "--hardware",
                "all",
                "--root",
                str(repo),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = (out / "history.md").read_text()
    here = f"cpu-test-2c, machine {machine.this_identity('cpu').id}"  # the run's and the updates' machine
    assert f"| 20260401-120000 | 2026-04-01 | {here} | 0.32.0: good | (results directory) |" in text
    assert "| 20260401-120000 | 2.75 |" in text and (out / "plots" / "history.png").is_file()
    assert str(out / "history.html") in capsys.readouterr().out


def test_specgate_history_without_git_says_what_to_do(tmp_path, capsys):
    from specgate import cli

    profile = load(tmp_path)
    assert cli.main(["history", "--profile", str(profile.path), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no history to read" in err and "is not a git checkout" in err and "run it in a git clone" in err


def test_the_history_says_which_models_each_methods_figures_were_measured_with_and_where_they_changed(repo):
    from specgate.report import history as page

    rows = cli_history.table(history.read(repo, "fake"))
    target = rows[0].models["target"]
    assert target["ref"].endswith("fixtures/zoo/target") and target["revision"].startswith("sha256:")
    assert all(r.models == rows[0].models for r in rows)  # one zoo all along: said once
    lines = page.models(rows)
    assert lines[-1] == f"| {rows[0].label} | good | target {target['ref']} {target['revision'][:14]} |"
    assert len(lines) == 6  # its heading, the table's head and one row
    moved = cli_history.Row("run", "2026-04-01", rows[0].hardware, "good", "0.32.0", {}, False)
    moved.models.update(target=dict(target, revision="sha256:" + "f" * 64))
    assert page.models([*rows, moved])[-1] == (
        f"| run | good | target {target['ref']} {target['revision'][:14]} → sha256:fffffff |"
    )
    assert "## Models (first recorded, then each change)" in page.markdown("fake", "all", rows)
