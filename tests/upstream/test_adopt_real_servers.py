"""Issue 27 item 3: MCP servers nobody here wrote, fetched from the registries by ``tooldir adopt``
itself (no vendored copy): ``mcp-server-time`` from PyPI out of a Claude Code ``.mcp.json`` and
``@modelcontextprotocol/server-everything`` from npm out of a VS Code ``.vscode/mcp.json``. Each is
adopted (pending, nothing started), allowed (started sandboxed, every definition pinned), listed
through ``tooldir serve`` by the official SDK client and called sandboxed (through serve and through
``tooldir run``); both by an unprivileged user too. A
registry that cannot be reached fails the test: adopt reports ``adopt-install-failed``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from shared_helpers import require_sandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
from mcp_harness import serve


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    require_sandbox()


def tooldir(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tooldir", *args, "--project", str(tmp_path / "project"), "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip


def user_root() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "tools"


def write_policy(text: str = "") -> None:
    """The user's policy: every tool listed at once (no deferral), so tools/list shows the adopted ones."""
    policy = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text('[defer]\nmode = "off"\n' + text)


def adopt_and_allow(tmp_path: Path, config: Path, package: str) -> dict[str, object]:
    adopted = tooldir(tmp_path, "adopt", "--from", str(config), "--json")
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    (server,) = json.loads(adopted.stdout)["servers"]
    assert server["status"] == "adopted", server
    assert (user_root() / package / "server.json").is_file()
    listed = tooldir(tmp_path, "list", "--all", "--json")
    pending = {t["name"]: t["status"] for t in json.loads(listed.stdout)["tools"]}
    assert pending[package] == "pending"  # nothing started, nothing offered before `tooldir allow`
    assert not [n for n in pending if n.startswith(package + "__")]
    again = tooldir(tmp_path, "adopt", "--from", str(config), "--json")
    assert json.loads(again.stdout)["servers"][0]["status"] == "already-adopted"
    allowed = tooldir(tmp_path, "allow", package, "--yes")
    assert allowed.returncode == 0, allowed.stdout[-2000:] + allowed.stderr
    assert f"of {package}" in allowed.stdout and "pinned" in allowed.stdout
    return server


def test_a_pypi_server_adopted_from_claude_code_is_allowed_listed_through_serve_and_called_sandboxed(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    config = project / ".mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}))
    write_policy()
    server = adopt_and_allow(tmp_path, config, "time")
    assert server["requested"] == "mcp-server-time" and server["version"]
    manifest = json.loads((user_root() / "time" / "server.json").read_text())
    assert manifest["server"]["command"] == ["python3", "launch.py"] and manifest["server"]["network"] is False

    async def check() -> None:
        async with serve(tmp_path, project=project, state_dir=tmp_path / "state") as served:
            tools = await served.tools()
            assert {"time__get_current_time", "time__convert_time"} <= set(tools)
            called = await served.call("time__get_current_time", {"timezone": "Europe/Paris"})
            assert not called.is_error, called.content
            assert "Europe/Paris" in called.content[0].text  # type: ignore[union-attr]

    anyio.run(check)
    # and through `tooldir run`, sandboxed as well
    ran = tooldir(tmp_path, "run", "time__get_current_time", "--input", '{"timezone": "Europe/Paris"}', "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Europe/Paris" in ran.stdout


def test_an_npm_server_adopted_from_vscode_is_allowed_listed_through_serve_and_called_sandboxed(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / ".vscode").mkdir(parents=True)
    config = project / ".vscode" / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "servers": {
                    "everything": {
                        "type": "stdio",
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-everything"],
                    }
                }
            }
        )
    )
    # node's V8 reserves more address space than the default slack above memory_mb
    write_policy("\n[sandbox]\naddress_space_slack_mb = 4096\n")
    server = adopt_and_allow(tmp_path, config, "everything")
    assert server["requested"] == "@modelcontextprotocol/server-everything" and server["version"]

    async def check() -> None:
        async with serve(tmp_path, project=project, state_dir=tmp_path / "state") as served:
            tools = await served.tools()
            assert "everything__echo" in tools, sorted(tools)
            called = await served.call("everything__echo", {"message": "served and sandboxed"})
            assert not called.is_error, called.content
            assert "Echo: served and sandboxed" in called.content[0].text  # type: ignore[union-attr]

    anyio.run(check)
    # and through `tooldir run`, sandboxed as well
    ran = tooldir(tmp_path, "run", "everything__echo", "--input", '{"message": "adopted and sandboxed"}')
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Echo: adopted and sandboxed" in ran.stdout


