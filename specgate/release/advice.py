"""What a runner's owner must do before moving to a new vLLM release: the changes between two releases'
Facts held against what this project uses — each GPU profile's speculative_config and engine
arguments, the environment variables its files advise, the vLLM internals the suite reaches
(vllm_compat.INTERNALS) and the constants it assumes (a KV block size, counter names, a method's extra
package) — as concrete lines naming the file, the key and the release.

Neighbours: vllm_facts and changes below; release_day gathers the project's side (profiles, mentions,
the suite's constants) and prints these lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from specgate import vllm_compat
from specgate.plugin.options import SPELLING
from specgate.release.vllm_facts import Facts


@dataclass(frozen=True)
class ProfileUse:
    """What one profile asks of vLLM: its file, each method's speculative_config, engine kwargs and env."""

    path: str
    methods: dict[str, dict]
    engine_kwargs: dict = field(default_factory=dict)
    engine_env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Mention:
    """An environment variable a project file sets or advises (README, docs, ci, profiles, the package's
    code), with the value it gives ('' when it gives none)."""

    where: str  # file:line
    var: str
    value: str = ""
    qualified: bool = False  # the text around it says it raises or was removed: it already says where it holds


@dataclass(frozen=True)
class SuiteUse:
    """What the suite itself assumes of vLLM, with where (file) it assumes it."""

    block_size: tuple[int, str] | None = None  # the CUDA KV block size it sizes caches by, where
    counters: tuple[tuple[str, ...], str] = ((), "")  # the metric names it reads, where
    package_mentions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # package -> files naming it


MENTION = re.compile(r"\b(VLLM_[A-Z0-9_]+)\b(?:\s*=\s*\"?([\w.-]+)\"?)?")
# the text around a mention (a line before, two after) already says the advice does not hold everywhere
# ("... On 0.34.0 that setting raises")
QUALIFIED = re.compile(r"\b(raises?|no longer|removed|deleted|gone)\b", re.I)


def mentions(root: Path, files: list[Path]) -> list[Mention]:
    """Every VLLM_* variable `files` set or advise: in text, `VAR=0` / `VAR = "0"` (or the name alone); in
    Python, only what the code sets (`{"VAR": "0"}`, `env["VAR"] = "0"`, `setenv("VAR", "0")`), not what
    its strings say about it."""
    out = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        where = str(path.relative_to(root))
        if path.suffix == ".py":
            out += [Mention(f"{where}:{line}", var, value) for var, value, line in _set_in_code(text)]
            continue
        lines = text.splitlines()
        for m in MENTION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            around = " ".join(lines[max(line - 2, 0) : line + 2])  # the line before it and the two after
            out.append(Mention(f"{where}:{line}", m.group(1), m.group(2) or "", bool(QUALIFIED.search(around))))
    return out


def _set_in_code(text: str) -> list[tuple[str, str, int]]:
    import ast

    def var(node) -> str:
        ok = isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("VLLM_")
        return node.value if ok else ""

    def value(node) -> str:
        return str(node.value) if isinstance(node, ast.Constant) else ""

    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Dict):
            out += [(var(k), value(v), k.lineno) for k, v in zip(node.keys, node.values) if k is not None and var(k)]
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            if name := var(node.targets[0].slice):
                out.append((name, value(node.value), node.lineno))
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and (name := var(node.args[0])):
            out.append((name, value(node.args[1]), node.lineno))
    return sorted(out, key=lambda found: found[2])


def broken_internals(old: Path, new: Path) -> list[str]:
    """The INTERNALS entries found in the old tree and missing (or changed) in the new one, judged as the
    contract suite judges them: an entry of Model Runner V1 where the new release has none, or an optional
    one not checked on it, or one whose replacement is there, skips there (one line names what they lost);
    every other is a to-do, the entries of a module the new tree does not have on one line."""
    from specgate.vllm_compat.releases import CUDA, Release

    label = Release(vllm_compat.identify(new)[0] or "0.0.0", CUDA).label
    v1_gone = vllm_compat.v1_gone(new)
    out, gone = [], {}
    foreseen: dict[str, dict[str, int | str]] = {"Model Runner V1's": {}, "optional": {}}
    for internal in vllm_compat.INTERNALS:
        before, after = vllm_compat.problems(internal, old), vllm_compat.problems(internal, new)
        if not after or before:
            continue
        replaced = internal.instead and not any(
            vllm_compat.problems(vllm_compat.Internal(name, ""), new) for name in internal.instead
        )
        module, _, attr = internal.name.partition(":")
        lost = module if "no module file" in after[0] else internal.name
        if internal.model_runner == "v1" and v1_gone:
            _count(foreseen["Model Runner V1's"], lost, after[0])
        elif internal.optional and label not in internal.checked:
            _count(foreseen["optional"], lost, after[0])
        elif not replaced and lost == module:
            gone.setdefault(module, []).append(f"{attr} ({internal.need})")
        elif not replaced:
            out.append(f"{internal.name} ({internal.need}): {after[0]}")
    lines = [f"{module} is gone, which {len(uses)} entries reach: {'; '.join(uses)}" for module, uses in gone.items()]
    said = [
        f"{sum(1 if isinstance(v, str) else v for v in lost.values())} {kind} entries ({_lost(lost)})"
        for kind, lost in foreseen.items()
        if lost
    ]
    if said:
        lines.append(f"{' and '.join(said)} skip on {label}, as the entries foresee: nothing to do")
    return lines + out


