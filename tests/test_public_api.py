"""The public surface is exactly ``tooldir.__all__``: adding a name is an API decision."""

from __future__ import annotations

import subprocess
import sys
import types

import tooldir
import tooldir.run.registry


def test_all_lists_exactly_the_public_names_of_the_package() -> None:
    public = {
        name
        for name in dir(tooldir)
        if not name.startswith("_") and not isinstance(getattr(tooldir, name), types.ModuleType)
    }
    assert public == set(tooldir.__all__)
    assert tooldir.__all__ == sorted(tooldir.__all__, key=lambda n: (n[0].islower(), n))


def test_importing_tooldir_keeps_the_tokenizer_and_the_mcp_sdk_off_the_load_path() -> None:
    code = "import sys, tooldir; print(sorted(m for m in ('bpe_openai', 'mcp') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_host_can_name_the_permission_check_it_passes_to_the_registry_from_the_public_api() -> None:
    # Registry(permissions=...) takes a PermissionCheck, whose check() gets a PermissionRequest
    import inspect

    from tooldir.run.permissions import PermissionCheck, PermissionRequest

    assert tooldir.PermissionCheck is PermissionCheck and tooldir.PermissionRequest is PermissionRequest
    annotation = inspect.signature(tooldir.run.registry.Registry).parameters["permissions"].annotation
    assert "PermissionCheck" in str(annotation)


def test_the_grant_a_public_tool_record_carries_is_public_but_cannot_be_made_by_a_host() -> None:
    import pytest

    assert tooldir.ToolRecord.__dataclass_fields__["grant"].type in ("Grant | None", tooldir.Grant | None)
    with pytest.raises(TypeError):
        tooldir.Grant("x", tooldir.Source.USER, None, "approved")


def test_the_type_checkers_re_exports_are_exactly_the_lazy_names_from_the_same_modules() -> None:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(tooldir.__file__).read_text("utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    exported = {
        alias.name: (node.module or "")
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name  # "X as X": an explicit re-export
    }
    assert exported == tooldir._LAZY
