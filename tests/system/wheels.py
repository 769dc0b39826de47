"""A vLLM wheel with a bug planted in it, as a nightly wheel would carry one: for `specgate bisect`
over local wheels. The copy gets a local version label (0.32.0 -> 0.32.0+c1), so pip and the bisection
tell it apart from the release.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path


def release_wheel(package: str, version: str, into: Path) -> Path:
    """The release's wheel from the package index (pip's cache when it has it)."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{package}=={version}", "-d", str(into)],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return next(into.glob(f"{package.replace('-', '_')}-{version}-*.whl"))


def planted(source: Path, into: Path, label: str, path: str, old: str, new: str) -> Path:
    """A copy of wheel `source` as version <version>+<label> whose file `path` has `old` replaced by
    `new` (exactly once: a plant that misses its line fails here, not as a bisection that finds nothing)."""
    name, version, rest = source.name.split("-", 2)
    local = f"{version}+{label}"
    target = into / f"{name}-{local}-{rest}"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{local}.dist-info/"
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for info in src.infolist():
            data = src.read(info)
            filename = info.filename.replace(old_info, new_info, 1)
            if info.filename == path:
                text = data.decode()
                if text.count(old) != 1:
                    raise ValueError(f"{path} in {source.name} holds {old!r} {text.count(old)} times, not once")
                data = text.replace(old, new).encode()
            elif filename == new_info + "METADATA":
                data = data.decode().replace(f"\nVersion: {version}\n", f"\nVersion: {local}\n", 1).encode()
            elif filename == new_info + "RECORD":  # pip rewrites it at install; keep its paths right
                rows = [r.replace(old_info, new_info, 1) for r in data.decode().splitlines()]
                data = "\n".join(f"{path},," if r.startswith(path + ",") else r for r in rows).encode() + b"\n"
            entry = zipfile.ZipInfo(filename, info.date_time)
            entry.external_attr = info.external_attr  # file modes
            out.writestr(entry, data, compress_type=zipfile.ZIP_DEFLATED)
    return target