def _count(lost: dict, what: str, problem: str) -> None:
    if what.partition(":")[2]:  # an attribute that changed: what vLLM lacks of it, in lookup's words
        lost[what] = problem.split(f"{what} ", 1)[-1].split(" (it has ")[0]
    else:  # a module that is gone: how many entries reach it
        lost[what] = int(lost.get(what, 0)) + 1


def _lost(lost: dict) -> str:
    return "; ".join(f"{what}: {n}" if isinstance(n, str) else f"{what} gone: {n}" for what, n in lost.items())


def todo(
    old: Facts, new: Facts, profiles: list[ProfileUse], found: list[Mention], suite: SuiteUse, internals: list[str]
) -> list[str]:
    """The to-do lines, profiles first, then the project's advice, then the suite's own code."""
    out = []
    for profile in profiles:
        out += _profile(old, new, profile)
    out += _environment(old, new, found)
    out += [f"specgate/vllm_compat/internals: {line}" for line in internals]
    out += _suite(old, new, suite)
    return out


def _profile(old: Facts, new: Facts, profile: ProfileUse) -> list[str]:
    out = []
    for name, config in profile.methods.items():
        where = f"{profile.path} [methods.{name}]"
        method = str(config.get("method", ""))
        if method in old.methods and new.methods and method not in new.methods:
            out.append(f"{where}: method '{method}' is no SpeculativeMethod of {new.release}: drop or replace it")
        for key in config:
            if key in old.spec_keys and key not in new.spec_keys:
                out.append(
                    f"{where}: remove speculative_config.{key}: {new.release}'s SpeculativeConfig has no such key"
                )
            elif key in new.deprecated and key not in old.deprecated:
                out.append(f'{where}: speculative_config.{key} is deprecated in {new.release}: "{new.deprecated[key]}"')
        a, b = old.speculators.get(method, ()), new.speculators.get(method, ())
        if method and a[:1] != b[:1]:
            was = a[0] if a else "no V2 speculator (the engine fell back to Model Runner V1)"
            out.append(
                f"{where}: Model Runner V2 builds {b[0] if b else 'no speculator'} for '{method}' in {new.release} "
                f"({old.release}: {was}): its baselines measure another drafter; store them anew "
                f"({SPELLING.command(profile=Path(profile.path).stem, methods=name, update_baselines=True)}) "
                "and correct what the profile's comments say about its runner"
            )
    for key in profile.engine_kwargs:
        if key in old.engine_args and key not in new.engine_args:
            out.append(f"{profile.path} [engine] kwargs: remove {key}: {new.release}'s EngineArgs has no such field")
        elif key in new.engine_deprecated and key not in old.engine_deprecated:
            out.append(f'{profile.path} [engine] kwargs: {key} is deprecated: "{new.engine_deprecated[key]}"')
    return out


def _environment(old: Facts, new: Facts, found: list[Mention]) -> list[str]:
    out = []
    by_var: dict[tuple[str, str], list[str]] = {}
    for m in found:
        if not m.qualified:
            by_var.setdefault((m.var, m.value), []).append(m.where)
    for (var, value), places in sorted(by_var.items()):
        refusals = [r for r in new.refusals if r.var == var]
        hits = [r for r in refusals if value and r.refuses(value)]
        where = ", ".join(places)
        if hits:
            out.append(f'{where}: {var}={value} raises in {new.release}: "{hits[0].message}" ({hits[0].where})')
        elif var in new.env_removed:
            out.append(f'{where}: {var} was removed in {new.release}: "{new.env_removed[var]}"')
        elif var in old.env_vars and new.env_vars and var not in new.env_vars and not refusals:
            out.append(f"{where}: {var} is not a vLLM {new.release} environment variable (vllm/envs.py)")
    return out


def _suite(old: Facts, new: Facts, suite: SuiteUse) -> list[str]:
    out = []
    default = new.constants.get("CacheConfig.DEFAULT_BLOCK_SIZE", "")
    if suite.block_size and default.isdigit() and int(default) != suite.block_size[0]:
        out.append(
            f"{suite.block_size[1]}: sizes KV caches by blocks of {suite.block_size[0]} tokens; {new.release}'s "
            f"CacheConfig.DEFAULT_BLOCK_SIZE is {default} ({old.release}: "
            f"{old.constants.get('CacheConfig.DEFAULT_BLOCK_SIZE', '?')}): read the engine's own block size"
        )
    names, where = suite.counters
    if missing := [n for n in names if new.metrics and n not in new.metrics]:
        out.append(f"{where}: reads {', '.join(missing)}, which {new.release} no longer names")
    for package in sorted(set(old.requirements) - set(new.requirements)):
        for place in suite.package_mentions.get(package, ()):
            out.append(
                f"{place}: names {package}, which {new.release} no longer needs ({old.release}: "
                f"{old.requirements[package].split(': ', 1)[-1]}): install or check it only for the releases that do"
            )
    return out
