"""The zoo recipe (tools/zoo): build, corpus, training schedule, model card."""

import json
import shutil
from pathlib import Path

import pytest

from specgate.errors import ZooError
from specgate.models import REBUILD, ZOO_MODELS, zoo_dir

ROOT = Path(__file__).resolve().parents[2]


def test_setup_build_is_a_no_op_on_the_committed_zoo():
    from tools.zoo.build import build

    assert build(zoo_dir(ROOT)) == []


def test_setup_build_never_trains_and_names_the_missing_file(tmp_path):
    from tools.zoo.build import build

    with pytest.raises(ZooError) as err:
        build(tmp_path / "zoo")
    assert str(tmp_path / "zoo" / "target" / "config.json") in str(err.value) and REBUILD in str(err.value)


def _stream_corpus(torch, train):
    corpus = object.__new__(train.Corpus)  # the streams only; the real corpus tokenizes the stdlib
    corpus.bos = 0
    corpus.streams = {name: torch.arange(1000 * i + 1, 1000 * i + 900) for i, name in enumerate(train.REPEAT_SOURCES)}
    corpus.use_mix({name: 1 / len(corpus.streams) for name in corpus.streams})
    corpus.gen = torch.Generator().manual_seed(1)
    return corpus


@pytest.mark.needs_vllm
def test_repeat_windows_hold_each_passage_then_itself():
    torch = pytest.importorskip("torch")
    from tools.zoo import train

    corpus = _stream_corpus(torch, train)
    window = corpus._repeats(513).tolist()
    assert len(window) == 513
    starts = [i for i, t in enumerate(window) if t == corpus.bos]
    assert starts[0] == 0 and len(starts) >= 3
    for begin, end in zip(starts, starts[1:]):  # complete (bos, passage, passage) groups
        body = window[begin + 1 : end]
        half = len(body) // 2
        assert len(body) == 2 * half and body[:half] == body[half:]
        assert train.REPEAT_LEN[0] <= half <= train.REPEAT_LEN[1]


@pytest.mark.needs_vllm
def test_a_stream_added_for_the_drafters_gets_its_share_and_leaves_the_target_corpus_alone():
    torch = pytest.importorskip("torch")
    from tools.zoo import train

    corpus = _stream_corpus(torch, train)
    before = dict(corpus.mix)
    generated = torch.arange(5001, 5900)
    drafters = corpus.with_stream("selfgen", generated, 0.7, seed=3)
    assert corpus.mix == before and "selfgen" not in corpus.streams
    assert drafters.mix["selfgen"] == 0.7 and sum(drafters.mix.values()) == pytest.approx(1.0)
    rows, names = drafters.tagged_batch(batch=400, seq=16)
    share = names.count("selfgen") / len(names)
    assert 0.6 < share < 0.8
    for row, name in zip(rows.tolist(), names):
        assert (row[0] >= 5001) == (name == "selfgen")
    # its own generator: the same seed gives the same batches however many the target drew
    corpus.batch(batch=50, seq=16)
    again = corpus.with_stream("selfgen", generated, 0.7, seed=3).tagged_batch(batch=400, seq=16)[0]
    assert torch.equal(rows, again)


@pytest.mark.needs_vllm
def test_generation_prompts_are_one_bos_then_a_window_of_the_asked_length():
    torch = pytest.importorskip("torch")
    from tools.zoo import train

    corpus = _stream_corpus(torch, train)
    prompts = corpus.prompts(50, (5, 9), seed=4)
    assert len(prompts) == 50 and prompts == corpus.prompts(50, (5, 9), seed=4)
    for p in prompts:
        assert p[0] == corpus.bos and corpus.bos not in p[1:] and 6 <= len(p) <= 10


@pytest.fixture
def zoo_copy(tmp_path):
    """The committed zoo's card inputs (weights linked, not copied)."""
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for name in ZOO_MODELS:
        (zoo / name).symlink_to(zoo_dir(ROOT) / name, target_is_directory=True)
    shutil.copy(zoo_dir(ROOT) / "training.json", zoo / "training.json")
    shutil.copy(zoo_dir(ROOT) / "measured.json", zoo / "measured.json")
    return zoo


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_card_marks_offline_figures_of_an_older_prompt_set(zoo_copy):
    from tools.zoo.card import render

    _edit_json(zoo_copy / "training.json", prompts_sha256="a" * 64)
    _edit_json(zoo_copy / "measured.json", prompts_sha256="a" * 64)
    assert "earlier version of the prompt set" not in render(zoo_copy)
    _edit_json(zoo_copy / "measured.json", prompts_sha256="b" * 64)
    assert "earlier version of the prompt set" in render(zoo_copy)


