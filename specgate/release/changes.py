"""What changed for speculative decoding between two vLLM releases: two Facts compared, section by
section (methods and verification rules, SpeculativeConfig keys, the engine arguments a profile or the
suite sets, model runners, metric names, the rejection sampler's signatures, V2's speculators, the
packages a method needs, environment variables). Each section is lines of text; an empty one says
"unchanged", and what could not be read from either tree is said, never filled in.

Neighbours: vllm_facts reads the Facts; advice turns the changes into a runner's owner's to-do list;
release_day prints both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specgate.release.vllm_facts import KERNELS, Facts
from specgate.release.vllm_tree import Param


@dataclass(frozen=True)
class Section:
    title: str
    lines: tuple[str, ...]  # empty: nothing changed


def compare(old: Facts, new: Facts, engine_args: tuple[str, ...] = ()) -> list[Section]:
    """Every section, old -> new; `engine_args`: the engine arguments whose change matters here."""
    return [
        Section("methods", tuple(_methods(old, new))),
        Section("SpeculativeConfig keys", tuple(_keys(old, new))),
        Section("engine arguments the profiles and the suite set", tuple(_engine_args(old, new, engine_args))),
        Section("model runners", tuple(_runners(old, new))),
        Section("metric names", tuple(_metrics(old, new))),
        Section("rejection sampler signatures", tuple(_kernels(old, new))),
        Section("speculators Model Runner V2 builds", tuple(_speculators(old, new))),
        Section("packages a method needs", tuple(_requirements(old, new))),
        Section("environment variables", tuple(_environment(old, new))),
    ]


def _names(items) -> str:
    return ", ".join(sorted(items)) or "none"


def _methods(old: Facts, new: Facts) -> list[str]:
    out = []
    if added := set(new.methods) - set(old.methods):
        out.append(f"added: {_names(added)}")
    if removed := set(old.methods) - set(new.methods):
        out.append(f"removed: {_names(removed)}")
    if set(old.rules) != set(new.rules):
        out.append(f"verification rules (RejectionSampleMethod): {_names(old.rules)} -> {_names(new.rules)}")
    if out:
        out.append(f"({len(new.methods)} methods in {new.release}, {len(old.methods)} in {old.release})")
    return out


def _keys(old: Facts, new: Facts) -> list[str]:
    out = []
    for name in sorted(set(new.spec_keys) - set(old.spec_keys)):
        f = new.spec_keys[name]
        out.append(f"added: {name}: {f.annotation} = {f.default or '(required)'}")
    for name in sorted(set(old.spec_keys) - set(new.spec_keys)):
        f = old.spec_keys[name]
        out.append(f"removed: {name} (was {f.annotation} = {f.default or '(required)'})")
    for name in sorted(set(new.deprecated) - set(old.deprecated)):
        was, now = old.spec_keys.get(name), new.spec_keys.get(name)
        default = f"default {was.default} -> {now.default}" if was and now and was.default != now.default else ""
        default = default or (f"default {now.default}" if now else "")
        out.append(f'deprecated: {name} ({default}): "{new.deprecated[name]}"')
    for name in sorted(set(old.spec_keys) & set(new.spec_keys) - set(new.deprecated)):
        a, b = old.spec_keys[name], new.spec_keys[name]
        if a.default != b.default:
            out.append(f"default changed: {name}: {a.default} -> {b.default}{_note(b.doc)}")
        if a.annotation != b.annotation:
            out.append(f"type changed: {name}: {a.annotation} -> {b.annotation}")
    return out


def _note(doc: str) -> str:
    """The sentence of a field's docstring that says what an unset value means, as ' ("...")'."""
    for sentence in re.split(r"(?<=\.)\s+", doc):
        if re.search(r"\b(if (unset|unspecified|not set)|defaults? to|by default)\b", sentence, re.I):
            return f' ("{sentence}")'
    return ""


