"""The package's shape, read from its source with `ast` (nothing is imported): no import cycle and no
upward arrow between its packages, lazy (function-level) imports included; no private name used across
modules, and a package's private modules (`_name.py`) imported only inside it; no module over 450
lines and no function over 80.

specgate/ is grouped by job into packages (and the few modules left at its top: the public ones and the
vocabulary every package uses). LAYERS lists these units, lowest first: a unit may import a unit of a
lower layer, never one of its own layer or above (two units in one layer know nothing of each other);
inside a package, its modules import each other freely (the cycle test still holds them). A new
package or top-level module is placed here (the test fails naming a unit no layer holds). Each package's
__init__ docstring says its job and its neighbours.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "specgate"
MAX_LINES = 450
MAX_FUNCTION_LINES = 80
LAYERS = (
    # the vocabulary: the exceptions, how numbers are written, what this machine is, every run ends
    # (lifetime/), every vLLM internal (vllm_compat/), the gate registry (gates), a run's settings by name (how
    # a caller spells them); nothing here knows about profiles or runs
    ("errors", "formatting", "gates", "machine", "lifetime", "vllm_compat", "settings"),
    # model references (zoo: / paths / hub ids); the rejection samplers the properties drive
    ("models", "sampler"),
    # a run's inputs: the profile (parse, then resolve), then its prompt sets; the measurements' own arithmetic
    ("profile",),
    ("prompts", "figures"),
    # what is stored: baseline files, their git history, a run's record, calibrated tolerances
    ("store",),
    # engines: the seam (public), then booting, driving and stopping them
    ("backend",),
    ("engines",),
    # judging: one check per gate
    ("checks",),
    # what a person reads
    ("report",),
    # one run: the session that composes the parts, its measurements, scenarios and results
    ("run",),
    # entry points: pytest (the hook specification a conftest.py implements; the plugin, the fake engine),
    # then release-to-release work, then the `specgate` command (and `python -m specgate`, which runs it)
    ("hooks",),
    ("plugin", "testing"),
    ("release",),
    ("cli",),
    ("__main__",),
)


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module in the package (a package is its __init__.py)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, known) -> list[tuple[str, int, str]]:
    """(imported module, line, how) for every import of a package module in `path`: at module level or
    inside a function ('lazy'), and any string that names one exactly (a dispatch table of modules).
    Importing `a.b.c` imports the packages `a.b` too (their __init__ runs first)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        lazy = "lazy" if getattr(node, "col_offset", 0) else "top"
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import sub` imports the submodule; `from pkg import thing` needs pkg's __init__
            subs = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in known]
            targets = subs + ([module] if len(subs) < len(node.names) else [])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            targets, lazy = [node.value], "named"
        for target in targets:
            if target.split(".")[0] != PACKAGE.name or target == PACKAGE.name:
                continue
            resolved = _resolve(target, known)
            # importing a submodule runs its packages' __init__ first: those are imported too (a module's
            # own packages are already being initialised when it runs)
            while resolved and resolved != PACKAGE.name:
                if resolved != name and not name.startswith(resolved + "."):
                    found.append((resolved, node.lineno, lazy))
                resolved = resolved.rpartition(".")[0]
    return found


def graph() -> dict[str, dict[str, tuple[int, str]]]:
    """module -> {imported module: (line, how)} (the first import of each)."""
    known = modules()
    out = {}
    for name, path in known.items():
        edges = {}
        for target, line, how in imports(name, path, known):
            edges.setdefault(target, (line, how))
        out[name] = edges
    return out


def cycles(edges) -> list[tuple[list[str], list[str]]]:
    """Each strongly connected component of `edges` (modules that import each other, directly or not)
    with one cycle through it (a path that returns to its start)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append((sorted(component), _a_cycle(sorted(component), edges)))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _a_cycle(component: list[str], edges) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start, inside = component[0], set(component)
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for w in sorted(edges[path[-1]]):
            if w == start:
                return path + [start]
            if w in inside and w not in seen:
                seen.add(w)
                paths.append(path + [w])
    return component


def describe(path: list[str], edges) -> str:
    return (
        " -> ".join(path)
        + " ("
        + "; ".join(f"{a} line {edges[a][b][0]} ({edges[a][b][1]})" for a, b in zip(path, path[1:]))
        + ")"
    )


def unit_of(module: str) -> str | None:
    """The package or top-level module `module` belongs to ('specgate.store.history' -> 'store'); None for
    specgate itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE.name else None


def layer_of(module: str) -> int | None:
    unit = unit_of(module)
    return next((i for i, names in enumerate(LAYERS) if unit in names), None)


def upward(edges) -> list[str]:
    """Each import of a unit of the importer's own layer or above (imports inside one package excepted)."""
    return [
        f"{a} ({unit_of(a)}, layer {layer_of(a)}) imports {b} ({unit_of(b)}, layer {layer_of(b)}) "
        f"at line {line} ({how})"
        for a, targets in sorted(edges.items())
        for b, (line, how) in sorted(targets.items())
        if a != PACKAGE.name and unit_of(b) != unit_of(a) and layer_of(b) >= layer_of(a)
    ]


def test_the_graph_sees_lazy_imports_and_tables_of_module_names(tmp_path):
    """The checker itself: a cycle made only of a function-level import is one, and names it."""
    edges = graph()
    assert "specgate.plugin" in edges and edges["specgate.plugin"]  # sanity: something was read
    fake = {"a": {"b": (3, "top")}, "b": {"c": (7, "lazy")}, "c": {"a": (1, "lazy")}, "d": {"a": (2, "top")}}
    assert cycles(fake) == [(["a", "b", "c"], ["a", "b", "c", "a"])]
    assert describe(["a", "b", "c", "a"], fake) == "a -> b -> c -> a (a line 3 (top); b line 7 (lazy); c line 1 (lazy))"


def test_no_module_imports_one_that_imports_it_back():
    edges = graph()
    found = [
        f"cycle of {len(members)}: {', '.join(members)}; e.g. {describe(cycle, edges)}"
        for members, cycle in cycles(edges)
    ]
    assert not found, "import cycles in specgate/ (break each at its lowest arrow):\n" + "\n".join(found)


def test_every_unit_is_in_a_layer_and_imports_only_lower_ones():
    edges = graph()
    unplaced = sorted({unit_of(m) for m in edges if m != PACKAGE.name and layer_of(m) is None})
    assert not unplaced, f"packages or modules in no layer of LAYERS (tests/unit/test_architecture.py): {unplaced}"
    units = {unit_of(m) for m in edges}
    stale = sorted(n for names in LAYERS for n in names if n not in units)
    assert not stale, f"LAYERS names packages or modules that do not exist: {', '.join(stale)}"
    found = upward(edges)
    assert not found, "upward arrows (a package must not import one of its own layer or above):\n" + "\n".join(found)


def test_the_layer_rule_sees_an_upward_import():
    """The checker itself: store/ importing run/ (lazily), or figures/ importing prompts/ (one layer), is refused."""
    edges = {
        "specgate.store.history": {"specgate.run.session": (9, "lazy"), "specgate.figures.stats": (3, "top")},
        "specgate.figures.memory": {"specgate.prompts": (5, "top"), "specgate.figures.stats": (2, "top")},
    }
    assert upward(edges) == [
        "specgate.figures.memory (figures, layer 3) imports specgate.prompts (prompts, layer 3) at line 5 (top)",
        "specgate.store.history (store, layer 4) imports specgate.run.session (run, layer 9) at line 9 (lazy)",
    ]


def test_every_package_says_its_job_and_neighbours():
    missing = [
        str(init.relative_to(PACKAGE.parent))
        for init in sorted(PACKAGE.glob("*/__init__.py"))
        if "Neighbours" not in (ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or "")
    ]
    assert not missing, f"package docstrings without their job and neighbours ('Neighbours: ...'): {missing}"


def private_uses(name: str, path: Path, known) -> list[str]:
    """`from specgate.x import _y` and `x._y` on an imported package module, in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(PACKAGE.name):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    aliases[alias.asname or alias.name] = full
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{name} line {node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and aliases[node.value.id] != name
        ):
            found.append(f"{name} line {node.lineno}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return found


def test_no_private_name_is_used_across_modules():
    known = modules()
    found = [use for name, path in known.items() for use in private_uses(name, path, known)]
    assert not found, "private names used outside their module (make them public, or move them):\n" + "\n".join(found)


def private_modules_imported_from_outside(edges) -> list[str]:
    """Imports of a package's private module (`lifetime/_stacks.py`) by a module outside that package."""
    found = []
    for source, targets in edges.items():
        for target, (line, how) in targets.items():
            parts = target.split(".")
            for i, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:i])
                    if not source.startswith(owner + "."):
                        found.append(f"{source} line {line} ({how}) imports {target}, private to {owner}")
                    break
    return found


def test_a_packages_private_modules_are_imported_only_inside_it():
    found = private_modules_imported_from_outside(graph())
    assert not found, "a package's internals used from outside it (make them public, or move them):\n" + "\n".join(
        found
    )


def test_the_private_module_rule_sees_an_outside_import():
    edges = {
        "specgate.lifetime.reaper": {"specgate.lifetime._stacks": (3, "top")},
        "specgate.engines.engine": {"specgate.lifetime._stacks": (9, "lazy")},
    }
    assert private_modules_imported_from_outside(edges) == [
        "specgate.engines.engine line 9 (lazy) imports specgate.lifetime._stacks, private to specgate.lifetime"
    ]


@pytest.mark.parametrize("name", sorted(modules()))
def test_every_module_has_at_most_450_lines(name):
    lines = len(modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES}): split it along its seams"


def long_functions(name: str, path: Path) -> list[str]:
    """'module.function (line N): L lines' for each function (nested ones and methods too) over
    MAX_FUNCTION_LINES, decorators and docstring included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{name}.{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_has_more_than_80_lines():
    found = [line for name, path in sorted(modules().items()) for line in long_functions(name, path)]
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split them along their steps):\n" + "\n".join(found)