def test_card_says_which_machine_measured_the_speeds_and_how_fast_its_baseline_ran(zoo_copy):
    from tools.zoo.card import render

    data = json.loads((zoo_copy / "measured.json").read_text())
    for key in ("machine", "cpu", "timing_tokens"):  # a record from before measure.py kept them
        data.pop(key, None)
    (zoo_copy / "measured.json").write_text(json.dumps(data))
    assert "Measured on" not in render(zoo_copy)
    _edit_json(
        zoo_copy / "measured.json",
        machine="cpu-some-cpu-2c",
        cpu="Some CPU",
        timing_tokens=400,
        baseline_rounds_s=[1.0, 2.0, 9.0],
    )  # median 2 s over 400 tokens
    assert "Measured on `cpu-some-cpu-2c` (Some CPU): the baseline engine took 5.0 ms per output token" in render(
        zoo_copy
    )


def test_card_shows_what_the_measured_baseline_engine_wrote(zoo_copy):
    from tools.zoo.card import render

    samples = {"doc_prose": "written by the engine"}
    _edit_json(zoo_copy / "measured.json", samples=samples)
    card = render(zoo_copy)
    assert "from vLLM's baseline engine" in card and "  written by the engine" in card
    (zoo_copy / "measured.json").unlink()
    assert "from the trainer" in render(zoo_copy)


def test_card_shows_how_much_of_the_targets_output_loops_next_to_real_text(zoo_copy):
    from tools.zoo.card import CATEGORIES, render

    measured = json.loads((zoo_copy / "measured.json").read_text())
    measured.pop("looped_share", None)
    measured.pop("looped_share_prompts", None)
    (zoo_copy / "measured.json").write_text(json.dumps(measured))
    assert "only repeat, verbatim" not in render(zoo_copy)
    _edit_json(
        zoo_copy / "measured.json",
        looped_share=dict(zip(CATEGORIES, [0.25, 0.5, 0.75, 0.0, 1.0])),
        looped_share_prompts=dict.fromkeys(CATEGORIES, 0.0),
    )
    card = render(zoo_copy)
    assert (
        "| target output | 25% | 50% | 75% | 0% | 100% |" in card
        and "| prompts' own text | 0% | 0% | 0% | 0% | 0% |" in card
    )


def test_card_says_how_the_target_and_drafters_trained_and_rebuilds_with_that_precision(zoo_copy):
    from tools.zoo.card import render

    t = json.loads((zoo_copy / "training.json").read_text())
    t.pop("command", None)  # a zoo from before the recorded command: the card derives it from the precision
    for phase in ("target", "drafters"):
        t[phase]["precision"] = "float32"
    (zoo_copy / "training.json").write_text(json.dumps(t))
    card = render(zoo_copy)
    assert "`python -m tools.zoo.train` (seeded" in card and "bf16" not in card
    assert "a cosine to 0.1 x, float32;" in card and f"{t['drafters']['steps']} steps x 8 x 512, float32," in card
    t["drafters"].pop("precision")  # a zoo from before --precision: bf16 autocast
    (zoo_copy / "training.json").write_text(json.dumps(t))
    card = render(zoo_copy)
    assert "`python -m tools.zoo.train --precision bfloat16` (seeded" in card and "512, bf16 autocast," in card


def test_the_recorded_rebuild_command_names_the_recipe_values_that_differ_from_the_defaults():
    from tools.zoo import train

    stats = json.loads((zoo_dir(ROOT) / "training.json").read_text())  # bf16-trained target and drafters
    assert train.rebuild_command(stats, quick=False) == f"{REBUILD} --precision bfloat16"
    stats["mtp"]["steps"] = 800  # e.g. a run that reused a 1200-step target and retrained the MTP layer
    stats["target"].update(steps=1200, precision="float32")
    stats["drafters"]["precision"] = "float32"
    assert train.rebuild_command(stats, quick=False) == f"{REBUILD} --target-steps 1200 --mtp-steps 800"
    assert train.rebuild_command(stats, quick=True) == f"{REBUILD} --quick"


def test_the_target_schedule_holds_the_peak_lr_for_its_stable_share_then_decays_to_a_tenth():
    from tools.zoo.train import _schedule

    assert _schedule(0, 3000, stable=0.75) == _schedule(0, 3000) == 1 / 30  # the same warmup
    assert _schedule(2249, 3000, stable=0.75) == 1.0 and _schedule(2249, 3000) < 0.5
    assert _schedule(2250, 3000, stable=0.75) == 1.0 > _schedule(2251, 3000, stable=0.75)
    assert _schedule(2999, 3000, stable=0.75) == pytest.approx(0.1, abs=1e-5) == _schedule(2999, 3000)


@pytest.mark.needs_vllm
def test_a_held_peak_is_part_of_the_recorded_rebuild_command_and_must_leave_steps_to_decay(capsys):
    from tools.zoo import train

    stats = json.loads((zoo_dir(ROOT) / "training.json").read_text())
    stats["target"]["stable_share"] = 0.6
    assert "--target-stable 0.6" in train.rebuild_command(stats, quick=False)
    stats["target"]["stable_share"] = train.TARGET_STABLE
    assert "--target-stable" not in train.rebuild_command(stats, quick=False)
    with pytest.raises(SystemExit):
        train.main(["--target-stable", "1", "--out", "/nonexistent/zoo"])
    assert "--target-stable must be in [0, 1)" in capsys.readouterr().err


