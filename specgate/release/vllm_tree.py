"""An unpacked vLLM tree read with `ast`, never imported (a CUDA wheel's Python files cannot be imported
on a machine without CUDA): modules parsed once, classes and their fields with defaults and docstrings,
function signatures, string constants, and the messages of `raise` statements, as text.

`Tree(root)` checks that `root` is a vLLM tree (`vllm/__init__.py` and a `vllm-R.dist-info`) and raises
TreeError otherwise, or when a module it is asked for does not parse. A module or class that is not
there is None / empty: what a release does not have is a fact about it, not an error.

Neighbours: specgate.release.vllm_facts reads the facts a release day compares from a Tree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.sampler.cuda_sources import release_of


class TreeError(SpecgateError):
    """An unpacked vLLM tree is not one: no vllm/ package, no dist-info, or a module that does not parse."""


@dataclass(frozen=True)
class Field:
    """One field of a config class: `name: annotation = default`, with its attribute docstring."""

    name: str
    annotation: str
    default: str  # as written ('' when the field has none); Field(default=X) / field(default=X) give X
    doc: str = ""
    line: int = 0


@dataclass(frozen=True)
class Param:
    """One parameter of a function: its name, annotation and default as written ('' when none)."""

    name: str
    annotation: str = ""
    default: str = ""
    keyword_only: bool = False

    def __str__(self) -> str:
        text = self.name + (f": {self.annotation}" if self.annotation else "")
        return text + (f" = {self.default}" if self.default else "")


class Tree:
    """The Python files of one vLLM release, `root/vllm/...`, read as text and syntax trees."""

    def __init__(self, root: Path):
        self.root = Path(root)
        if not (self.root / "vllm" / "__init__.py").is_file():
            raise TreeError(
                f"{self.root} is not an unpacked vLLM tree: it has no vllm/__init__.py. A release's sources "
                "are unpacked by `python -m specgate.sampler.cuda_sources RELEASE` (the .py files and the "
                "dist-info of its wheel); delete the directory and fetch it again."
            )
        self.release = release_of(self.root)
        if not self.release:
            raise TreeError(
                f"{self.root} has vllm/ but no vllm-<release>.dist-info, so which release it is cannot be "
                "told; delete the directory and fetch it again (python -m specgate.sampler.cuda_sources RELEASE)."
            )
        self._parsed: dict[str, ast.Module | None] = {}

    def has(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def text(self, rel: str) -> str | None:
        path = self.root / rel
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def module(self, rel: str) -> ast.Module | None:
        """The syntax tree of `rel` (a path under root, e.g. vllm/config/speculative.py), None when absent."""
        if rel not in self._parsed:
            text = self.text(rel)
            try:
                self._parsed[rel] = ast.parse(text) if text is not None else None
            except SyntaxError as exc:
                raise TreeError(
                    f"vLLM {self.release}'s {rel} (in {self.root}) does not parse: {exc.msg} at line "
                    f"{exc.lineno}. The file is damaged (an interrupted fetch?); delete {self.root} and fetch "
                    "the release again."
                ) from exc
        return self._parsed[rel]

    def files(self, under: str = "vllm", pattern: str = "*.py") -> list[str]:
        base = self.root / under
        return sorted(str(p.relative_to(self.root)) for p in base.rglob(pattern)) if base.is_dir() else []

    @cached_property
    def _all_bytes(self) -> dict[str, bytes]:
        return {rel: (self.root / rel).read_bytes() for rel in self.files()}

    def grep(self, needle: str, under: str = "vllm") -> list[str]:
        """The files under `under` whose text contains `needle` (a cheap filter before parsing)."""
        data = needle.encode()
        return [rel for rel, text in self._all_bytes.items() if rel.startswith(under) and data in text]

    def classes(self, rel: str) -> dict[str, ast.ClassDef]:
        tree = self.module(rel)
        return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)} if tree else {}

    def functions(self, rel: str) -> dict[str, ast.FunctionDef]:
        """Module-level functions and class methods (as Class.method) of `rel`."""
        tree = self.module(rel)
        out: dict[str, ast.FunctionDef] = {}
        for node in tree.body if tree else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        out[f"{node.name}.{item.name}"] = item
        return out

    def assigned(self, rel: str, name: str) -> ast.expr | None:
        """The value of a module-level `name = ...` / `name: T = ...` in `rel`."""
        tree = self.module(rel)
        for node in tree.body if tree else ():
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node.value
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return node.value
        return None


def fields(cls: ast.ClassDef) -> dict[str, Field]:
    """The annotated fields of a (data)class body, ClassVars and init=False fields left out."""
    out: dict[str, Field] = {}
    body = cls.body
    for i, item in enumerate(body):
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        annotation = ast.unparse(item.annotation)
        if annotation.startswith(("ClassVar", "typing.ClassVar")) or _init_false(item.value):
            continue
        following = body[i + 1] if i + 1 < len(body) else None
        doc = (
            following.value.value
            if isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
            else ""
        )
        out[item.target.id] = Field(
            item.target.id, annotation, default_of(item.value), " ".join(doc.split()), item.lineno
        )
    return out


def class_constants(cls: ast.ClassDef) -> dict[str, str]:
    """`NAME: ClassVar[...] = value` and upper-case `NAME = value` of a class body, values as written."""
    out = {}
    for item in cls.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
            if ast.unparse(item.annotation).startswith(("ClassVar", "typing.ClassVar")):
                out[item.target.id] = ast.unparse(item.value)
        elif (
            isinstance(item, ast.Assign)
            and len(item.targets) == 1
            and isinstance(item.targets[0], ast.Name)
            and item.targets[0].id.isupper()
        ):
            out[item.targets[0].id] = ast.unparse(item.value)
    return out


def default_of(value: ast.expr | None) -> str:
    """A field's default as written: `x = 3` -> '3', `Field(default=3, ge=1)` -> '3', a factory -> 'factory()'."""
    if value is None:
        return ""
    if isinstance(value, ast.Call) and _callee(value) in ("Field", "field"):
        for kw in value.keywords:
            if kw.arg == "default":
                return ast.unparse(kw.value)
            if kw.arg == "default_factory":
                return f"{ast.unparse(kw.value)}()"
        return ast.unparse(value.args[0]) if value.args else ""
    return ast.unparse(value)


