"""Which speculator Model Runner V2 builds for each speculative method, read from a release's sources.

Two shapes, both read without importing vLLM:

- a registry (0.34: `_CONFIG_BY_METHOD` in v1/worker/gpu/spec_decode/speculator_config.py): method ->
  SpeculatorConfig class -> its `speculator_class`; subclasses with the same `base_method` and a
  speculator of their own are variants picked by the draft checkpoint (dflash: XPress, DFlash2, LiLiCorr);
- a dispatch (0.32-0.33: `init_speculator` in v1/worker/gpu/spec_decode/__init__.py): an if/elif chain
  on `speculative_config.method` and helpers such as `use_eagle()`, which are read from SpeculativeConfig
  (`return self.method in (...)`); a branch with more conditions than the method is a variant.

A method no branch or entry names gets no V2 speculator (V2 refuses it, or the engine falls back to V1).
"""

from __future__ import annotations

import ast

from specgate.release.vllm_tree import Tree, text_of

PACKAGE = "vllm/v1/worker/gpu/spec_decode"
REGISTRY = f"{PACKAGE}/speculator_config.py"
DISPATCH = f"{PACKAGE}/__init__.py"
SPECULATIVE = "vllm/config/speculative.py"


def speculators(tree: Tree) -> tuple[dict[str, tuple[str, ...]], str]:
    """(method -> speculator class names, the main one first; why nothing could be read, or '')."""
    if tree.assigned(REGISTRY, "_CONFIG_BY_METHOD") is not None:
        return _from_registry(tree), ""
    fn = tree.functions(DISPATCH).get("init_speculator")
    if fn is not None:
        return _from_dispatch(tree, fn), ""
    return {}, f"neither {REGISTRY} (_CONFIG_BY_METHOD) nor {DISPATCH} (init_speculator) is in this tree"


def _last(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def _config_classes(tree: Tree) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Every class in the spec-decode package: name -> (base names, its own string class attributes)."""
    out = {}
    for rel in tree.grep("speculator_class", under=PACKAGE):
        for name, cls in tree.classes(rel).items():
            attrs = {}
            for item in cls.body:
                named = isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name)
                if named and (text := text_of(item.value)):
                    attrs[item.targets[0].id] = text
            bases = [b.id if isinstance(b, ast.Name) else _last(ast.unparse(b)) for b in cls.bases]
            out[name] = (bases, attrs)
    return out


def _from_registry(tree: Tree) -> dict[str, tuple[str, ...]]:
    registry = tree.assigned(REGISTRY, "_CONFIG_BY_METHOD")
    classes = _config_classes(tree)

    def attr(name: str, key: str) -> str:
        bases, attrs = classes.get(name, ([], {}))
        return attrs.get(key) or next((v for b in bases if (v := attr(b, key))), "")

    def descends(name: str, ancestor: str) -> bool:
        bases = classes.get(name, ([], {}))[0]
        return ancestor in bases or any(descends(b, ancestor) for b in bases)

    out = {}
    for key, value in zip(registry.keys, registry.values):
        if not isinstance(key, ast.Constant):
            continue
        if isinstance(value, ast.Call) and len(value.args) == 2:
            config = text_of(value.args[1])
        else:
            config = _last(text_of(value))
        main = attr(config, "speculator_class")
        variants = [
            _last(own)
            for name, (_, attrs) in sorted(classes.items())
            if descends(name, config)
            and (own := attrs.get("speculator_class"))
            and attr(name, "base_method") == attr(config, "base_method")
        ]
        out[key.value] = tuple(dict.fromkeys([_last(main), *variants])) if main else ()
    return out


def _from_dispatch(tree: Tree, fn: ast.FunctionDef) -> dict[str, tuple[str, ...]]:
    chain = next((n for n in fn.body if isinstance(n, ast.If)), None)
    helpers = _helpers(tree)
    found: dict[str, list[str]] = {}  # the main speculator (an unconditional branch's own return) first
    done: set[str] = set()
    while chain is not None:
        methods, conditional = _matches(chain.test, helpers)
        returned = _returned(chain.body)  # breadth first: the branch's unconditional return comes first
        for method in methods - done:
            names = found.setdefault(method, [])
            if not conditional and returned:
                names.insert(0, returned[0])
                done.add(method)
            names.extend(r for r in returned if r not in names)
        chain = chain.orelse[0] if len(chain.orelse) == 1 and isinstance(chain.orelse[0], ast.If) else None
    return {m: tuple(dict.fromkeys(names)) for m, names in found.items()}


def _returned(body: list[ast.stmt]) -> list[str]:
    out = []
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            out.append(node.value.func.id)
    return out


def _helpers(tree: Tree) -> dict[str, ast.expr | set[str]]:
    """SpeculativeConfig's predicates: a one-line one as its expression (use_eagle -> `self.method in
    (...)`), a longer one as the methods it compares `self.method` with (use_multi_module_mtp: {'mtp'})."""
    cls = tree.classes(SPECULATIVE).get("SpeculativeConfig")
    out: dict[str, ast.expr | set[str]] = {}
    for item in cls.body if cls else ():
        if isinstance(item, ast.FunctionDef):
            body = [s for s in item.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                out[item.name] = body[0].value
            else:
                out[item.name] = {
                    c.value
                    for n in ast.walk(item)
                    if isinstance(n, ast.Compare) and ast.unparse(n.left) == "self.method"
                    for c in n.comparators
                    if isinstance(c, ast.Constant)
                }
    return out


def _matches(test: ast.expr, helpers: dict[str, ast.expr | set[str]]) -> tuple[set[str], bool]:
    """(the methods a branch's test can be true for, whether it asks more than the method)."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in helpers:
        helper = helpers[test.func.attr]
        return (set(helper), True) if isinstance(helper, set) else _matches(helper, helpers)
    if isinstance(test, ast.BoolOp):
        parts = [_matches(v, helpers) for v in test.values]
        with_methods = [p for p in parts if p[0]]
        if isinstance(test.op, ast.And):
            methods = set.intersection(*(p[0] for p in with_methods)) if with_methods else set()
            return methods, len(with_methods) < len(parts) or any(p[1] for p in with_methods)
        return set().union(*(p[0] for p in parts)), any(p[1] or not p[0] for p in parts)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and ast.unparse(test.left).endswith(".method"):
        right = test.comparators[0]
        items = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
        values = {i.value for i in items if isinstance(i, ast.Constant)}
        if isinstance(test.ops[0], (ast.Eq, ast.In)):
            return values, False
    return set(), True
