"""No hidden machinery: no function of the product (vit_locality/, callbacks/, train.py) mutates a module-level dict,
list or set. What a function needs is an argument or an attribute of an object the entry point builds, and what
crosses into a launcher's workers crosses in one place (vit_locality/sweep/command.py). Read with `ast` only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from helpers import REPO

CONTAINER_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque"}
CONTAINER_NODES = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
MUTATORS = {
    *("append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem"),
    *("remove", "discard", "clear", "sort", "reverse"),
}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class Module:
    """One module's dotted name as the installed package has it, where it is shown, and its source."""

    name: str
    shown: str
    source: str


def product_modules() -> list[Module]:
    """Every module of the product: vit_locality/**, callbacks/* (installed as vit_locality.callbacks) and train.py."""
    found = [Module("train", "train.py", (REPO / "train.py").read_text())]
    for root, package in ((REPO / "vit_locality", "vit_locality"), (REPO / "callbacks", "vit_locality.callbacks")):
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found.append(Module(".".join([package, *parts]), str(path.relative_to(REPO)), path.read_text()))
    return found


def _is_container(value: ast.expr | None) -> bool:
    """A dict, list or set literal or comprehension, or a call of dict/list/set/defaultdict/OrderedDict/deque."""
    if isinstance(value, CONTAINER_NODES):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in CONTAINER_CALLS
    return False


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run at import time: the module's own, inside its top-level if/try/with blocks too."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for inner in getattr(statement, block, []):
                    yield from _module_statements(inner.body if isinstance(inner, ast.ExceptHandler) else [inner])


def module_containers(tree: ast.Module) -> dict[str, int]:
    """The module-level names bound to a dict, list or set, with the line of their binding."""
    found = {}
    for statement in _module_statements(tree.body):
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        targets = [statement.target] if isinstance(statement, ast.AnnAssign) else targets
        if _is_container(getattr(statement, "value", None)):
            found |= {target.id: statement.lineno for target in targets if isinstance(target, ast.Name)}
    return found


def imported_names(tree: ast.Module, module: str) -> dict[str, str]:
    """Each name an import binds anywhere in the module, to the dotted name it stands for."""
    names = {}
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # `import a.b` binds a; `import a.b as x` binds x to a.b
            names |= {alias.asname: alias.name for alias in node.names if alias.asname}
            names |= {alias.name.split(".")[0]: alias.name.split(".")[0] for alias in node.names if not alias.asname}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import, from the module's package up
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *filter(None, [base])])
            names |= {(alias.asname or alias.name): f"{base}.{alias.name}" for alias in node.names}
    return names


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of names and attributes; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (inner := _dotted(node.value)) is not None:
        return f"{inner}.{node.attr}"
    return None


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own body, not those of the functions and classes defined in it."""
    for child in ast.iter_child_nodes(function):
        if isinstance(child, (*FUNCTIONS, ast.ClassDef)):
            continue
        yield child
        yield from _own_nodes(child)


def _locals(function: ast.AST) -> tuple[set[str], set[str]]:
    """The names a function binds for itself (parameters, assignments) and those it declares global; its imports
    stay names of other modules (`imported_names`)."""
    declared = {name for node in _own_nodes(function) if isinstance(node, ast.Global) for name in node.names}
    args = function.args if isinstance(function, FUNCTIONS) else None
    bound = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} if args else set()
    bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None} if args else set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
    return bound - declared, declared


def mutations(function: ast.AST) -> Iterator[tuple[str, int]]:
    """(the dotted name a function mutates in place or rebinds as a global, line) for each such statement."""
    own, declared = _locals(function)
    for node in _own_nodes(function):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        elif isinstance(node, ast.Assign | ast.Delete):
            targets = [t.value for t in node.targets if isinstance(t, ast.Subscript)]
            targets += [t for t in node.targets if isinstance(t, ast.Name) and t.id in declared]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            target = node.target
            targets = [target.value] if isinstance(target, ast.Subscript) else []
            targets += [target] if isinstance(target, ast.Name) and target.id in declared else []
        for target in targets:
            name = _dotted(target)
            if name is not None and name.split(".")[0] not in own:
                yield name, node.lineno


def mutated_module_state(modules: list[Module]) -> list[str]:
    """`where:line NAME mutated at where:line` for every module-level container any function of `modules` mutates."""
    trees = {module.name: ast.parse(module.source) for module in modules}
    containers = {
        f"{module.name}.{name}": f"{module.shown}:{line} {name}"
        for module in modules
        for name, line in module_containers(trees[module.name]).items()
    }
    found = []
    for module in modules:
        tree = trees[module.name]
        imports = imported_names(tree, module.name)
        for function in (node for node in ast.walk(tree) if isinstance(node, FUNCTIONS)):
            for name, line in mutations(function):
                head, _, rest = name.partition(".")
                qualified = f"{imports[head]}.{rest}".rstrip(".") if head in imports else f"{module.name}.{name}"
                if qualified in containers:
                    found.append(f"{containers[qualified]} mutated at {module.shown}:{line}")
    return sorted(set(found))


def test_no_function_of_the_product_mutates_module_level_state() -> None:
    modules = product_modules()
    assert len(modules) > 100 and any(module.shown == "callbacks/attention_stats.py" for module in modules)
    assert mutated_module_state(modules) == []


KNOWN = {
    "pkg.state": """
CACHE: dict = {}
SEEN = set()
ORDER = [n for n in range(3)]
FIXED = {"a": 1}
HISTORY: list = []
COUNT = 0


def remember(key, value):
    CACHE[key] = value


def restart():
    global HISTORY, COUNT
    HISTORY = []
    COUNT += 1


def shadowed(CACHE):
    CACHE.clear()


def read():
    return FIXED["a"], list(ORDER)
""",
    "pkg.user": """
from pkg import state
from pkg.state import SEEN


def note(x):
    from pkg import state as again

    SEEN.add(x)
    again.FIXED.update(b=2)
    state.ORDER.append(x)
    del state.CACHE[x]
""",
}


def known(names: tuple[str, ...]) -> list[Module]:
    return [Module(name, f"{name.replace('.', '/')}.py", KNOWN[name]) for name in names]


def test_the_check_finds_each_kind_of_mutation_and_nothing_else() -> None:
    """A dict set by key, a list rebound as a global, and, from another module, a set added to, a list appended to,
    a dict updated through a function's own import and a key deleted: each named where it is bound and where it is
    mutated. A global int, a parameter of the same name and a read are not."""
    assert mutated_module_state(known(("pkg.state", "pkg.user"))) == [
        "pkg/state.py:2 CACHE mutated at pkg/state.py:11",
        "pkg/state.py:2 CACHE mutated at pkg/user.py:12",
        "pkg/state.py:3 SEEN mutated at pkg/user.py:9",
        "pkg/state.py:4 ORDER mutated at pkg/user.py:11",
        "pkg/state.py:5 FIXED mutated at pkg/user.py:10",
        "pkg/state.py:6 HISTORY mutated at pkg/state.py:16",
    ]


def test_the_check_passes_a_module_without_mutated_state() -> None:
    clean = Module("pkg.clean", "pkg/clean.py", "TABLE = {'a': 1}\n\ndef lookup(key):\n    return TABLE.get(key)\n")
    assert mutated_module_state([clean]) == []
