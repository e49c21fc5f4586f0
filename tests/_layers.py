"""The package layers of genie and the import scanner that checks them (used by test_architecture).

Scanner: every ``.py`` under ``<root>/genie`` and ``<root>/genie_agent`` is parsed with ``ast``
and every import of genie code is recorded as an ``Edge``: ``import x``, ``from x import y``
(``x.y`` when ``y`` is a submodule, else ``x``), relative imports (resolved against the module's
package; an ``__init__.py`` is the package itself), imports anywhere in the file (functions,
``try`` blocks, ``if TYPE_CHECKING``), and ``importlib.import_module(...)`` / ``import_module``
/ ``__import__`` whose argument is a string literal, an f-string, ``"literal" + x``, or a
module-level constant (``NAME = "genie.x"``, ``TABLE[key]`` with ``TABLE`` a dict literal of
strings: every value counts). A name built at run time is imported up to its constant prefix's
last dot: ``f"genie.commands.{name}"`` imports ``genie.commands``, and may reach any module
directly in it. Other arguments (a caller's variable) are not seen.

Packages: ``genie.<first component>`` (a subpackage or a module such as ``genie.store``), the
top package ``genie`` itself (its ``__init__``: ``__version__``), and ``genie_agent``.

Rules (see ``LAYERS``):

* a module may import its own package or packages in LOWER layers; never a package of a higher
  layer nor another package of its own layer; every package must be in ``LAYERS``;
* ``TYPE_CHECKING`` imports obey the layer rule (an annotation is a dependency of the design)
  but never run, so the transitive reach does not follow them;
* the top package may become a lazy facade over ``genie.api``: in ``genie/__init__.py`` the
  imports inside a module-level ``__getattr__``/``__dir__`` or an ``if TYPE_CHECKING`` block are
  the *facade*. They may name ``genie.api`` only, and they are not dependencies of ``genie``:
  they run when a caller reads an API name off ``genie``, so they are that caller's reach. In
  turn, code inside the tree must not read API names off the facade (``from genie import
  simulate``, ``genie.simulate``); it imports ``genie.api`` so that its reach is visible.
  Importing ``genie`` for ``__version__`` (any name bound at the top level of
  ``genie/__init__.py``) or for a submodule is an import of layer L10 and always allowed.
* transitive reach: importing a module runs it, its parent packages' ``__init__`` and,
  eventually, everything it imports (also inside functions); the reach of a module follows all
  of those except ``TYPE_CHECKING`` and facade imports. The top package ``genie`` is the parent
  of every genie module, so every reach may contain it (its own imports are followed).
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

TOP = ("genie", "genie_agent")

# Top to bottom. A package may import its own modules and packages of lower layers only.
LAYERS: list[frozenset[str]] = [
    frozenset({"genie.__main__"}),  # L0 python -m genie
    frozenset({"genie.cli"}),  # L1 the command line's entry point
    frozenset({"genie.commands"}),  # L2 one module per CLI command
    frozenset({"genie.api"}),  # L2 the library the CLI is one client of
    frozenset({"genie.live", "genie.report", "genie.sweep"}),  # L3
    frozenset({"genie.faults"}),  # L4
    frozenset({"genie.deploy"}),  # L5
    frozenset({"genie.controller", "genie.calibration"}),  # L6
    frozenset({"genie.sim", "genie.testbed", "genie.store", "genie.capture", "genie_agent"}),
    frozenset({"genie.collectives", "genie.workload"}),  # L8
    frozenset(
        {"genie.wire", "genie.units", "genie.vocabulary", "genie.keys", "genie.progress"}
        | {"genie.extras", "genie.placement"}
    ),  # L9
    frozenset({"genie.errors", "genie"}),  # L10 the exception tree; genie: __version__
]
LAYER_OF: dict[str, int] = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

FACADE_FUNCTIONS = ("__getattr__", "__dir__")
FACADE_TARGET = "genie.api"
IMPORT_FUNCTIONS = ("import_module", "__import__")


@dataclass(frozen=True)
class Edge:
    """One import of genie code: ``src`` (a module) imports ``target`` (a dotted name)."""

    src: str
    target: str
    path: str  # relative to the tree root
    line: int
    type_only: bool = False  # inside ``if TYPE_CHECKING``: never runs
    facade: bool = False  # genie/__init__.py's lazy re-export of genie.api
    any_child: bool = False  # an f-string import: target or any module directly in it

    @property
    def where(self) -> str:
        """``path:line`` of the import."""
        return f"{self.path}:{self.line}"


@dataclass
class Tree:
    """The scanned tree: its modules (name -> path) and every genie import in it."""

    root: Path
    modules: dict[str, Path] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    # In-tree reads of API names off the facade (``from genie import simulate``): messages.
    facade_uses: list[str] = field(default_factory=list)

    def is_module(self, name: str) -> bool:
        """Whether ``name`` is a module or package of the tree."""
        return name in self.modules


def package_of(module: str) -> str:
    """``genie.X`` for anything under genie.X; ``genie`` for the top package; ``genie_agent``."""
    parts = module.split(".")
    if parts[0] == "genie":
        return ".".join(parts[:2])
    return parts[0]


def layer_name(pkg: str) -> str:
    """``L3`` for a package of layer 3."""
    return f"L{LAYER_OF[pkg]}"


def module_name(root: Path, path: Path) -> str:
    """The dotted module name of ``path`` (an ``__init__.py`` names its package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _base_package(module: str, path: Path) -> str:
    """The package a relative import in ``module`` starts from."""
    if path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def _resolve_relative(module: str, path: Path, level: int, name: str | None) -> str | None:
    """``from ..name import`` in ``module`` as an absolute name; None when it climbs too high."""
    parts = _base_package(module, path).split(".")
    if level - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _constant_prefix(node: ast.expr) -> tuple[str, bool] | None:
    """The string a dynamic import names: (text, complete) or None when it has no prefix."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.JoinedStr):
        prefix = ""
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                return prefix, False
            prefix += part.value
        return prefix, True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _constant_prefix(node.left)
        if left is None:
            return None
        return left[0], False
    return None


def _is_import_call(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in IMPORT_FUNCTIONS
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


class _Scanner(ast.NodeVisitor):
    """Collects the genie imports of one module, knowing the block each one sits in."""

    def __init__(self, tree: Tree, module: str, path: Path) -> None:
        self.tree = tree
        self.module = module
        self.path = path
        self.rel = path.relative_to(tree.root).as_posix()
        self.type_only = False
        self.facade = False
        self.depth = 0  # function nesting
        self.is_top_init = module == "genie"
        self.constants: dict[str, list[str]] = {}

    def visit_Module(self, node: ast.Module) -> None:
        self.constants = _string_constants(node)
        self.generic_visit(node)

    # -- blocks ------------------------------------------------------------------------------
    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        saved = self.type_only, self.facade
        self.type_only = True
        self.facade = self.facade or self.is_top_init
        for stmt in node.body:
            self.visit(stmt)
        self.type_only, self.facade = saved
        for stmt in node.orelse:
            self.visit(stmt)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = self.facade
        if self.is_top_init and self.depth == 0 and node.name in FACADE_FUNCTIONS:
            self.facade = True
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
        self.facade = saved

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    # -- imports -----------------------------------------------------------------------------
    def _add(self, target: str, line: int, any_child: bool = False) -> None:
        if target.split(".")[0] not in TOP:
            return
        self.tree.edges.append(
            Edge(self.module, target, self.rel, line, self.type_only, self.facade, any_child)
        )

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = _resolve_relative(self.module, self.path, node.level, node.module)
            if base is None:
                return
        else:
            base = node.module or ""
        if base.split(".")[0] not in TOP:
            return
        plain = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if _names_module(self.tree.root, sub):
                self._add(sub, node.lineno)
            else:
                plain.append(alias.name)
        if plain or not node.names:
            self._add(base, node.lineno)
        if base == "genie" and not self.is_top_init and not self.facade:
            self._check_facade_names(plain, node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_import_call(node) and node.args:
            for text, complete in self._dynamic_names(node.args[0]):
                if text.startswith("."):
                    text = self._relative_dynamic(node, text) or ""
                if complete:
                    self._add(text, node.lineno)
                elif "." in text:
                    self._add(text.rpartition(".")[0], node.lineno, any_child=text.endswith("."))
        self.generic_visit(node)

    def _dynamic_names(self, arg: ast.expr) -> list[tuple[str, bool]]:
        """What an import function's argument may name: literals, prefixes, module constants."""
        got = _constant_prefix(arg)
        if got is not None:
            return [got]
        if isinstance(arg, ast.Subscript):  # TABLE[key], TABLE a module-level dict literal
            arg = arg.value
        if isinstance(arg, ast.Name):
            return [(text, True) for text in self.constants.get(arg.id, ())]
        return []

    def _relative_dynamic(self, node: ast.Call, text: str) -> str | None:
        """``import_module(".x", __name__ / __package__ / "pkg")`` as an absolute name."""
        anchor = node.args[1] if len(node.args) > 1 else None
        for kw in node.keywords:
            if kw.arg == "package":
                anchor = kw.value
        if isinstance(anchor, ast.Name) and anchor.id == "__name__":
            package = self.module
        elif isinstance(anchor, ast.Name) and anchor.id == "__package__":
            package = _base_package(self.module, self.path)
        elif isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
            package = anchor.value
        else:
            return None
        level = len(text) - len(text.lstrip("."))
        parts = package.split(".")
        if level - 1 >= len(parts):
            return None
        rest = text[level:]
        return ".".join([*parts[: len(parts) - (level - 1)], *([rest] if rest else [])])

    # -- the facade, from inside the tree -----------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (
            isinstance(node.value, ast.Name)
            and node.value.id == "genie"
            and not self.is_top_init
            and not self.facade
        ):
            self._check_facade_names([node.attr], node.lineno, attribute=True)
        self.generic_visit(node)

    def _check_facade_names(self, names: Iterable[str], line: int, attribute: bool = False) -> None:
        own = _top_level_names(self.tree.root)
        for name in names:
            if name == "*" or name in own or _names_module(self.tree.root, f"genie.{name}"):
                continue
            if name.startswith("__") and name.endswith("__"):
                continue
            how = f"reads genie.{name}" if attribute else f"imports {name} from genie"
            self.tree.facade_uses.append(
                f"{self.module} ({self.rel}:{line}) {how}: the top package is a facade for "
                f"callers; code in the tree imports {FACADE_TARGET} (or the module defining "
                f"{name}) directly"
            )


