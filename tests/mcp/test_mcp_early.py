"""``tooldir serve`` answers the client's ``initialize`` before the SDK's server is imported and
before the tools are loaded (issue 14): the answer is the one the SDK gives, the SDK's own answer
is not sent twice, and anything but a well-formed handshake ``initialize`` is left to the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION
from server_clock import communicate, read_until_id
from toolkit import make_tool

from tooldir.mcp.early import HANDSHAKE_VERSIONS, early_answer, initialize_result
from tooldir.mcp.stdio import classify

HELLO = {"capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


def _initialize(request_id: int | str, version: str, **extra: Any) -> dict[str, Any]:
    params = {"protocolVersion": version, **HELLO, **extra}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


def _line(message: Any) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _serve(tmp_path: Path, *extra: str) -> subprocess.Popen[bytes]:
    user = tmp_path / "user"
    if not user.exists():
        make_tool(user, "echo_tool")
    cmd = [sys.executable, "-m", "tooldir", "serve", "--no-watch", "--project", str(tmp_path)]
    cmd += ["--user-dir", str(user), "--state-dir", str(tmp_path / "state"), *extra]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)


def _responses(proc: subprocess.Popen[bytes], lines: list[bytes], wanted: int | str) -> list[dict[str, Any]]:
    """Send ``lines``; every message on stdout up to the response with id ``wanted``; then hang up
    and wait for the server to end (each wait bounded by the server's CPU time: server_clock)."""
    assert proc.stdin is not None
    proc.stdin.write(b"".join(lines))
    proc.stdin.flush()
    out = [json.loads(line) for line in read_until_id(proc, wanted) if line.strip()]
    communicate(proc)
    return out


@pytest.mark.parametrize("version", [*HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION, "1999-01-01"])
def test_the_early_initialize_answer_is_the_answer_the_sdk_gives(tmp_path: Path, version: str) -> None:
    early = _responses(_serve(tmp_path), [_line(_initialize(1, version))], 1)
    # a blank first line: the early path stands aside and the SDK answers the initialize itself
    sdk = _responses(_serve(tmp_path), [b"\n", _line(_initialize(1, version))], 1)
    assert len(early) == len(sdk) == 1
    assert early == sdk
    assert early[0]["result"] == initialize_result(version)


def test_the_sdk_answer_to_the_request_answered_early_is_not_sent_a_second_time(tmp_path: Path) -> None:
    lines = [_line(_initialize("a", "2025-11-25")), _line({"jsonrpc": "2.0", "method": "notifications/initialized"})]
    lines.append(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    out = _responses(_serve(tmp_path), lines, 2)
    assert [m.get("id") for m in out] == ["a", 2]
    assert "echo_tool" in {t["name"] for t in out[1]["result"]["tools"]}


def test_a_tools_list_before_initialize_is_still_refused_by_the_sdk(tmp_path: Path) -> None:
    out = _responses(_serve(tmp_path), [_line({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})], 7)
    assert [m.get("id") for m in out] == [7]
    assert "error" in out[0] and "result" not in out[0]


def test_a_load_that_fails_after_the_early_answer_exits_2_with_the_diagnostic_and_no_traceback(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "approvals.json").write_text("{not json")
    proc = _serve(tmp_path)
    out, err = communicate(proc, _line(_initialize(1, "2025-11-25")))
    assert proc.returncode == 2
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1]  # only the early answer
    assert b"approvals.json" in err and b"Traceback" not in err


def test_early_answer_answers_a_well_formed_handshake_initialize_with_its_id() -> None:
    answer = early_answer(_line(_initialize("x-1", "2025-06-18")))
    assert answer == {"jsonrpc": "2.0", "id": "x-1", "result": initialize_result("2025-06-18")}
    assert answer["result"]["protocolVersion"] == "2025-06-18"
    assert initialize_result("2099-01-01")["protocolVersion"] == HANDSHAKE_PROTOCOL_VERSIONS[-1]


def test_the_handshake_versions_are_the_sdks() -> None:
    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS


PLAIN_CAPABILITIES = [
    {},
    {"roots": {}},
    {"roots": {"listChanged": True}},
    {"roots": {"listChanged": False}, "sampling": {}, "elicitation": {}},
    {"experimental": {"x.y/z": {"on": 1}}, "sampling": {}},
]
PLAIN_INFO = [{"name": "c", "version": "1"}, {"name": "Claude Code", "version": "2.1", "title": "Claude Code ✓"}]


@pytest.mark.parametrize("capabilities", PLAIN_CAPABILITIES)
@pytest.mark.parametrize("info", PLAIN_INFO)
@pytest.mark.parametrize("request_id", [0, -3, 2**53, "id-ü"])
def test_every_request_answered_early_is_one_the_sdks_validators_accept(
    capabilities: dict[str, Any], info: dict[str, str], request_id: int | str
) -> None:
    message = _initialize(request_id, "2025-06-18", capabilities=capabilities, clientInfo=info)
    raw = _line(message)
    assert early_answer(raw) is not None
    line, answer = classify(raw)  # the SDK's parser takes it
    assert line is not None and answer is None
    parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert isinstance(parsed, types.JSONRPCRequest) and parsed.id == request_id
    methods.validate_client_request("initialize", LATEST_HANDSHAKE_VERSION, message["params"])
    types.InitializeRequestParams.model_validate(message["params"], by_name=False)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\n",
        b"{not json\n",
        _line([_initialize(1, "2025-11-25")]),  # a batch
        _line({"jsonrpc": "2.0", "method": "initialize", "params": {"protocolVersion": "2025-11-25", **HELLO}}),
        _line({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        _line({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),  # no params
        _line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}),
        _line(_initialize(1, "2025-11-25", capabilities=[])),
        _line(_initialize(1, "2025-11-25", clientInfo={"name": 3})),
        _line(_initialize(True, "2025-11-25")),
        _line({**_initialize(1, "2025-11-25"), "jsonrpc": "1.0"}),
        _line(_initialize(1, "2025-11-25", _meta={"progressToken": 1})),
        _line(_initialize(1, "2025-11-25", capabilities={"roots": {"listChanged": 1}})),
        _line(_initialize(1, "2025-11-25", capabilities={"sampling": {"tools": {}}})),
        _line(_initialize(1, "2025-11-25", capabilities={"tasks": {}})),
        _line(_initialize(1, "2025-11-25", clientInfo={"name": "c", "version": "1", "icons": []})),
        _line(_initialize(1, 2025)),
        b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "initialize", "params": {}}\n',
        _line(_initialize(1, "2025-11-25", clientInfo={"name": "\ud800", "version": "1"})),
        b"\xff" + _line(_initialize(1, "2025-11-25")),
    ],
    ids=[
        "eof",
        "blank",
        "not-json",
        "batch",
        "notification",
        "other-method",
        "no-params",
        "no-client-info",
        "capabilities-not-object",
        "bad-client-info",
        "bool-id",
        "wrong-jsonrpc",
        "meta",
        "list-changed-not-bool",
        "sampling-not-empty",
        "other-capability",
        "other-client-info",
        "version-not-string",
        "duplicate-key",
        "lone-surrogate",
        "invalid-utf8",
    ],
)
def test_early_answer_leaves_everything_else_to_the_sdk(raw: bytes) -> None:
    assert early_answer(raw) is None


