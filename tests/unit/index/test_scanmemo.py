"""The scan memo (tooldir.read.scanmemo): the library's rules it restates stay equal to the library's,
only the scan command reads it, a hit imports no heavy dependency, and a memo file that does not
add up is never used."""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tooldir
import tooldir.read.index as index_mod
from tooldir.model import Source
from tooldir.policy import config_home, default_policy_path
from tooldir.read import scanmemo
from tooldir.run.audit import AUDIT_FILE
from tooldir.snapshot.loader import PROJECT_PARTS, make_config
from tooldir.state import AUDIT_HEAD, default_state_dir

PACKAGE = Path(tooldir.__file__).resolve().parent


def test_the_restated_constants_equal_the_librarys() -> None:
    assert scanmemo.RACY_NS == index_mod.RACY_NS
    assert scanmemo.INDEX_DIR == index_mod.INDEX_DIR
    assert scanmemo.ENV_DISABLE[0] == index_mod.ENV_DISABLE
    assert scanmemo.PROJECT_PARTS == PROJECT_PARTS
    assert {AUDIT_FILE, AUDIT_HEAD} == scanmemo.STATE_IGNORED


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"XDG_CONFIG_HOME": "/srv/cfg", "XDG_STATE_HOME": "/srv/state"},
        {"XDG_CONFIG_HOME": "relative/cfg", "XDG_STATE_HOME": "relative"},
        {"TOOLDIR_STATE_DIR": "/srv/explicit"},
        {"TOOLDIR_STATE_DIR": "~/state-here"},
    ],
)
def test_the_request_resolves_roots_state_and_policy_as_the_library_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]
) -> None:
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "TOOLDIR_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(tmp_path)
    for users in (None, ["user", str(tmp_path / "other")]):
        req = scanmemo.request(
            fmt="json", strict=False, project="project", user_dirs=users, policy=None, state=None, options={}
        )
        assert req is not None
        config = make_config(project="project", user_dirs=users)
        assert [(str(r.source), r.anchor, r.parts) for r in config.roots] == [
            (r.source, r.anchor, r.parts) for r in req.roots
        ]
        assert req.state == str(config.state_dir) == str(default_state_dir())
        assert req.policy == str(default_policy_path())
        assert req.config == os.path.join(config_home(), "tooldir")
        for root in config.roots:
            assert scanmemo.index_file(req.state, str(root.source), root.path) == str(
                index_mod.index_path(config.state_dir, root)
            )


def test_a_relative_state_dir_or_a_missing_project_is_left_to_the_normal_path(tmp_path: Path) -> None:
    common = {"fmt": "json", "strict": False, "user_dirs": None, "policy": None, "options": {}}
    assert scanmemo.request(project=str(tmp_path), state="relative/state", **common) is None  # type: ignore[arg-type]
    assert scanmemo.request(project=str(tmp_path / "missing"), state=None, **common) is None  # type: ignore[arg-type]


def test_the_code_digest_covers_every_file_but_caches_and_drill_scenarios(tmp_path: Path) -> None:
    copy = tmp_path / "tooldir"
    (copy / "_cli").mkdir(parents=True)
    (copy / "_cli" / "inspect.py").write_text("x = 1\n")
    (copy / "_data" / "policies").mkdir(parents=True)
    (copy / "_data" / "policies" / "strict.toml").write_text("")
    base = scanmemo.code_digest(str(copy))
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "x.pyc").write_bytes(b"cache")
    (copy / "_data" / "scenarios" / "fs-x").mkdir(parents=True)
    (copy / "_data" / "scenarios" / "fs-x" / "scenario.toml").write_text("")
    assert scanmemo.code_digest(str(copy)) == base
    (copy / "_cli" / "inspect.py").write_text("x = 2\n")  # a CLI module: not on the load path, still the output's
    assert scanmemo.code_digest(str(copy)) != base
    (copy / "_cli" / "inspect.py").write_text("x = 1\n")
    (copy / "_data" / "policies" / "strict.toml").write_text("[sources.user]\n")
    assert scanmemo.code_digest(str(copy)) != base


def test_only_the_scan_command_and_the_drill_forger_import_the_memo() -> None:
    """Loader, Registry, run, serve, watch, list and show never read a memo."""
    importers = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module or ''}.{a.name}" for a in node.names] + [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.split(".")[-1] == "scanmemo" or n.endswith(".scanmemo") for n in names):
                importers.add(path.relative_to(PACKAGE).as_posix())
    assert importers <= {"_cli/inspect.py", "drill/execute.py", "read/scanmemo.py"}
    assert "_cli/inspect.py" in importers


