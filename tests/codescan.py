"""An AST scan of tooldir/ for every code string it emits (tests/unit/test_codes.py uses it).

A code is the first (or the named) argument of a diagnostic helper, a call-error constructor or a
problem report; a literal is collected, both arms of ``a if c else b`` are, and a name (a code
passed through from elsewhere) is not: its origin is a literal somewhere else.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import tooldir

PACKAGE = Path(tooldir.__file__).parent

#: (file name or "*", called name, bare function or method) -> index of the code argument
DIAGNOSTIC_CALLS = {
    ("*", "error", "function"): 0,
    ("*", "warning", "function"): 0,
    ("*", "info", "function"): 0,
    ("*", "Diagnostic", "function"): 1,
    ("validate.py", "fail", "method"): 0,
    ("validate.py", "warn", "method"): 0,
    ("discover.py", "fail", "method"): 0,
    ("assess.py", "fail", "method"): 1,
    ("assess.py", "doubt", "method"): 1,
    ("assess.py", "diag", "method"): 1,
    ("strictjson.py", "StrictJSONError", "function"): 0,
    ("entries.py", "_finding", "function"): 1,
    ("install.py", "AdoptError", "function"): 0,
}
CALL_ERROR_CALLS = {
    ("registry.py", "_Stop", "function"): 0,
    ("*", "CallError", "function"): 0,
    ("session.py", "_refused", "function"): 0,
}
AUDIT_CALLS = {("audit.py", "Problem", "function"): 0, ("audit.py", "bad", "function"): 0}
WATCH_CALLS = {("watch.py", "_report", "method"): 0, ("watch.py", "WatchProblem", "function"): 0}
#: keywords whose literal value is a call-error code wherever they appear
CALL_ERROR_KEYWORDS = frozenset({"code", "error_code"})


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text("utf-8"), str(path))


def _literals(node: ast.expr | None) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.IfExp):
        yield from _literals(node.body)
        yield from _literals(node.orelse)
    elif isinstance(node, ast.BoolOp):  # code or "tool-failed"
        for value in node.values:
            yield from _literals(value)


def _called(node: ast.Call) -> tuple[str, str] | None:
    if isinstance(node.func, ast.Name):
        return node.func.id, "function"
    if isinstance(node.func, ast.Attribute):
        return node.func.attr, "method"
    return None


def emitted(table: dict[tuple[str, str, str], int], *, keywords: frozenset[str] = frozenset()) -> dict[str, set[str]]:
    """code -> {"file:line", ...} for every call in ``table`` (and every ``keyword=`` literal)."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = _tree(path)
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            codes: list[str] = []
            called = _called(node)
            if called is not None:
                index = table.get((path.name, *called), table.get(("*", *called)))
                if index is not None:
                    arg = node.args[index] if len(node.args) > index else None
                    arg = arg or next((k.value for k in node.keywords if k.arg == "code"), None)
                    codes += _literals(arg)
            for kw in node.keywords:
                if kw.arg in keywords:
                    codes += _literals(kw.value)
            for code in codes:
                found.setdefault(code, set()).add(f"{rel}:{node.lineno}")
    return found


def assigned_codes(file: str) -> set[str]:
    """Literals assigned to a variable named ``code`` in one module: ``code = "a" if c else "b"``
    and ``code, why = "a", "..."``."""
    tree = _tree(PACKAGE / file)
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == "code":
                out.update(_literals(node.value))
            elif (
                isinstance(target, ast.Tuple)
                and target.elts
                and isinstance(target.elts[0], ast.Name)
                and target.elts[0].id == "code"
                and isinstance(node.value, ast.Tuple)
            ):
                out.update(_literals(node.value.elts[0]))
    return out


def returned_codes(file: str, function: str) -> set[str]:
    """First literals of the ``(code, message)`` tuples that one function returns."""
    tree = _tree(PACKAGE / file)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Tuple) and inner.value.elts:
                    out.update(_literals(inner.value.elts[0]))
    return out
