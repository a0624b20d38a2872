"""``tooldir adopt --dry-run`` (issue 27 item 1): the MCP server entries of Claude Code, Cursor, VS Code
and Codex configurations are read, never started, and every finding has its code, file, line and fix;
a secret's value is never printed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool

from tooldir._cli import main
from tooldir.adopt.entries import judge, parse_config, shown

GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4
URL_KEY = "urlsecret" + "9" * 12
BEARER = "bearertoken" + "x" * 12
CODEX_TOKEN = "tok_live_" + "0123456789abcdef"
DB_PASSWORD = "hunter2pass"
SECRETS = (GITHUB_TOKEN, URL_KEY, BEARER, CODEX_TOKEN, DB_PASSWORD)


@pytest.fixture
def clients(tmp_path: Path) -> dict[str, Path]:
    """Sample configurations of the four clients; every stdio command would write the canary."""
    home = Path(os.environ["HOME"])
    project = tmp_path / "project"
    (project / ".vscode").mkdir(parents=True)
    canary = tmp_path / "canary"
    (home / ".cursor").mkdir()
    (home / ".codex").mkdir()
    starts = ["-c", f"open({str(canary)!r}, 'w').write('ran')"]
    (project / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "github": {
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-github"],
                        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": GITHUB_TOKEN, "LOG": "${LOG_LEVEL}"},
                    },
                    "remote": {"type": "http", "url": f"http://mcp.example.com/mcp?api_key={URL_KEY}"},
                    "local": {"type": "http", "url": "http://127.0.0.1:8080/mcp"},
                    "pinned": {"command": "python3", "args": starts},
                }
            },
            indent=2,
        )
    )
    (home / ".claude.json").write_text(
        json.dumps(
            {"projects": {str(project): {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}}}
        )
    )
    (project / ".vscode" / "mcp.json").write_text(
        json.dumps(
            {
                "servers": {
                    "fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch@latest"]},
                    "api": {
                        "type": "http",
                        "url": "https://api.example.com/mcp",
                        "headers": {"Authorization": f"Bearer {BEARER}"},
                    },
                    "evil_tool": {"command": "node", "args": ["server.js"]},
                }
            },
            indent=2,
        )
    )
    (home / ".cursor" / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "pg": {
                        "command": "docker",
                        "args": ["run", "-i", "--rm", "mcp/postgres:latest", f"postgresql://u:{DB_PASSWORD}@db/x"],
                    }
                }
            },
            indent=2,
        )
    )
    (home / ".codex" / "config.toml").write_text(
        'model = "o3"\n\n[mcp_servers.docs]\ncommand = "/opt/bin/docs-server"\n'
        f'args = ["--token", "{CODEX_TOKEN}"]\n\n[mcp_servers.fine]\ncommand = "python3"\nargs = {json.dumps(starts)}\n'
    )
    make_tool(project / ".tooldir" / "tools", "evil_tool")
    return {"project": project, "home": home, "canary": canary}


def adopt_json(capsys: pytest.CaptureFixture[str], project: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    code = main(["adopt", "--dry-run", "--json", "--project", str(project), *extra])
    out = capsys.readouterr().out
    return code, json.loads(out), out


def where(doc: dict[str, Any]) -> set[tuple[str, str, str, int]]:
    return {(f["code"], f["server"], Path(f["file"]).name, f["line"]) for f in doc["findings"]}


def test_the_dry_run_reports_every_finding_of_the_four_clients_with_file_line_and_fix(
    clients: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, _ = adopt_json(capsys, clients["project"])
    assert code == 0
    assert doc["started"] == []
    found = where(doc)
    assert ("adopt-unpinned", "github", ".mcp.json", 7) in found
    assert ("adopt-secret", "github", ".mcp.json", 10) in found
    assert ("adopt-no-tls", "remote", ".mcp.json", 16) in found
    assert ("adopt-secret", "remote", ".mcp.json", 16) in found
    assert ("adopt-unpinned", "time", ".claude.json", 1) in found
    assert ("adopt-unpinned", "fetch", "mcp.json", 7) in found
    assert ("adopt-secret", "api", "mcp.json", 14) in found
    assert ("adopt-collision", "evil_tool", "mcp.json", 17) in found
    assert ("adopt-runtime", "pg", "mcp.json", 4) in found
    assert ("adopt-unpinned", "pg", "mcp.json", 9) in found
    assert ("adopt-secret", "pg", "mcp.json", 10) in found
    assert ("adopt-runtime", "docs", "config.toml", 4) in found
    assert ("adopt-secret", "docs", "config.toml", 5) in found
    # nothing about the servers that are fine: a loopback http server, pinned local commands
    assert not [f for f in doc["findings"] if f["server"] in {"local", "pinned", "fine"}]
    assert all(f["fix"] and f["file"] and f["line"] for f in doc["findings"])
    assert {s["client"] for s in doc["servers"]} == {"claude-code", "cursor", "vscode", "codex"}


def test_no_server_is_started_and_no_secret_value_is_printed_in_any_format(
    clients: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = [adopt_json(capsys, clients["project"])[2]]
    for fmt in ("table", "sarif"):
        assert main(["adopt", "--dry-run", "--format", fmt, "--project", str(clients["project"])]) == 0
        outputs.append(capsys.readouterr().out)
    assert not clients["canary"].exists()
    for out in outputs:
        for secret in SECRETS:
            assert secret not in out
            assert secret[4:] not in out
    assert "ghp… (44 characters)" in outputs[1]


def test_the_sarif_log_places_each_finding_on_its_file_and_line(
    clients: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["adopt", "--dry-run", "--format", "sarif", "--project", str(clients["project"])]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    placed = {
        (
            r["ruleId"],
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].rsplit("/", 1)[-1],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
        )
        for r in run["results"]
    }
    assert ("adopt-secret", ".mcp.json", 10) in placed
    assert ("adopt-secret", "config.toml", 5) in placed
    assert {"adopt-secret", "adopt-unpinned"} <= {rule["id"] for rule in run["tool"]["driver"]["rules"]}


def test_from_one_client_or_one_file_reads_only_that(
    clients: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, doc, _ = adopt_json(capsys, clients["project"], "--from", "codex")
    assert {s["name"] for s in doc["servers"]} == {"docs", "fine"}
    _, doc, _ = adopt_json(capsys, clients["project"], "--from", str(clients["project"] / ".vscode" / "mcp.json"))
    assert {s["name"] for s in doc["servers"]} == {"fetch", "api", "evil_tool"}


def test_an_invalid_config_file_is_an_error_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text('{\n  "mcpServers": {\n    "x": {"command": "npx",}\n  }\n}\n')
    assert main(["adopt", "--dry-run", "--from", str(bad), "--project", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "line 3" in err
    assert "Traceback" not in err


def test_an_unknown_client_or_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["adopt", "--dry-run", "--from", "zed", "--project", str(tmp_path)]) == 2
    assert "neither a client" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "pinned"),
    [
        (["-y", "@scope/pkg"], False),
        (["-y", "@scope/pkg@latest"], False),
        (["-y", "@scope/pkg@^1.2.0"], False),
        (["-y", "@scope/pkg@1.2.0"], True),
        (["pkg@2.0.0-rc.1"], True),
        (["--package=pkg@1.0.0", "bin"], True),
    ],
)
def test_npx_is_pinned_only_by_an_exact_version(args: list[str], pinned: bool) -> None:
    entries = parse_config(
        json.dumps({"mcpServers": {"s": {"command": "npx", "args": args}}}),
        path="f",
        client="cursor",
        form="json-mcpServers",
    )
    codes = {f.diagnostic.code for f in judge(entries, interpreters=("node",))}
    assert ("adopt-unpinned" not in codes) is pinned


@pytest.mark.parametrize(
    ("args", "pinned"),
    [
        (["pkg"], False),
        (["pkg@latest"], False),
        (["pkg>=1"], False),
        (["pkg==1.2.3"], True),
        (["pkg@1.2.3"], True),
        (["--from", "pkg==0.1", "cmd"], True),
    ],
)
def test_uvx_is_pinned_only_by_an_exact_version(args: list[str], pinned: bool) -> None:
    entries = parse_config(
        json.dumps({"mcpServers": {"s": {"command": "uvx", "args": args}}}),
        path="f",
        client="cursor",
        form="json-mcpServers",
    )
    codes = {f.diagnostic.code for f in judge(entries, interpreters=("python3",))}
    assert ("adopt-unpinned" not in codes) is pinned


def test_a_shown_secret_keeps_at_most_three_characters() -> None:
    assert shown("abcdefghijkl") == "abc… (12 characters)"
    assert shown("abcdef") == "(6 characters)"


@pytest.mark.parametrize(
    "url",
    [
        "https://ghp_abcdefghijklmnopqrstuvwxyz0123@example.com/mcp",
        "https://u:pw123456@example.com/",
        "https://x/?api_key=k3y3k3y3k3y3",
    ],
    ids=["token-as-user", "password", "query"],
)
def test_a_secret_in_a_url_is_found_and_not_shown(url: str) -> None:
    entries = parse_config(
        json.dumps({"servers": {"s": {"type": "http", "url": url}}}), path="f", client="vscode", form="json-servers"
    )
    (found,) = judge(entries, interpreters=())
    assert found.diagnostic.code == "adopt-secret"
    secrets_by_url = {
        "token-as-user": "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "password": "pw123456",
        "query": "k3y3k3y3k3y3",
    }
    secret = next(value for value in secrets_by_url.values() if value in url)
    assert secret not in found.diagnostic.message and secret not in found.fix
