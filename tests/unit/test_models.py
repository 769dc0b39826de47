"""Model references and the embedded zoo's files: a missing or corrupt file is named, with the command
that rebuilds it."""

import json
import shutil
from pathlib import Path

import pytest

from specgate.errors import ZooError
from specgate.models import REBUILD, TARGET_LINK, ZOO_MODELS, check_model_dir, resolve, zoo_dir

ROOT = Path(__file__).resolve().parents[2]


def test_every_zoo_model_is_present_and_intact():
    for name in ZOO_MODELS:
        check_model_dir(zoo_dir(ROOT) / name)
        assert resolve(f"zoo:{name}", ROOT) == str(zoo_dir(ROOT) / name)


@pytest.fixture
def eagle_copy(tmp_path):
    dst = tmp_path / "eagle"
    shutil.copytree(zoo_dir(ROOT) / "eagle", dst)
    return dst


def test_missing_weights_name_the_file_and_the_rebuild_command(eagle_copy):
    (eagle_copy / "model.safetensors").unlink()
    with pytest.raises(ZooError) as err:
        check_model_dir(eagle_copy)
    assert str(eagle_copy / "model.safetensors") in str(err.value) and REBUILD in str(err.value)


def test_truncated_weights_are_reported_as_corrupt(eagle_copy):
    weights = eagle_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(ZooError, match="corrupt.*declares"):
        check_model_dir(eagle_copy)


def test_garbage_header_is_reported_as_corrupt(eagle_copy):
    (eagle_copy / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ZooError, match="corrupt"):
        check_model_dir(eagle_copy)


def test_broken_config_is_reported(eagle_copy):
    (eagle_copy / "config.json").write_text("{")
    with pytest.raises(ZooError, match="config.json is not valid JSON"):
        check_model_dir(eagle_copy)


def test_eagle3_head_names_its_aux_layers_for_the_shallow_target():
    config = json.loads((zoo_dir(ROOT) / "eagle3" / "config.json").read_text())
    target = json.loads((zoo_dir(ROOT) / "target" / "config.json").read_text())
    layers = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert all(0 <= i < target["num_hidden_layers"] for i in layers)


def test_mtp_target_without_the_link_to_the_target_weights_names_it(tmp_path):
    dst = tmp_path / "mtp_target"
    shutil.copytree(zoo_dir(ROOT) / "mtp_target", dst, symlinks=True)
    (dst / TARGET_LINK).unlink()
    with pytest.raises(ZooError) as err:
        check_model_dir(dst)
    assert str(dst / TARGET_LINK) in str(err.value) and REBUILD in str(err.value)


def test_a_dangling_link_is_reported_as_missing(tmp_path):
    dst = tmp_path / "mtp_target"
    shutil.copytree(zoo_dir(ROOT) / "mtp_target", dst, symlinks=True)  # ../target is not copied
    with pytest.raises(ZooError, match="missing"):
        check_model_dir(dst)


def test_mtp_target_stores_the_target_weights_verbatim():
    link = zoo_dir(ROOT) / "mtp_target" / TARGET_LINK
    assert link.resolve() == (zoo_dir(ROOT) / "target" / "model.safetensors").resolve()