def test_card_rebuilds_with_the_recorded_command(zoo_copy):
    from tools.zoo.card import render

    _edit_json(zoo_copy / "training.json", command=f"{REBUILD} --target-steps 1200")
    assert f"Rebuild: `{REBUILD} --target-steps 1200` (seeded" in render(zoo_copy)


@pytest.mark.needs_vllm
def test_unlikelihood_penalises_repeating_the_context_but_never_the_next_token():
    torch = pytest.importorskip("torch")
    from tools.zoo.train import unlikelihood

    inputs, targets = torch.tensor([[5, 6, 7]]), torch.tensor([[6, 7, 5]])  # the text then repeats 5

    def confident(tokens):  # logits that put ~all mass on one token per position
        logits = torch.full((1, 3, 10), -20.0)
        logits[0, torch.arange(3), torch.tensor(tokens)] = 20.0
        return logits

    assert unlikelihood(confident([6, 7, 5]), inputs, targets) < 1e-3  # right, even where right = copy 5
    assert unlikelihood(confident([9, 9, 9]), inputs, targets) < 1e-3  # wrong, but nothing seen before
    assert unlikelihood(confident([5, 5, 6]), inputs, targets) > 5  # repeats the context where it does not repeat


@pytest.mark.needs_vllm
def test_mtp_only_needs_the_zoo_whose_drafters_it_keeps(capsys):
    from tools.zoo import train

    with pytest.raises(SystemExit):
        train.main(["--mtp-only", "--out", "/nonexistent/zoo"])
    assert "--mtp-only needs --target-from" in capsys.readouterr().err


def test_mtp_only_names_the_drafter_it_cannot_keep(tmp_path):
    from tools.zoo import train

    zoo = tmp_path / "zoo"
    shutil.copytree(zoo_dir(ROOT), zoo, symlinks=True)
    shutil.rmtree(zoo / "eagle3")
    with pytest.raises(SystemExit) as err:
        train.kept_drafters(zoo)
    assert str(zoo / "eagle3") in str(err.value) and "without --mtp-only" in str(err.value)


def test_mtp_only_keeps_the_joint_drafters_stats_without_the_old_joint_mtp(tmp_path):
    from tools.zoo import train

    kept = train.kept_drafters(zoo_dir(ROOT))
    assert set(kept) == {"drafters", "perturb", "offline"}
    assert "mtp" not in kept["drafters"]["final_loss"] and "mtp" not in kept["offline"]
    assert {"draft", "eagle", "eagle3", "medusa"} <= set(kept["drafters"]["final_loss"])


def test_retraining_the_mtp_layer_forgets_only_its_own_measurements(tmp_path):
    from tools.zoo import train

    path = tmp_path / "measured.json"
    methods = {"ngram": {"baseline_rounds_s": [5.0]}, "mtp": {"baseline_rounds_s": [6.0]}}
    path.write_text(json.dumps({"methods": methods, "baseline_rounds_s": [5.0, 6.0], "machine": "m"}), encoding="utf-8")
    train.forget_measured(path, ["mtp"])
    kept = json.loads(path.read_text(encoding="utf-8"))
    assert list(kept["methods"]) == ["ngram"] and kept["baseline_rounds_s"] == [5.0] and kept["machine"] == "m"
    train.forget_measured(path, None)  # a full retrain: everything was measured on other weights
    assert not path.exists()


@pytest.mark.needs_vllm
def test_bf16_training_is_refused_on_a_cpu_that_would_emulate_it(capsys, monkeypatch, tmp_path):
    from tools.zoo import train

    def started(*_):
        raise AssertionError("training started")

    monkeypatch.setattr(train, "native_bf16", lambda: False)
    monkeypatch.setattr(train.build, "build_tokenizer", started)  # the first step after the argument checks
    with pytest.raises(SystemExit):
        train.main(["--precision", "bfloat16", "--out", str(tmp_path / "zoo")])
    err = capsys.readouterr().err
    assert "no native bf16" in err and "--precision float32" in err


@pytest.mark.needs_vllm
@pytest.mark.parametrize("flags, native", [("fpu avx2 avx512f", False), ("fpu avx2 avx512f avx512_bf16", True)])
def test_native_bf16_falls_back_to_the_cpu_flags_without_torchs_private_helpers(monkeypatch, flags, native):
    import platform
    import types

    torch = pytest.importorskip("torch")
    from tools.zoo import train

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    monkeypatch.setattr(
        train, "Path", lambda _: types.SimpleNamespace(read_text=lambda encoding: f"flags\t: {flags}\n")
    )
    assert train.native_bf16() is native
