"""Model references: `zoo:NAME` (an embedded model), a local path, or a hub id `org/name`.

`zoo:NAME` resolves to `fixtures/zoo/NAME/`, checked for integrity (a missing or corrupt file is a
ZooError naming it and the fix). The embedded models are trained from local text by the maintainer
tool `python -m tools.zoo.train` (fixtures/zoo/MODEL_CARD.md); nothing here imports torch.

    python -m specgate.models            check the committed zoo (what ci/setup-cpu.sh runs)
"""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

from specgate.errors import ZooError

# name -> what it is (tools/zoo/train.py and build.py make exactly these directories)
ZOO_MODELS = {
    "target": "tiny Llama target trained on the stdlib's code and docs, with its own BPE tokenizer",
    "draft": "smaller Llama distilled from the target, same tokenizer (method draft_model)",
    "eagle": "EAGLE-1 head trained on the target's hidden states (method eagle)",
    "eagle3": "EAGLE-3 head trained on the target's hidden states (method eagle3)",
    "medusa": "Medusa heads trained on the target's hidden states (method medusa)",
    "mlp_speculator": "MLP speculator for the target, random weights: vLLM 0.32 cannot run it (method mlp_speculator)",
    "mtp_target": "the target's weights verbatim as a MiMo model plus a trained MTP layer (method mtp)",
    "target_perturbed": "the target with relative weight noise, ~80% greedy agreement: a worse drafter (the gate's "
    "canary)",
}
REBUILD = "python -m tools.zoo.train"
# mtp_target/ holds this symlink to ../target/model.safetensors (its main weights, stored once).
TARGET_LINK = "target.safetensors"
# What a hub id looks like (`org/name`); a reference that does not is a local path.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# A hub revision: a commit (40 lowercase hex digits, what a pin is) or a tag or branch name (which can move).
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REF_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


def is_hub(ref: str) -> bool:
    """A hub id `org/name` (a resolved profile turns zoo: and local references into zoo:NAME and absolute paths)."""
    return bool(ref) and not ref.startswith("zoo:") and bool(HUB_ID.match(ref))


def is_commit(revision: str | None) -> bool:
    return bool(revision) and bool(COMMIT.match(revision))


def revision_problem(value) -> str | None:
    """Why `value` is not a hub revision (a bound of the profile's revision keys), or None."""
    if not isinstance(value, str) or not value:
        return f"must be a commit (40 hex digits) or a tag or branch name, got {value!r}."
    if COMMIT.match(value):
        return None
    if re.fullmatch(r"[0-9a-fA-F]{7,64}", value) and not value.isdigit():
        return (
            f"is {value!r}, which looks like a commit but is not one as the hub writes it (40 lowercase hex digits); "
            "give the whole commit (`specgate download --profile NAME --pin` prints it) or a tag or branch name."
        )
    if not _REF_NAME.match(value) or ".." in value or value.endswith(("/", ".", ".lock")):
        return f"must be a commit (40 hex digits) or a tag or branch name, got {value!r}."
    return None


def zoo_dir(root: Path | str) -> Path:
    return Path(root) / "fixtures" / "zoo"


def resolve(ref: str, root: Path | str) -> str:
    """`zoo:NAME` -> the checked local directory; anything else is returned unchanged."""
    if not ref.startswith("zoo:"):
        return ref
    name = ref[4:]
    path = zoo_dir(root) / name
    check_model_dir(path)
    return str(path)


def check_model_dir(path: Path) -> None:
    """Raise ZooError naming the file and the rebuild command if a zoo model is missing or corrupt."""
    fix = (
        f"restore the committed zoo with `git checkout -- {zoo_dir('')}`, or rebuild it with `{REBUILD}` (seeded, local"
        " data only; about 2.5 h on 2 cores)"
    )
    config = path / "config.json"
    weights = path / "model.safetensors"
    for f in (config, weights):
        if not f.is_file():
            raise ZooError(f"embedded model file {f} is missing; {fix}.")
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures", [])
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise ZooError(f"embedded model file {config} is not valid JSON ({exc}); {fix}.") from None
    if "MiMoForCausalLM" in architectures and not (path / TARGET_LINK).is_file():
        raise ZooError(f"embedded model file {path / TARGET_LINK} (the target's weights) is missing; {fix}.")
    for f in sorted(path.glob("*.safetensors")):  # also shards and links (mtp_target/target.safetensors)
        if not f.is_file():
            raise ZooError(f"embedded model file {f} is missing (a link to a missing file); {fix}.")
        _check_safetensors(f, fix)


def _check_safetensors(path: Path, fix: str) -> None:
    """Validate the safetensors header and that the file holds every byte it declares."""
    size = path.stat().st_size
    try:
        with path.open("rb") as fh:
            (header_len,) = struct.unpack("<Q", fh.read(8))
            if header_len > size - 8:
                raise ValueError("header length exceeds file size")
            header = json.loads(fh.read(header_len))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + header_len + end != size:
            raise ValueError(f"file has {size} bytes, header declares {8 + header_len + end}")
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise ZooError(f"embedded model file {path} is corrupt ({exc}); {fix}.") from None


def check_zoo(root: Path | str) -> Path:
    """Every embedded model present and intact (ZooError naming the first that is not)."""
    for name in ZOO_MODELS:
        check_model_dir(zoo_dir(root) / name)
    return zoo_dir(root)


if __name__ == "__main__":
    try:
        print(f"zoo: {check_zoo(Path.cwd())} is complete")
    except ZooError as exc:
        sys.exit(f"zoo: {exc}")
