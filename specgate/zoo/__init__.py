"""The embedded model zoo: tiny local models for the `cpu-tiny` profile (no model hub).

`zoo:NAME` in a profile resolves to `fixtures/zoo/NAME/`. Listing and checking the zoo imports no
torch; building it (`python -m specgate.zoo.build`) does.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from specgate.errors import ZooError

# name -> what it is (the builder in build.py makes exactly these directories)
ZOO_MODELS = {
    "target": "tiny Llama target model with its own BPE tokenizer",
    "draft": "smaller Llama with the target's tokenizer (method draft_model)",
    "eagle": "EAGLE-1 head for the target (method eagle)",
    "eagle3": "EAGLE-3 head for the target (method eagle3)",
}
REBUILD = "python -m specgate.zoo.build"


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
    fix = f"rebuild the zoo with `{REBUILD}` (deterministic, no download)"
    config = path / "config.json"
    weights = path / "model.safetensors"
    for f in (config, weights):
        if not f.is_file():
            raise ZooError(f"embedded model file {f} is missing; {fix}.")
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZooError(f"embedded model file {config} is not valid JSON ({exc}); {fix}.") from None
    _check_safetensors(weights, fix)


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