def test_the_memo_module_imports_only_the_standard_library() -> None:
    code = (
        "import sys, json; before = set(sys.modules); import tooldir.read.scanmemo; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(done.stdout)
    ours = {m for m in loaded if m.startswith("tooldir")}
    # only stdlib-only modules of ours (the shared small-file reader among them)
    assert ours <= {
        "tooldir",
        "tooldir._internal.safepath",
        "tooldir.read",  # the stage package (nothing in its __init__)
        "tooldir.read.scanmemo",
        "tooldir._internal",
        "tooldir._internal.smallfile",
        "tooldir._internal.ownership",  # the private read's ownership rule: stdlib only too (grp, pwd)
    }
    assert not {m.split(".")[0] for m in loaded} & {"pydantic", "pydantic_core", "jsonschema_rs", "rich", "tomllib"}


def _tree(tmp_path: Path) -> tuple[scanmemo.Request, str]:
    user = tmp_path / "user"
    (user / "pkg").mkdir(parents=True)
    (user / "pkg" / "schema.json").write_text("{}")
    (tmp_path / "project").mkdir()
    req = scanmemo.request(
        fmt="json",
        strict=False,
        project=str(tmp_path / "project"),
        user_dirs=[str(user)],
        policy=None,
        state=str(tmp_path / "state"),
        options={},
    )
    assert req is not None
    return req, str(user)


def test_the_table_records_every_file_and_the_absence_of_the_project_root(tmp_path: Path) -> None:
    req, user = _tree(tmp_path)
    table = scanmemo.record(req, [])
    assert table is not None
    paths = {line[1 : line.rindex("\0")]: line.rpartition("\0")[2] for line in table.lines}
    assert paths[f"{user}/pkg/schema.json"] != scanmemo.ABSENT
    assert paths[str(tmp_path / "project" / ".tooldir")] == scanmemo.ABSENT
    assert paths[str(tmp_path / "state")] == scanmemo.ABSENT
    assert {"/etc/passwd", "/etc/group"} <= set(paths)  # who shares a group decides unsafe-permissions
    assert scanmemo.unchanged(table.text())
    os.chmod(f"{user}/pkg/schema.json", 0o600)
    assert not scanmemo.unchanged(table.text())


def test_a_project_root_with_a_folder_is_never_clean(tmp_path: Path) -> None:
    req, _ = _tree(tmp_path)
    tools = tmp_path / "project" / ".tooldir" / "tools"
    tools.mkdir(parents=True)
    (tools / "stray.txt").write_text("")
    table = scanmemo.record(req, [])
    assert table is not None and scanmemo.project_clean(table.lines, req.roots)
    (tools / "pkg").mkdir()
    table = scanmemo.record(req, [])
    assert table is not None and not scanmemo.project_clean(table.lines, req.roots)


def _memo(tmp_path: Path) -> tuple[scanmemo.Request, str, bytes]:
    req, _ = _tree(tmp_path)
    Path(req.path).parent.mkdir(parents=True, mode=0o700)
    table = scanmemo.record(req, [])
    assert table is not None
    data = scanmemo.encode("k" * 64, table, table.newest_ns + 10 * scanmemo.RACY_NS, text="out\n", status=1, req=req)
    return req, "k" * 64, data


def test_a_memo_decodes_to_what_was_encoded(tmp_path: Path) -> None:
    _, key, data = _memo(tmp_path)
    memo = scanmemo.decode(data)
    assert memo is not None and (memo.key, memo.text, memo.status) == (key, "out\n", 1)


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-1],
        lambda d: d + b"x",
        lambda d: d.replace(b"out\n", b"bad\n"),
        lambda d: d.replace(b'"status":1', b'"status":"1"'),
        lambda d: d.replace(scanmemo.MAGIC, b"tooldir-scanmemo-v0\n"),
        lambda d: d.split(b"\n", 1)[0],
        lambda d: b"",
    ],
    ids=["truncated", "overlong", "output-changed", "status-not-int", "other-format", "no-header-end", "empty"],
)
def test_a_memo_that_does_not_add_up_decodes_to_nothing(tmp_path: Path, damage: object) -> None:
    _, _, data = _memo(tmp_path)
    assert scanmemo.decode(damage(data)) is None  # type: ignore[operator]


def test_a_memo_file_others_may_write_or_a_link_is_never_read(tmp_path: Path) -> None:
    req, key, data = _memo(tmp_path)
    path = Path(req.path)
    path.write_bytes(data)
    os.chmod(path, 0o600)
    assert scanmemo.lookup(req, key) == scanmemo.Hit("out\n", 1)
    assert scanmemo.lookup(req, "other") is None
    os.chmod(path, 0o666)  # noqa: S103 -- the point
    assert scanmemo.lookup(req, key) is None
    os.chmod(path, 0o600)
    os.chmod(path.parent, 0o777)  # noqa: S103
    assert scanmemo.lookup(req, key) is None
    os.chmod(path.parent, 0o700)
    shutil.move(path, tmp_path / "elsewhere")
    path.symlink_to(tmp_path / "elsewhere")
    assert scanmemo.read(str(path)) is None
    assert stat.S_ISLNK(path.lstat().st_mode)