def _string_constants(module: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to a string, or to a dict/tuple/list literal of strings."""
    out: dict[str, list[str]] = {}
    for stmt in module.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        if isinstance(value, ast.Dict):
            items: list[ast.expr] = list(value.values)
        elif isinstance(value, ast.Tuple | ast.List | ast.Set):
            items = list(value.elts)
        else:
            items = [value]
        texts = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        if texts:
            out[target.id] = texts
    return out


def _names_module(root: Path, dotted: str) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


_TOP_NAMES: dict[Path, frozenset[str]] = {}


def _top_level_names(root: Path) -> frozenset[str]:
    """The names ``genie/__init__.py`` binds at module level (served without __getattr__)."""
    if root not in _TOP_NAMES:
        init = root / "genie" / "__init__.py"
        names: set[str] = set()
        if init.is_file():
            for stmt in ast.parse(init.read_text(), str(init)).body:
                names |= _bound(stmt)
        names.discard("__getattr__")
        names.discard("__dir__")
        _TOP_NAMES[root] = frozenset(names)
    return _TOP_NAMES[root]


def _bound(stmt: ast.stmt) -> set[str]:
    """Names one module-level statement binds (assignments, defs, classes, imports)."""
    out: set[str] = set()
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        out.add(stmt.name)
    elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    elif isinstance(stmt, ast.Import | ast.ImportFrom):
        for a in stmt.names:
            out.add((a.asname or a.name).split(".")[0])
    elif isinstance(stmt, ast.If | ast.Try):
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                out |= _bound(child)
    return out


def scan(root: Path) -> Tree:
    """Every module of ``root/genie`` and ``root/genie_agent`` and its genie imports."""
    root = root.resolve()
    _TOP_NAMES.pop(root, None)
    tree = Tree(root)
    for top in TOP:
        for path in sorted((root / top).rglob("*.py")):
            tree.modules[module_name(root, path)] = path
    for mod, path in tree.modules.items():
        _Scanner(tree, mod, path).visit(ast.parse(path.read_text(), str(path)))
    return tree


# -- the rules ----------------------------------------------------------------------------------


def unknown_packages(tree: Tree) -> list[str]:
    """Packages in the tree, or imported by it, that ``LAYERS`` does not place."""
    found: dict[str, str] = {}
    for mod, path in tree.modules.items():
        found.setdefault(package_of(mod), f"{path.relative_to(tree.root)}")
    for e in tree.edges:
        found.setdefault(package_of(e.target), f"imported at {e.where}")
    return [
        f"package {pkg} ({where}) is in no layer: add it to LAYERS in tests/_layers.py "
        f"(the layer it belongs to says who may import it)"
        for pkg, where in sorted(found.items())
        if pkg not in LAYER_OF
    ]


def layer_violations(tree: Tree) -> list[str]:
    """Every direct import of a package of the same or a higher layer (facade imports apart)."""
    out = set()
    for e in tree.edges:
        if e.facade:
            continue
        src, dst = package_of(e.src), package_of(e.target)
        if src == dst or src not in LAYER_OF or dst not in LAYER_OF:
            continue
        if LAYER_OF[dst] > LAYER_OF[src]:
            continue
        why = "the same layer" if LAYER_OF[dst] == LAYER_OF[src] else "a higher layer"
        kind = " (TYPE_CHECKING)" if e.type_only else ""
        out.add(
            f"{e.src} imports {e.target}{kind} (layer {layer_name(src)} may not import "
            f"{layer_name(dst)} package {dst}: {why}) at {e.where}"
        )
    return sorted(out)


def facade_violations(tree: Tree) -> list[str]:
    """The top package's facade reaches genie.api only; the tree does not read through it."""
    out = {
        f"genie imports {e.target} in its lazy facade at {e.where}: the facade may re-export "
        f"{FACADE_TARGET} only"
        for e in tree.edges
        if e.facade and package_of(e.target) != FACADE_TARGET
    }
    return sorted(out) + sorted(set(tree.facade_uses))


def _parents(name: str) -> Iterator[str]:
    parts = name.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def runtime_graph(tree: Tree) -> dict[str, set[str]]:
    """module -> the modules importing it runs (imports that run, their parent packages)."""
    children: dict[str, set[str]] = defaultdict(set)
    for mod in tree.modules:
        if "." in mod:
            children[mod.rpartition(".")[0]].add(mod)
    graph: dict[str, set[str]] = {mod: set() for mod in tree.modules}
    for e in tree.edges:
        if e.type_only or e.facade:
            continue
        targets = {e.target, *_parents(e.target)}
        if e.any_child:
            targets |= children.get(e.target, set())
        graph[e.src] |= {t for t in targets if t in tree.modules and t != e.src}
    for mod in tree.modules:  # importing a module runs its parent packages
        graph[mod] |= {p for p in _parents(mod) if p in tree.modules}
    return graph


def reach(graph: dict[str, set[str]], start: str) -> dict[str, str | None]:
    """Every module ``start`` reaches -> the module it was first reached from (BFS tree)."""
    came: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        mod = todo.popleft()
        for nxt in sorted(graph.get(mod, ())):
            if nxt not in came:
                came[nxt] = mod
                todo.append(nxt)
    return came


def chain(came: dict[str, str | None], end: str) -> str:
    """``a -> b -> end`` along the BFS tree of ``reach``."""
    path = [end]
    while (prev := came[path[-1]]) is not None:
        path.append(prev)
    return " -> ".join(reversed(path))


def reach_violations(
    tree: Tree, pkg: str, *, banned: Iterable[str] = (), allowed: Iterable[str] | None = None
) -> list[str]:
    """Modules of ``pkg`` that reach a banned package (or one outside ``allowed``): the chains.

    One message per (module, forbidden package), naming the shortest chain. ``pkg`` itself and
    the top package ``genie`` (every module's parent) are always allowed.
    """
    graph = runtime_graph(tree)
    banned = set(banned)
    ok = None if allowed is None else {*allowed, pkg, "genie"}
    out = []
    for mod in sorted(m for m in tree.modules if package_of(m) == pkg):
        came = reach(graph, mod)
        seen: set[str] = set()
        for other in came:  # BFS order: the shortest chain to each package comes first
            opkg = package_of(other)
            bad = opkg in banned or (ok is not None and opkg not in ok)
            if bad and opkg not in seen:
                seen.add(opkg)
                rule = (
                    f"{pkg} may not reach {opkg}"
                    if opkg in banned
                    else f"{pkg} may reach only {', '.join(sorted(ok or ()))}"
                )
                out.append(f"{chain(came, other)} ({rule})")
    return out


def package_cycles(tree: Tree) -> list[list[str]]:
    """Cycles in the package graph (every import but the facade's), each once."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in tree.edges:
        src, dst = package_of(e.src), package_of(e.target)
        if not e.facade and src != dst:
            graph[src].add(dst)
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                cycles.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least package
                walk(nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    return cycles


def cycle_evidence(tree: Tree, cycle: list[str]) -> str:
    """``a -> b -> a`` with one import per step."""
    steps = []
    for a, b in itertools.pairwise(cycle):
        e = next(
            e
            for e in tree.edges
            if not e.facade and package_of(e.src) == a and package_of(e.target) == b
        )
        steps.append(f"{e.src} imports {e.target} ({e.where})")
    return " -> ".join(cycle) + ": " + "; ".join(steps)
