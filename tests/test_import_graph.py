"""tooldir's modules import each other without cycles (issue 13: one rule, one place).

The graph is built from the source (the AST of every module): relative and absolute ``tooldir``
imports at any level, including imports inside functions, and the package ``__init__`` that
importing a submodule runs first. Only ``if TYPE_CHECKING:`` blocks are left out: they never run.
Dynamic imports (``importlib.import_module``) are not edges; the CLI's lazy command table is one,
and a separate test below checks what it imports.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tooldir

PACKAGE = Path(tooldir.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path, modules: dict[str, Path], *, type_checking: bool = False) -> set[str]:
    """The modules of tooldir that ``module`` imports (``type_checking``: also those only its
    ``if TYPE_CHECKING:`` blocks name)."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    edges: set[str] = set()
    for target in found:
        if target not in modules:
            continue
        parts = target.split(".")
        # importing a.b.c runs a/__init__ and a/b/__init__ first (own ancestors are already running)
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name in modules and name != module and not module.startswith(name + "."):
                edges.add(name)
    return edges


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_builder_sees_relative_absolute_and_function_level_imports() -> None:
    modules = _modules()
    assert "tooldir.sandbox.base" in _imports(
        "tooldir.sandbox.bubblewrap", modules["tooldir.sandbox.bubblewrap"], modules
    )
    # a function-level import: the drill runner reads the scan memo it forges
    assert "tooldir.read.scanmemo" in _imports("tooldir.drill.execute", modules["tooldir.drill.execute"], modules)
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_tooldir_modules_import_each_other_without_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycle(graph) is None


def test_running_one_cli_command_imports_only_its_module_and_never_the_drill() -> None:
    code = (
        "import sys; from tooldir._cli import build_parser; build_parser(['scan', '--json']); "
        "print(sorted(m for m in sys.modules if m.startswith('tooldir._cli.') or m == 'tooldir.drill'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # progress: the helper that draws on a terminal (rich itself is imported only when drawing)
    assert out.strip() == "['tooldir._cli.common', 'tooldir._cli.inspect', 'tooldir._cli.progress']"


# -- the layout (issue 25 item 3): the vocabulary and the front door at the top, a folder per stage,
# and _internal/ holding helpers that know no stage. Imports under TYPE_CHECKING count here: a folder
# that names another's types depends on it.

MAX_TOP_LEVEL_MODULES = 15
STAGES = ("read", "trust", "snapshot", "deferred", "run", "sandbox")  # a load, then a call


def _top(module: str) -> str:
    """The top-level folder or module of tooldir a module is in (``__init__``: the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _top_level_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {_top(name): set() for name in modules}
    for name, path in modules.items():
        for target in _imports(name, path, modules, type_checking=True):
            if _top(name) != _top(target):
                graph[_top(name)].add(_top(target))
    return graph


def test_at_most_fifteen_modules_stay_at_the_top_level() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_every_stage_of_the_data_flow_is_a_folder_of_its_own() -> None:
    assert all((PACKAGE / stage / "__init__.py").is_file() for stage in STAGES)


def test_no_two_top_level_folders_or_modules_import_each_other_directly_or_in_a_loop() -> None:
    assert _cycle(_top_level_graph()) is None


def test_internal_helpers_import_nothing_of_tooldir_outside_internal() -> None:
    modules = _modules()
    outside = {
        (name, target)
        for name, path in modules.items()
        if name.startswith("tooldir._internal")
        for target in _imports(name, path, modules, type_checking=True)
        if not target.startswith("tooldir._internal")
    }
    assert outside == set()