# what an unprivileged user adopts: (client config file, its text, package, tool, input, expected, policy)
AS_USER = {
    "pypi-from-claude-code": (
        ".mcp.json",
        {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}},
        "time",
        "time__get_current_time",
        {"timezone": "Asia/Tokyo"},
        "Asia/Tokyo",
        "",
    ),
    "npm-from-vscode": (
        ".vscode/mcp.json",
        {"servers": {"everything": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]}}},
        "everything",
        "everything__echo",
        {"message": "adopted by a user"},
        "Echo: adopted by a user",
        "[sandbox]\naddress_space_slack_mb = 4096\n",  # node's V8 reserves more address space
    ),
}  # fmt: skip


TLS_TRUST = ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT")


@pytest.mark.parametrize("case", sorted(AS_USER))
def test_a_real_server_is_adopted_allowed_and_called_by_an_unprivileged_user_too(case: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the tests above ran as this user")
    import pwd
    import shutil
    import tempfile

    import unprivileged

    config_file, config, package, tool, arguments, expected, policy = AS_USER[case]
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-adopt-user-", dir="/tmp"))
    script = (
        "import json, os, pathlib, subprocess, sys\n"
        "home = pathlib.Path(os.environ['HOME']); project = home / 'project'; project.mkdir(parents=True)\n"
        f"config = project / {config_file!r}; config.parent.mkdir(parents=True, exist_ok=True)\n"
        f"config.write_text(json.dumps({config!r}))\n"
        "policy = home / '.config' / 'tooldir' / 'policy.toml'; policy.parent.mkdir(parents=True, exist_ok=True)\n"
        f"policy.write_text({policy!r})\n"
        "def tooldir(*args):\n"
        "    done = subprocess.run([sys.executable, '-m', 'tooldir', *args, '--project', str(project)], capture_output=True, text=True)\n"
        "    print('$ tooldir', *args, '->', done.returncode, done.stdout[-400:], done.stderr[-1500:], flush=True)\n"
        "    return done\n"
        "assert tooldir('adopt').returncode == 0\n"
        f"assert tooldir('allow', {package!r}, '--yes').returncode == 0\n"
        f"ran = tooldir('run', {tool!r}, '--input', json.dumps({arguments!r}), '--json')\n"
        f"assert ran.returncode == 0 and {expected!r} in ran.stdout\n"
        "print('ADOPTED-AND-CALLED')\n"
    )
    try:
        with unprivileged.throwaway_user() as user:
            uid = pwd.getpwnam(user).pw_uid
            os.chmod(workdir, 0o700)
            os.chown(workdir, uid, uid)
            argv = [sys.executable, "-c", script]
            # the machine's TLS trust, as a login of that user has it: node reads its extra
            # certificate authorities only from NODE_EXTRA_CA_CERTS (without it, npm retries a
            # self-signed chain for ten minutes), pip from PIP_CERT or its config
            done = unprivileged.run_as_user(
                user, argv, workdir, expose=unprivileged.python_trees(), timeout=900, keep_env=TLS_TRUST
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = done.stdout.decode()
    assert "ADOPTED-AND-CALLED" in out, out[-4000:] + done.stderr.decode()[-3000:]
    assert done.returncode == 0