def _engine_args(old: Facts, new: Facts, names: tuple[str, ...]) -> list[str]:
    out = []
    for name in sorted(set(names)):
        a, b = old.engine_args.get(name), new.engine_args.get(name)
        if a and not b:
            out.append(f"removed: {name} (was default {a.default})")
        elif b and not a:
            out.append(f"added: {name} = {b.default}")
        elif a and b and a.default != b.default:
            out.append(f"default changed: {name}: {a.default} -> {b.default}{_note(b.doc)}")
        if name in new.engine_deprecated and name not in old.engine_deprecated:
            out.append(f'deprecated: {name}: "{new.engine_deprecated[name]}"')
    owners = {o for n in names for o in (old.owners.get(n), new.owners.get(n)) if o}
    for const in sorted(set(old.constants) & set(new.constants)):
        if const.partition(".")[0] in owners and old.constants[const] != new.constants[const]:
            out.append(f"constant changed: {const}: {old.constants[const]} -> {new.constants[const]}")
    return out


UNSUPPORTED_METHOD = "VllmConfig._get_{}model_runner_unsupported_features"


def _runners(old: Facts, new: Facts) -> list[str]:
    a, b = old.runners, new.runners
    if a is None or b is None:
        return []
    out = []
    for label, x, y, where in (
        ("Model Runner V1", a.v1, b.v1, "vllm/v1/worker/gpu_model_runner.py"),
        ("Model Runner V2", a.v2, b.v2, "vllm/v1/worker/gpu/model_runner.py"),
    ):
        if x != y:
            out.append(f"{label}: {'present' if x else 'absent'} -> {'present' if y else 'removed'} ({where})")
    if a.default != b.default:
        out.append(f"the GPU worker's runner: {a.default} -> {b.default}")
    out += _v2_unsupported(old, new)
    for key in sorted(set(b.unsupported) - set(a.unsupported) - {"", "v2"}):
        entries = b.unsupported[key]
        spec = [what for what, when in entries if "specul" in (what + when).lower()]
        out.append(
            f"new list {UNSUPPORTED_METHOD.format(key + '_')}: {len(entries)} entries"
            + (f", for speculative decoding: {'; '.join(spec)}" if spec else "")
        )
    if a.cpu_runners != b.cpu_runners:
        out.append(f"the CPU worker builds its runner from: {_names(a.cpu_runners)} -> {_names(b.cpu_runners)}")
    for message in sorted(set(b.cpu_refusals) - set(a.cpu_refusals)):
        out.append(f'the CPU platform now raises: "{message}" (vllm/platforms/cpu.py)')
    return out


def _v2_unsupported(old: Facts, new: Facts) -> list[str]:
    a, b = old.runners.v2_unsupported(), new.runners.v2_unsupported()
    if a is None or b is None:
        return [] if a == b else ["what V2 leaves unsupported: not readable in " + (old if a is None else new).release]
    key_a = "v2_" if "v2" in old.runners.unsupported else ""
    key_b = "v2_" if "v2" in new.runners.unsupported else ""
    out = []
    if key_a != key_b:
        out.append(
            f"what V2 leaves unsupported: {UNSUPPORTED_METHOD.format(key_a)} -> {UNSUPPORTED_METHOD.format(key_b)}"
        )
    was, now = dict(a), dict(b)
    for what in [w for w in was if w not in now]:
        out.append(f"V2 supports now: {what} (was unsupported when {was[what]})")
    for what in [w for w in now if w not in was]:
        out.append(f"V2 newly unsupported: {what} (when {now[what]})")
    return out


def _metrics(old: Facts, new: Facts) -> list[str]:
    out = []
    if added := set(new.metrics) - set(old.metrics):
        out.append(f"added: {_names(added)}")
    if removed := set(old.metrics) - set(new.metrics):
        out.append(f"removed: {_names(removed)}")
    for name in sorted(set(old.metrics) & set(new.metrics)):
        if old.metrics[name] != new.metrics[name]:
            out.append(f"moved: {name}: {_names(old.metrics[name])} -> {_names(new.metrics[name])}")
    return out


