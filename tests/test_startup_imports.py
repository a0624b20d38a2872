"""Start-up (issue 14 item 1): which modules a process loads, a contract on modules, not a timing.

``import tooldir``, ``tooldir --help`` and ``tooldir --version`` load none of the heavy
dependencies; each command loads only what it needs (``scan --json`` no MCP SDK, event loop,
watcher or rich; ``run`` no MCP SDK). How long start-up takes is measured by
benchmarks/bench_startup.py, never here.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from toolkit import make_tool

import tooldir

#: Heavy third-party packages (top-level names) that ``import tooldir`` and ``--help`` never load.
HEAVY = frozenset(
    {
        "jsonschema",
        "jsonschema_rs",
        "rich",
        "mcp",
        "mcp_types",
        "anyio",
        "watchdog",
        "cryptography",
        "nacl",
        "bpe_openai",
        "numpy",
        "pydantic",
        "pydantic_core",
    }
)

#: Runs ``tooldir ARGV...`` (or imports tooldir, for no ARGV) and writes the top-level names of
#: every loaded module to the file named by $MODULES_OUT, whatever the command's exit.
RUNNER = """
import json, os, sys
try:
    if sys.argv[1:]:
        from tooldir._cli import main
        code = main(sys.argv[1:])
    else:
        import tooldir
        code = 0
except SystemExit as exc:
    code = exc.code
finally:
    with open(os.environ["MODULES_OUT"], "w") as fh:
        full = os.environ.get("MODULES_FULL") == "1"
        json.dump(sorted({name if full else name.split(".")[0] for name in sys.modules}), fh)
