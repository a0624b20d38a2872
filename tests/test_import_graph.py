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


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node)
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
    # a function-level import: the drill runner runs CLI steps through tooldir._cli.main
    assert "tooldir._cli" in _imports("tooldir.drill.execute", modules["tooldir.drill.execute"], modules)
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
