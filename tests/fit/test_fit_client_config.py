"""Issue 17 item 5: ``tooldir serve --print-config CLIENT`` prints what each client's config file
expects (JSON with ``mcpServers`` / vscode's ``servers``, TOML ``[mcp_servers.NAME]`` for codex),
naming the installed ``tooldir`` by its absolute path; the snippet starts a working server."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from plaininstall import PlainInstall
from toolkit import make_tool

from tooldir.mcp.clients import client_config


def _server_entry(client: str, text: str) -> dict[str, Any]:
    if client == "codex":
        return dict(tomllib.loads(text)["mcp_servers"]["tooldir"])
    doc = json.loads(text)
    key = "servers" if client == "vscode" else "mcpServers"
    assert list(doc) == [key]
    return dict(doc[key]["tooldir"])


@pytest.mark.parametrize("client", ["claude-code", "cursor", "codex", "vscode"])
def test_print_config_prints_a_parsable_snippet_naming_the_installed_tooldir(
    plain: PlainInstall, elsewhere: Path, client: str
) -> None:
    (elsewhere / "repo").mkdir()
    done = plain.run([plain.tooldir, "serve", "--print-config", client, "--project", "repo"], elsewhere)
    assert done.returncode == 0, done.stderr
    entry = _server_entry(client, done.stdout)
    assert entry["command"] == plain.tooldir and Path(entry["command"]).is_absolute()
    assert entry["args"] == ["serve", "--project", str((elsewhere / "repo").resolve())]
    if client in ("claude-code", "vscode"):
        assert entry["type"] == "stdio"


def test_print_config_refuses_a_project_that_is_not_a_directory(plain: PlainInstall, elsewhere: Path) -> None:
    done = plain.run([plain.tooldir, "serve", "--print-config", "codex", "--project", "nowhere"], elsewhere)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "tooldir serve: --project nowhere: not a directory\n"


def test_print_config_loads_neither_the_mcp_sdk_nor_the_http_stack(plain: PlainInstall, elsewhere: Path) -> None:
    code = (
        "import sys; from tooldir._cli import main; main(['serve', '--print-config', 'cursor']); "
        "print([m for m in ('mcp', 'uvicorn', 'starlette', 'tooldir.mcp.http') if m in sys.modules], file=sys.stderr)"
    )
    done = plain.run([str(plain.bin / "python"), "-c", code], elsewhere)
    assert done.stderr == "[]\n"


def test_the_printed_command_and_args_start_a_server_the_sdk_can_list(plain: PlainInstall, elsewhere: Path) -> None:
    user = elsewhere / "tools"
    make_tool(user, "echo_text")
    done = plain.run([plain.tooldir, "serve", "--print-config", "cursor", "--user-dir", "tools"], elsewhere)
    entry = _server_entry("cursor", done.stdout)
    assert "--user-dir" in entry["args"] and str(user.resolve()) in entry["args"]

    async def names() -> list[str]:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=plain.env, cwd="/")
        async with Client(stdio_client(params), mode="legacy") as client:
            with anyio.fail_after(60):
                return [t.name for t in (await client.list_tools()).tools]

    assert "echo_text" in anyio.run(names)


def test_a_codex_snippet_escapes_quotes_backslashes_and_control_characters() -> None:
    text = client_config("codex", '/opt/a "b"\\c\x01', ["serve", "--project", "/p q"])
    assert tomllib.loads(text)["mcp_servers"]["tooldir"] == {
        "command": '/opt/a "b"\\c\x01',
        "args": ["serve", "--project", "/p q"],
    }


@pytest.mark.parametrize("client", ["claude-code", "cursor", "codex", "vscode"])
def test_install_config_merges_into_the_user_file_keeps_the_rest_and_a_second_run_changes_nothing(
    plain: PlainInstall, elsewhere: Path, client: str
) -> None:
    (elsewhere / "repo").mkdir()
    target = elsewhere / ("config.toml" if client == "codex" else "mcp.json")
    if client == "codex":
        before = '# mine\nmodel = "o3"\n\n[mcp_servers.other]\ncommand = "other"  # keep me\n'
    else:
        key = "servers" if client == "vscode" else "mcpServers"
        before = json.dumps({"theme": "dark", key: {"other": {"command": "other"}}}, indent=2) + "\n"
    target.write_text(before)
    argv = [plain.tooldir, "serve", "--install-config", client, "--config-file", str(target), "--project", "repo"]
    first = plain.run(argv, elsewhere)
    assert first.returncode == 0, first.stderr
    assert "tooldir entry written" in first.stdout
    assert (elsewhere / (target.name + ".bak")).read_text() == before
    written = target.read_text()
    entry = _server_entry(client, written) if client == "codex" else None
    if client == "codex":
        assert written.startswith(before)  # every line of the user's kept, byte for byte
        doc = tomllib.loads(written)
        assert doc["mcp_servers"]["other"] == {"command": "other"} and doc["model"] == "o3"
    else:
        doc = json.loads(written)
        assert doc["theme"] == "dark" and doc[key]["other"] == {"command": "other"}
        entry = dict(doc[key]["tooldir"])
    assert entry is not None and entry["args"] == ["serve", "--project", str((elsewhere / "repo").resolve())]
    second = plain.run(argv, elsewhere)  # run twice: the file stays valid and the same
    assert second.returncode == 0, second.stderr
    assert "already there; nothing changed" in second.stdout
    assert target.read_text() == written


def test_install_config_replaces_an_older_codex_entry_in_place(plain: PlainInstall, elsewhere: Path) -> None:
    target = elsewhere / "config.toml"
    target.write_text(
        '[mcp_servers.tooldir]\ncommand = "/old/tooldir"\nargs = ["serve"]\n\n[profiles.x]\nmodel = "m"\n'
    )
    done = plain.run(
        [plain.tooldir, "serve", "--install-config", "codex", "--config-file", str(target), "--follow-workspace"],
        elsewhere,
    )
    assert done.returncode == 0, done.stderr
    doc = tomllib.loads(target.read_text())
    assert doc["mcp_servers"]["tooldir"] == {"command": plain.tooldir, "args": ["serve"]}  # the cwd is the project
    assert doc["profiles"] == {"x": {"model": "m"}}
    assert target.read_text().count("[mcp_servers.tooldir]") == 1


@pytest.mark.parametrize(
    ("client", "project_args"),
    [("vscode", ["--project", "${workspaceFolder}"]), ("cursor", ["--project", "${workspaceFolder}"]), ("codex", [])],
)
def test_follow_workspace_names_the_clients_workspace_instead_of_a_fixed_project(
    plain: PlainInstall, elsewhere: Path, client: str, project_args: list[str]
) -> None:
    done = plain.run([plain.tooldir, "serve", "--print-config", client, "--follow-workspace"], elsewhere)
    assert done.returncode == 0, done.stderr
    assert _server_entry(client, done.stdout)["args"] == ["serve", *project_args]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"mcpServers": {} // a comment\n}', "not plain JSON"),
        ("[1, 2]", "expected a JSON object at the top"),
        ('{"mcpServers": []}', "'mcpServers' is not an object"),
    ],
)
def test_install_config_refuses_a_file_it_cannot_merge_safely_and_changes_nothing(
    plain: PlainInstall, elsewhere: Path, content: str, message: str
) -> None:
    target = elsewhere / "mcp.json"
    target.write_text(content)
    argv = [plain.tooldir, "serve", "--install-config", "cursor", "--config-file", str(target)]
    done = plain.run(argv, elsewhere)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert target.read_text() == content and not (elsewhere / "mcp.json.bak").exists()


def test_install_config_refuses_invalid_toml_and_a_fifo(plain: PlainInstall, elsewhere: Path) -> None:
    bad = elsewhere / "config.toml"
    bad.write_text("[mcp_servers\n")
    argv = [plain.tooldir, "serve", "--install-config", "codex", "--config-file"]
    done = plain.run([*argv, str(bad)], elsewhere)
    assert done.returncode == 2 and "not valid TOML" in done.stderr
    fifo = elsewhere / "fifo.toml"
    os.mkfifo(fifo)
    done = plain.run([*argv, str(fifo)], elsewhere, timeout=60)  # never blocks on it
    assert done.returncode == 2 and "not a regular file" in done.stderr
