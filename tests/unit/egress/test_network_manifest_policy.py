"""``execute.network`` / ``server.network`` = false | true | {"allow": [...]}, the policy's
``sandbox.network_allow`` ceiling and ``sandbox.network_unrestricted``, and what ``show`` and
``scan --json`` say a tool gets (issue 24 items 1 and 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool, manifest

import tooldir
from tooldir import Manifest
from tooldir._cli import main
from tooldir._internal.strictjson import FrozenDict, freeze
from tooldir.errors import PolicyError
from tooldir.model import NetworkAllow
from tooldir.policy import Policy, parse_policy, policy_diagnostics
from tooldir.read.index import manifest_from_json

ALLOW = ["api.example.com:443", "*.example.org:443", "127.0.0.1:8080", "[::1]:8080"]


def execute(network: Any) -> dict[str, Any]:
    return {"command": ["python3", "run.py"], "network": network}


def load(root: Path) -> tooldir.Snapshot:
    return tooldir.load(project=None, user_dirs=[root], state_dir=root.parent / "state")


def test_a_manifest_declaring_an_allow_list_loads_with_it(root: Path) -> None:
    make_tool(root, "net_tool", execute=execute({"allow": ALLOW}))
    (record,) = load(root).records("net_tool")
    assert record.status == "active", record.diagnostics
    assert record.manifest is not None
    assert record.manifest.execute.network == NetworkAllow(allow=tuple(ALLOW))
    assert record.manifest.execute.declared_network() == tuple(ALLOW)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("api.example.com", "a port is required"),
        ("api.example.com:99999", "not a number from 1 to 65535"),
        ("api.example.com:0", "not a number from 1 to 65535"),
        ("999.1.1.1:80", "is not an IPv4 address"),
        ("[::g]:80", "is not an IPv6 address"),
        ("*.com:443", "at least two labels"),
        ("a*.example.com:443", "wildcard"),
        ("-bad.example.com:443", "is not a host name"),
    ],
)
def test_a_bad_allow_entry_rejects_the_tool_with_schema_invalid_pointing_at_it(
    root: Path, entry: str, says: str
) -> None:
    make_tool(root, "net_tool", execute=execute({"allow": ["ok.example.com:443", entry]}))
    snap = load(root)
    (record,) = snap.records("net_tool")
    assert record.status == "rejected"
    found = [d for d in snap.diagnostics if d.tool == "net_tool" and d.severity == "error"]
    assert [d.code for d in found] == ["schema-invalid"]
    assert found[0].pointer == "/execute/network/allow/1"
    assert says in found[0].message


@pytest.mark.parametrize(
    ("network", "pointer"),
    [
        ({"allow": ["a.example.com:443"], "deny": []}, "/execute/network/deny"),
        ({}, "/execute/network"),
        ({"allow": "a.example.com:443"}, "/execute/network/allow"),
        ("yes", "/execute/network"),
    ],
    ids=["unknown-key", "no-allow", "allow-not-a-list", "a-string"],
)
def test_a_network_value_of_the_wrong_shape_is_schema_invalid(root: Path, network: Any, pointer: str) -> None:
    make_tool(root, "net_tool", execute=execute(network))
    snap = load(root)
    found = [d for d in snap.diagnostics if d.tool == "net_tool" and d.code == "schema-invalid"]
    assert found and found[0].pointer == pointer


def test_the_model_the_scan_and_the_index_agree_on_an_allow_list() -> None:
    data = manifest("net_tool", execute=execute({"allow": ALLOW}))
    validated = Manifest.model_validate({**data, "input_schema": freeze(data["input_schema"])})
    assert manifest_from_json(json.loads(json.dumps(data), object_hook=FrozenDict)) == validated
    bad = manifest("net_tool", execute=execute({"allow": ["a.example.com:70000"]}))
    with pytest.raises(ValueError, match="not a number from 1 to 65535"):
        Manifest.model_validate({**bad, "input_schema": freeze(bad["input_schema"])})


def test_a_server_package_may_declare_an_allow_list_and_a_bad_entry_points_into_server(root: Path) -> None:
    good = {"name": "srv", "description": "A server.", "risk": "read", "server": execute({"allow": ALLOW})}
    bad = {"name": "srv_bad", "description": "A server.", "risk": "read", "server": execute({"allow": ["x:1:2"]})}
    for data in (good, bad):
        folder = root / data["name"]
        folder.mkdir()
        (folder / "server.json").write_text(json.dumps(data))
        (folder / "run.py").write_text("")
    snap = load(root)
    (srv,) = snap.records("srv")
    assert srv.server is not None and srv.server.server.declared_network() == tuple(ALLOW)
    found = [d for d in snap.diagnostics if d.tool == "srv_bad" and d.severity == "error"]
    assert found and found[0].pointer in ("/server/network/allow/0", "/server/network")


# -- the policy --------------------------------------------------------------------------------------


def test_the_policy_grants_the_intersection_of_what_a_tool_declares_and_its_ceiling() -> None:
    policy = parse_policy('[sandbox]\nnetwork = true\nnetwork_allow = ["api.example.com:443", "*.example.org:443"]\n')
    got = policy.sandbox.network_grant(("api.example.com:443", "a.example.org:443", "evil.example.net:443"))
    assert got.kind == "allow"
    assert got.to_json() == {"allow": ["api.example.com:443", "a.example.org:443"]}


def test_without_a_ceiling_a_tool_gets_what_it_declares_once_the_master_switch_is_on() -> None:
    assert Policy().sandbox.network_grant(("api.example.com:443",)).to_json() is False
    on = parse_policy("[sandbox]\nnetwork = true\n")
    assert on.sandbox.network_grant(("api.example.com:443",)).to_json() == {"allow": ["api.example.com:443"]}


def test_network_true_needs_network_unrestricted_and_says_so() -> None:
    on = parse_policy("[sandbox]\nnetwork = true\n")
    refused = on.sandbox.network_grant(True)
    assert refused.kind == "none" and "sandbox.network_unrestricted = true" in refused.why
    unrestricted = parse_policy("[sandbox]\nnetwork = true\nnetwork_unrestricted = true\n")
    assert unrestricted.sandbox.network_grant(True).to_json() is True
    off = parse_policy("[sandbox]\nnetwork_unrestricted = true\n")
    assert off.sandbox.network_grant(True).kind == "none"  # the master switch still rules


def test_network_unrestricted_is_a_weakening_and_a_ceiling_list_is_not() -> None:
    weak = parse_policy("[sandbox]\nnetwork_unrestricted = true\n")
    assert [d.pointer for d in policy_diagnostics(weak)] == ["/sandbox/network_unrestricted"]
    ceiling = parse_policy('[sandbox]\nnetwork_allow = ["api.example.com:443"]\n')
    assert policy_diagnostics(ceiling) == ()


def test_a_bad_ceiling_entry_is_a_policy_error_naming_the_key_the_entry_and_the_line() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy('[sandbox]\nnetwork = true\nnetwork_allow = ["api.example.com:443", "api.example.com"]\n')
    error = caught.value
    assert error.key == "sandbox.network_allow" and error.line == 3
    assert "entry 1" in error.message and "a port is required" in error.message
    assert "Value error" not in error.message


# -- what show and scan --json say ----------------------------------------------------------------


def test_show_and_scan_json_print_the_granted_network_as_the_manifest_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user"
    make_tool(
        user, "jira_get_issue", execute=execute({"allow": ["your-org.atlassian.net:443", "evil.example.com:443"]})
    )
    make_tool(user, "offline_tool")
    make_tool(user, "any_host", execute=execute(True))
    policy = tmp_path / "policy.toml"
    policy.write_text('[sandbox]\nnetwork = true\nnetwork_allow = ["*.atlassian.net:443"]\n')
    common = ["--user-dir", str(user), "--policy", str(policy), "--state-dir", str(tmp_path / "state")]
    common += ["--project", str(tmp_path)]
    assert main(["scan", "--json", *common]) == 0
    tools = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tools"]}
    assert tools["jira_get_issue"]["network"] == {"allow": ["your-org.atlassian.net:443"]}
    assert tools["offline_tool"]["network"] is False
    assert tools["any_host"]["network"] is False
    assert main(["show", "jira_get_issue", "--json", *common]) == 0
    (detail,) = json.loads(capsys.readouterr().out)["records"]
    assert detail["network"] == {"allow": ["your-org.atlassian.net:443"]}
    assert main(["show", "jira_get_issue", *common]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "network: only through tooldir's proxy, to your-org.atlassian.net:443" in text
    assert main(["show", "any_host", *common]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "network: none (the tool declares network: true (any host); that needs sandbox.network_unrestricted" in text


def test_a_tool_with_an_allowlist_is_never_run_unsandboxed_even_where_unsandboxed_runs_are_allowed(
    tmp_path: Path,
) -> None:
    from tooldir.run.registry import Registry
    from tooldir.sandbox import UnsafeUnsandboxed
    from tooldir.snapshot.loader import Loader, make_config
    from tooldir.snapshot.store import SnapshotStore

    canary = tmp_path / "ran"
    script = f"open({str(canary)!r}, 'w').write('x')\nprint('{{\"ok\": true, \"content\": 1}}')\n"
    user = tmp_path / "user"
    make_tool(user, "net_tool", script=script, execute=execute({"allow": ["127.0.0.1:9"]}))
    policy = parse_policy("[sandbox]\nnetwork = true\nunsafe_allow_unsandboxed = true\n")
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=tmp_path / "state")
    unsafe = UnsafeUnsandboxed(policy.sandbox, tmp_path / "state")
    registry = Registry(
        SnapshotStore(Loader(config).load()), policy=policy, state_dir=tmp_path / "state", sandbox=unsafe
    )
    result = registry.call("net_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-unavailable"
    assert "only the sandbox can enforce" in result.error.message
    assert not canary.exists()
