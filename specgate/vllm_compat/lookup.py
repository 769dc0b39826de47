"""An internal looked up: `load` imports what an INTERNALS name points at, `problems` says what vLLM
lacks of an entry, in the installed vLLM (imported) or in an unpacked vLLM tree read without importing
it (a CUDA wheel's Python files)."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from specgate.vllm_compat.internals.base import Internal


def load(name: str) -> Any:
    """The object an INTERNALS name points at (ImportError / AttributeError when it is gone)."""
    module, _, attrs = name.partition(":")
    obj = importlib.import_module(module)
    for attr in filter(None, attrs.split(".")):
        obj = getattr(obj, attr)
    return obj


def problems(internal: Internal, source: Path | None = None) -> list[str]:
    """What vLLM lacks of `internal` (empty: it is there as specgate needs it): the installed vLLM,
    imported, or with `source` the root of an unpacked vLLM tree (e.g. a CUDA wheel's Python files),
    read without importing it."""
    if source is not None:
        found = _from_source(Path(source), internal.name)
        if isinstance(found, str):
            return [f"{internal.name} is missing ({found})"]
        params, names = found
    else:
        try:
            obj = load(internal.name)
        except (ImportError, AttributeError) as exc:
            return [f"{internal.name} is missing ({type(exc).__name__}: {exc})"]
        try:
            params = set(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            params = set()
        names = (
            {f.name for f in fields(obj)} | set(dir(obj))
            if is_dataclass(obj)
            else set(getattr(obj, "model_fields", {})) or set(dir(obj))
        )
        if inspect.isclass(obj) and [f for f in internal.fields if f not in names]:
            names |= _instance_attributes(obj)
    out = []
    if missing := [p for p in internal.params if p not in params]:
        out.append(f"{internal.name} takes no parameter(s) {missing} (it has {sorted(params)})")
    if missing := [f for f in internal.fields if f not in names]:
        out.append(f"{internal.name} has no field(s) {missing}")
    return out


def _from_source(root: Path, name: str):
    """(parameter names, field / member names) of `name` in a vLLM source tree, or why not found."""
    module, _, attrs = name.partition(":")
    base = root.joinpath(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if not path.is_file():
        return f"no module file {path}"
    tree = _parsed(path, path.stat().st_mtime_ns)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def members(node) -> dict:
        out = {}
        for b in getattr(node, "bases", []):  # bases defined in the same module
            if isinstance(b, ast.Name) and b.id in classes:
                out.update(members(classes[b.id]))
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[item.name] = item
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                out[item.target.id] = item
            elif isinstance(item, ast.Assign):
                out.update({t.id: item for t in item.targets if isinstance(t, ast.Name)})
        return out

    chain = [a for a in attrs.split(".") if a]
    node = tree
    for i, attr in enumerate(chain):
        scope = members(node)
        if attr not in scope and node is tree:  # re-exported: `from .data import TokensPrompt`
            for item in tree.body:
                if isinstance(item, ast.ImportFrom) and any((a.asname or a.name) == attr for a in item.names):
                    original = next(a.name for a in item.names if (a.asname or a.name) == attr)
                    target = item.module or ""
                    if item.level:  # relative to this module's package
                        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                        target = ".".join(
                            package[: len(package) - item.level + 1] + ([item.module] if item.module else [])
                        )
                    return _from_source(root, f"{target}:{'.'.join([original, *chain[i + 1 :]])}")
        if attr not in scope:
            return f"{path} defines no {attr}"
        node = scope[attr]
    params: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    elif isinstance(node, ast.ClassDef):
        scope = members(node)
        params = {k for k, v in scope.items() if isinstance(v, ast.AnnAssign)}
        if isinstance(scope.get("__init__"), ast.FunctionDef):
            a = scope["__init__"].args
            params |= {x.arg for x in a.args + a.kwonlyargs}
        return params, set(scope) | self_attributes(node)
    return params, params


def self_attributes(node) -> set[str]:
    """The attributes a class's methods assign to `self` (`self.x = ...`, `self.a, self.b = ...`): an instance's
    members that neither dataclass fields nor dir() of the class show."""
    out = set()
    for item in ast.walk(node):
        targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.add(t.attr)
    return out


def _instance_attributes(cls) -> set[str]:
    """self_attributes of an imported class and its bases (read from their source; none where it is not there)."""
    import textwrap

    out = set()
    for klass in cls.__mro__[:-1]:
        try:
            out |= self_attributes(ast.parse(textwrap.dedent(inspect.getsource(klass))))
        except (OSError, TypeError, SyntaxError):
            continue
    return out


@functools.lru_cache(maxsize=64)
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    """A module's syntax tree, parsed once per file version (the contract suite reads a few modules hundreds
    of times)."""
    return ast.parse(path.read_text(encoding="utf-8"))