sys.exit(code)
"""


def loaded_by(tmp_path: Path, *argv: str, full: bool = False) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """Top-level names of the modules loaded (``full``: every module's dotted name)."""
    out = tmp_path / "modules.json"
    env = {**os.environ, "MODULES_OUT": str(out), "MODULES_FULL": "1" if full else "0"}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert out.exists(), done.stderr
    return set(json.loads(out.read_text())), done


def test_import_tooldir_loads_no_heavy_dependency(tmp_path: Path) -> None:
    modules, done = loaded_by(tmp_path)
    assert done.returncode == 0, done.stderr
    assert modules & HEAVY == set()


def test_tooldir_help_loads_no_heavy_dependency_and_still_lists_every_command(tmp_path: Path) -> None:
    from tooldir._cli import COMMANDS

    modules, done = loaded_by(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert modules & HEAVY == set()
    for command in COMMANDS:
        assert command in done.stdout


def test_tooldir_version_prints_the_installed_version_and_loads_no_heavy_dependency(tmp_path: Path) -> None:
    from importlib.metadata import version

    modules, done = loaded_by(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tooldir {version('tooldir')}\n"
    assert modules & HEAVY == set()


def test_a_command_help_loads_no_heavy_dependency(tmp_path: Path) -> None:
    modules, done = loaded_by(tmp_path, "serve", "--help")
    assert done.returncode == 0, done.stderr
    assert "--turn-idle" in done.stdout
    assert modules & HEAVY == set()


def test_scan_json_loads_neither_the_mcp_sdk_nor_the_event_loop_nor_the_watcher_nor_rich(
    tmp_path: Path, root: Path
) -> None:
    make_tool(root, "good_tool")
    args = ("scan", "--json", "--user-dir", str(root), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s"))
    modules, done = loaded_by(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert [t["name"] for t in json.loads(done.stdout)["tools"]] == ["good_tool"]
    assert (
        modules & {"mcp", "mcp_types", "anyio", "watchdog", "rich", "numpy", "nacl"} == set()
    )  # nacl: the helper only


def test_scan_json_loads_neither_the_session_nor_the_registry_nor_the_sandbox_nor_search(
    tmp_path: Path, root: Path
) -> None:
    make_tool(root, "good_tool")
    args = ("scan", "--json", "--user-dir", str(root), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s"))
    modules, done = loaded_by(tmp_path, *args, full=True)
    assert done.returncode == 0, done.stderr
    assert [t["deferred"] for t in json.loads(done.stdout)["tools"]] == [False]
    assert "tooldir.deferred.staticplan" in modules  # the plan is still decided
    unneeded = {
        "tooldir.deferred.session",
        "tooldir.run.registry",
        "tooldir.sandbox",
        "tooldir.run.audit",
        "tooldir.deferred.search",
    }
    assert modules & unneeded == set()


def test_scan_json_of_unsigned_tools_loads_no_signature_crypto(tmp_path: Path, root: Path) -> None:
    # cryptography (and its bcrypt/cffi backends) is needed only when a signature is checked
    make_tool(root, "good_tool")
    args = ("scan", "--json", "--user-dir", str(root), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s"))
    modules, done = loaded_by(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert [t["status"] for t in json.loads(done.stdout)["tools"]] == ["active"]
    assert modules & {"cryptography", "bcrypt", "_cffi_backend", "jsonschema"} == set()


def test_scan_json_loads_no_tooldir_module_it_does_not_run(tmp_path: Path, root: Path) -> None:
    make_tool(root, "good_tool")
    args = ("scan", "--json", "--user-dir", str(root), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s"))
    modules, done = loaded_by(tmp_path, *args, full=True)
    assert done.returncode == 0, done.stderr
    unneeded = {
        "tooldir.trust.keys", "tooldir.manage", "tooldir.upstream", "tooldir._cli.sarif", "tooldir.deferred.semantic",
        "tooldir.deferred.evaluate", "tooldir._cli.scaffold", "tooldir.snapshot.watch", "tooldir.mcp.server", "tooldir.drill",
    }  # fmt: skip
    assert modules & unneeded == set()


def test_a_clean_manifest_is_validated_without_compiling_the_python_injection_patterns(
    tmp_path: Path, root: Path
) -> None:
    make_tool(root, "good_tool")
    code = (
        "import sys, tooldir, tooldir.text as t;"
        f"snap = tooldir.load(project=None, user_dirs=[{str(root)!r}], state_dir={str(tmp_path / 's')!r});"
        "print([r.status.value for r in snap.tools], t.injection_patterns.cache_info().currsize)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.split() == ["['active']", "0"], done.stderr


def test_run_json_loads_neither_the_mcp_sdk_nor_the_watcher_nor_rich(tmp_path: Path, root: Path) -> None:
    make_tool(root, "good_tool")
    args = ("run", "good_tool", "--input", '{"text": "hi"}', "--json", "--user-dir", str(root))
    args += ("--project", str(tmp_path), "--state-dir", str(tmp_path / "s"))
    modules, done = loaded_by(tmp_path, *args)
    assert "audit_id" in json.loads(done.stdout), done.stderr  # ran, or was refused (no sandbox): a result
    assert modules & {"mcp", "mcp_types", "anyio", "watchdog", "rich"} == set()


def test_every_public_name_is_imported_lazily_from_the_module_that_defines_it() -> None:
    lazy = tooldir._LAZY
    assert set(lazy) == set(tooldir.__all__)
    for name, module in lazy.items():
        assert getattr(tooldir, name) is getattr(importlib.import_module(f"tooldir.{module}"), name)
    assert set(tooldir.__all__) <= set(dir(tooldir))


def test_an_unknown_attribute_of_the_package_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = tooldir.no_such_name  # type: ignore[attr-defined]


def test_the_cli_copies_of_library_constants_equal_the_library_values() -> None:
    from tooldir._cli import search, serve
    from tooldir.deferred import catalog, session
    from tooldir.mcp import server as mcp_server

    assert search.FORMATS == catalog.FORMATS
    assert search.MAX_TOP_K == session.MAX_TOP_K
    assert serve.DEFAULT_TURN_IDLE_S == mcp_server.DEFAULT_TURN_IDLE_S