def _kernels(old: Facts, new: Facts) -> list[str]:
    out = []
    for rel in KERNELS:
        a = {k.partition(":")[2]: v for k, v in old.kernels.items() if k.startswith(rel + ":")}
        b = {k.partition(":")[2]: v for k, v in new.kernels.items() if k.startswith(rel + ":")}
        if a and not b:
            public = _names(n for n in a if not n.rsplit(".", 1)[-1].startswith("_"))
            out.append(f"{rel}: removed, {len(a)} function(s) (public: {public})")
            continue
        if b and not a:
            out.append(f"{rel}: added ({_names(b)})")
            continue
        for name in sorted(set(a) - set(b)):
            out.append(f"{rel}: removed {name}")
        for name in sorted(set(b) - set(a)):
            out.append(f"{rel}: added {name}({', '.join(map(str, b[name]))})")
        for name in sorted(set(a) & set(b)):
            if a[name] != b[name]:
                out.append(f"{rel}: {name}: {'; '.join(param_changes(a[name], b[name]))}")
    return out + _new_types(old, new)


def _new_types(old: Facts, new: Facts) -> list[str]:
    """Where a type the new signatures name, and the old ones did not, comes from."""
    seen = {t for params in old.kernels.values() for p in params for t in re.findall(r"[A-Z]\w+", p.annotation)}
    named = {t for params in new.kernels.values() for p in params for t in re.findall(r"[A-Z]\w+", p.annotation)}
    return [
        f"{t}, new in these signatures, is {new.kernel_types[t]}.{t}"
        for t in sorted(named - seen)
        if t in new.kernel_types
    ]


def param_changes(a: tuple[Param, ...], b: tuple[Param, ...]) -> list[str]:
    """A signature's change: parameters replaced at the same position, removed, added, retyped."""
    old, new = {p.name: p for p in a}, {p.name: p for p in b}
    gone, came = [p for p in a if p.name not in new], [p for p in b if p.name not in old]
    out = []
    for p in list(gone):
        i = a.index(p)
        if i < len(b) and b[i] in came and not p.keyword_only:
            out.append(f"{p} -> {b[i]}")
            gone.remove(p)
            came.remove(b[i])
    out += [f"- {p}" for p in gone] + [f"+ {p}" for p in came]
    for name in [n for n in old if n in new and old[n] != new[n]]:
        out.append(f"{old[name]} -> {new[name]}")
    return out


def _speculators(old: Facts, new: Facts) -> list[str]:
    out, same = [], []
    for method in sorted(set(old.speculators) | set(new.speculators)):
        a, b = old.speculators.get(method, ()), new.speculators.get(method, ())
        if a[:1] == b[:1] and set(a) == set(b):
            same.append(method)
            continue
        line = f"{method}: {_built(a)} -> {_built(b)}"
        if a[:1] == b[:1]:
            line = f"{method}: {a[0]}; variants {_names(a[1:])} -> {_names(b[1:])}"
        out.append(line)
    if out and same:
        out.append(f"unchanged: {', '.join(same)}")
    return out


def _built(names: tuple[str, ...]) -> str:
    if not names:
        return "none (V2 builds no speculator)"
    return names[0] + (f" (variants by checkpoint: {', '.join(names[1:])})" if names[1:] else "")


def _requirements(old: Facts, new: Facts) -> list[str]:
    out = []
    for package in sorted(set(old.requirements) - set(new.requirements)):
        out.append(f"{package}: no longer required (was: {old.requirements[package]})")
    for package in sorted(set(new.requirements) - set(old.requirements)):
        out.append(f"{package}: now required: {new.requirements[package]}")
    return out


def _environment(old: Facts, new: Facts) -> list[str]:
    out = []
    for var in sorted(old.env_vars - new.env_vars):
        refusals = [r for r in new.refusals if r.var == var]
        hint = new.env_removed.get(var)
        what = (
            f'refused: "{refusals[0].message}" ({refusals[0].where})'
            if refusals
            else f'removed, and setting it raises: "{hint}"'
            if hint
            else "removed"
        )
        out.append(f"{var}: {what}")
    if added := new.env_vars - old.env_vars:
        out.append(f"{len(added)} added: {_names(added)}")
    return out