def test_a_memo_recorded_within_the_racy_granularity_is_never_used(tmp_path: Path) -> None:
    req, _ = _tree(tmp_path)
    Path(req.path).parent.mkdir(parents=True, mode=0o700)
    table = scanmemo.record(req, [])
    assert table is not None
    path = Path(req.path)
    for after, usable in ((scanmemo.RACY_NS + 1, True), (scanmemo.RACY_NS - 1, False)):
        path.write_bytes(scanmemo.encode("k", table, table.newest_ns + after, text="x", status=0, req=req))
        os.chmod(path, 0o600)
        assert (scanmemo.lookup(req, "k") is not None) is usable
    state = scanmemo.record_state(req, [])
    pending = scanmemo.Pending(req, "k", [], table.newest_ns + scanmemo.RACY_NS + 1, state)
    assert scanmemo.save(pending, "x", 0) is True
    pending = scanmemo.Pending(req, "k", [], table.newest_ns + scanmemo.RACY_NS - 1, state)
    assert scanmemo.save(pending, "y", 0) is False


def test_memoizable_refuses_trust_gated_server_signed_and_unstable_scans() -> None:
    class Trust:
        def __init__(self, method: str) -> None:
            self.method = method

    class Tool:
        def __init__(self, source: str, method: str = "none-required", server: object = None) -> None:
            self.source, self.trust, self.server, self.upstream = Source(source), Trust(method), server, None

    class Diag:
        def __init__(self, code: str) -> None:
            self.code = code

    required = {"user": False, "project": True}
    ok = {"diagnostics": [Diag("duplicate-key")], "trust_required": required, "read_only": False}
    assert scanmemo.memoizable(tools=[Tool("user")], **ok)  # type: ignore[arg-type]
    assert not scanmemo.memoizable(tools=[Tool("project")], **ok)  # type: ignore[arg-type]
    assert not scanmemo.memoizable(tools=[Tool("user", server=object())], **ok)  # type: ignore[arg-type]
    assert not scanmemo.memoizable(tools=[Tool("user", "signed:alice")], **ok)  # type: ignore[arg-type]
    assert not scanmemo.memoizable(
        tools=[Tool("user")], diagnostics=[Diag("index-ignored")], trust_required=required, read_only=False
    )
    assert not scanmemo.memoizable(tools=[], diagnostics=[], trust_required=required, read_only=True)


RUNNER = """
import json, os, sys, time
import tooldir.read.scanmemo as memo
memo.RACY_NS = 50_000_000
# other tests add and delete users while this one runs, and the accounts files are inputs of the
# memo (their stats): this test's own copies stand in for them, so only its own runs change its key
memo.ACCOUNTS = tuple(os.environ["TEST_ACCOUNTS"].split(os.pathsep))
if sys.argv[1] == "warm":  # (the environment is part of the key: the mode comes in argv)
    import tooldir.read.index as index
    index.RACY_NS = 50_000_000
from tooldir._cli import main
code = main(sys.argv[2:])
with open(os.environ["MODULES_OUT"], "w") as fh:
    json.dump(sorted({name.split(".")[0] for name in sys.modules}), fh)
sys.exit(code)
"""


def test_a_memo_hit_imports_no_heavy_dependency(tmp_path: Path) -> None:
    from test_startup_imports import HEAVY

    user = tmp_path / "user"
    (user / "pkg").mkdir(parents=True)
    (user / "pkg" / "schema.json").write_text("{}")
    argv = ["scan", "--json", "--user-dir", str(user), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s")]
    out = tmp_path / "modules.json"
    time.sleep(0.1)
    outputs = []
    accounts = [tmp_path / "passwd", tmp_path / "group"]
    for copy in accounts:
        shutil.copy2(Path("/etc") / copy.name, copy)
    env = {**os.environ, "MODULES_OUT": str(out), "TEST_ACCOUNTS": os.pathsep.join(map(str, accounts))}
    for mode in ("warm", "warm", "warm", "hit"):
        # in the test's own folder: sys.path[0] ("") is part of the memo's key, and the checkout
        # other tests run in is no folder of this test's
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, mode, *argv], capture_output=True, env=env, check=False, cwd=tmp_path
        )
        outputs.append(done.stdout)
        time.sleep(0.1)
    assert list((tmp_path / "s" / "index").glob("scan-*.memo"))
    assert outputs[-1] == outputs[-2]
    assert set(json.loads(out.read_text())) & HEAVY == set()
