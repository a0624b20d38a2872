"""Issue 17 item 5: ``tooldir serve --print-config CLIENT`` prints what each client's config file
expects (JSON with ``mcpServers`` / vscode's ``servers``, TOML ``[mcp_servers.NAME]`` for codex),
naming the installed ``tooldir`` by its absolute path; the snippet starts a working server."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from plaininstall import PlainInstall
from toolkit import make_tool

from tooldir.mcp_config import client_config


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
        "print([m for m in ('mcp', 'uvicorn', 'starlette', 'tooldir.mcp_http') if m in sys.modules], file=sys.stderr)"
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