def _init_false(value: ast.expr | None) -> bool:
    return (
        isinstance(value, ast.Call)
        and _callee(value) in ("Field", "field")
        and any(
            kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False for kw in value.keywords
        )
    )


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[Param, ...]:
    """A function's parameters (self / cls left out), annotations and defaults as written."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [
        Param(p.arg, ast.unparse(p.annotation) if p.annotation else "", ast.unparse(d) if d is not None else "")
        for p, d in zip(positional, defaults)
        if p.arg not in ("self", "cls")
    ]
    out += [
        Param(p.arg, ast.unparse(p.annotation) if p.annotation else "", ast.unparse(d) if d is not None else "", True)
        for p, d in zip(a.kwonlyargs, a.kw_defaults)
    ]
    return tuple(out)


def text_of(node: ast.expr | None) -> str:
    """A string expression as a reader sees it: constants joined, f-string fields as {expr}, '%s' kept."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}" for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return text_of(node.left) + text_of(node.right)
    return ""


def raised_message(node: ast.Raise) -> str:
    """The message of `raise SomeError("...")`, as text ('' when it is not written as a string)."""
    exc = node.exc
    if isinstance(exc, ast.Call) and exc.args:
        return " ".join(text_of(exc.args[0]).split())
    return ""


def strings(tree: ast.AST) -> list[tuple[str, int]]:
    """Every string in `tree` as text (f-strings rendered by text_of), with its line."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.append((text_of(node), node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.value, node.lineno))
    return out