@pytest.mark.both_rankers
def test_the_server_opens_without_building_the_search_index_and_warm_search_builds_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooldir.deferred import search
    from tooldir.mcp.server import ToolServer
    from tooldir.snapshot.loader import make_config

    make_tool(tmp_path / "user", "echo_tool", description="Echo text back.")
    builds: list[int] = []
    build = search.SearchIndex.from_snapshot

    def counted(*args: Any, **kwargs: Any) -> search.SearchIndex:
        builds.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(search.SearchIndex, "from_snapshot", staticmethod(counted))
    config = make_config(project=tmp_path, user_dirs=[tmp_path / "user"], state_dir=tmp_path / "state")
    front = ToolServer.open(config, watch=False)
    try:
        assert front.list_tools_sync()  # the first tools/list
        assert builds == []
        front.warm_search()
        assert builds == [1]
        result = front.session.tool_search(queries=["echo"], scope="all")
        assert [m.name for m in result.matches] == ["echo_tool"]
        assert builds == [1]
    finally:
        front.close()


def test_initialize_waits_for_the_load_only_where_a_root_holds_an_mcp_server_package(tmp_path: Path) -> None:
    from tooldir.mcp.early import any_server_package

    plain, servers = tmp_path / "plain", tmp_path / "servers"
    (plain / "tool").mkdir(parents=True)
    (plain / "tool" / "schema.json").write_text("{}")
    (servers / "notes").mkdir(parents=True)
    (servers / "notes" / "server.json").write_text("{}")
    assert not any_server_package([plain, tmp_path / "missing"])
    assert any_server_package([plain, servers])
