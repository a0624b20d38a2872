from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from regkit import NOOP_SCHEMA, FakeSandbox, MemoryAudit, registry_for
from toolkit import make_tool, project_tools

from tooldir.model import Risk, ToolRecord
from tooldir.policy import Policy
from tooldir.run.hooks import Deny, HookCall, Redact, Rewrite


def user_tool(tmp_path: Path, name: str = "echo", **overrides: Any) -> Path:
    user = tmp_path / "user"
    make_tool(user, name, **overrides)
    return user


def test_directory_tool_receives_only_the_stdin_envelope_and_its_answer_is_the_content(tmp_path: Path) -> None:
    box = FakeSandbox(b'{"ok": true, "content": {"n": 1}}')
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())
    result = setup.registry.call("echo", {"text": "--output=~/.bashrc"}, context={"cwd": "/x"})
    assert result.ok and result.content == {"n": 1}
    request = box.requests[0]
    assert json.loads(request.stdin) == {
        "version": 1,
        "input": {"text": "--output=~/.bashrc"},  # argument injection arrives as data
        "context": {"cwd": "/x"},
    }
    assert request.record.name == "echo" and not request.network and dict(request.env) == {}


def test_unknown_and_pending_tools_are_refused_with_the_reason(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    make_tool(project_tools(project), "proj_tool")
    audit = MemoryAudit()
    box = FakeSandbox()
    setup = registry_for(tmp_path, project=project, sandbox=box, audit=audit)
    unknown = setup.registry.call("nope", {})
    pending = setup.registry.call("proj_tool", {"text": "x"})
    assert unknown.error is not None and unknown.error.code == "unknown-tool"
    assert pending.error is not None and pending.error.code == "not-active"
    assert "pending" in pending.error.message and "not-approved" in pending.error.message
    assert box.requests == []
    assert [e.status for e in audit.events] == ["denied", "denied"]
    assert [e.decision for e in audit.events] == ["deny", "deny"]


@pytest.mark.parametrize(
    ("value", "pointer"),
    [
        ({"text": 5}, "/text"),
        ({}, "/"),
        ({"text": "a", "extra": "--rm -rf"}, "/"),
    ],
    ids=["wrong-type", "missing", "extra-option-like-key"],
)
def test_invalid_input_is_rejected_before_anything_runs_and_names_the_pointer(
    tmp_path: Path, value: dict[str, Any], pointer: str
) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())
    result = setup.registry.call("echo", value)
    assert result.error is not None and result.error.code == "invalid-input"
    assert f"{pointer}:" in result.error.message
    assert box.requests == []


@pytest.mark.parametrize(
    "value",
    [["not", "an", "object"], {"text": float("nan")}, {"text": object()}],
    ids=["array", "nan", "python-object"],
)
def test_input_that_is_not_plain_json_is_invalid(tmp_path: Path, value: Any) -> None:
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=FakeSandbox(), audit=MemoryAudit())
    result = setup.registry.call("echo", value)
    assert result.error is not None and result.error.code == "invalid-input"


@pytest.mark.parametrize(
    ("permissions", "risk", "allowed", "why"),
    [
        ({"deny": ["ec*"]}, "read", False, "deny rule 'ec*'"),
        ({"allow": ["other_*"]}, "read", False, "no policy allow rule"),
        ({"allow": []}, "read", False, "no policy allow rule"),
        ({"mode": "plan"}, "write", False, "plan mode"),
        ({"mode": "plan"}, "external-read", True, ""),
        ({"max_risk": "write"}, "exec", False, "above the policy limit"),
        ({"allow": ["echo"], "deny": []}, "exec", True, ""),
    ],
    ids=["deny-glob", "not-allowed", "empty-allow", "plan-write", "plan-external-read", "risk-cap", "allowed"],
)
def test_permission_rules_decide_and_a_denial_says_why(
    tmp_path: Path, permissions: dict[str, Any], risk: str, allowed: bool, why: str
) -> None:
    policy = Policy.model_validate({"permissions": permissions})
    box = FakeSandbox()
    audit = MemoryAudit()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path, risk=risk), policy=policy, sandbox=box, audit=audit)
    result = setup.registry.call("echo", {"text": "x"})
    assert result.ok is allowed
    if not allowed:
        assert result.error is not None and result.error.code == "permission-denied"
        assert why in result.error.message
        assert box.requests == [] and audit.events[-1].decision == "deny"


def test_session_gate_is_asked_with_the_record_and_its_refusal_is_returned(tmp_path: Path) -> None:
    seen: list[ToolRecord] = []

    class Gate:
        id = "sess-1"

        def authorize(self, record: ToolRecord) -> tuple[str, str] | None:
            seen.append(record)
            return ("not-loaded", "search for it first")

    audit = MemoryAudit()
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=audit)
    result = setup.registry.call("echo", {"text": "x"}, session=Gate())
    assert result.error is not None and (result.error.code, result.error.message) == (
        "not-loaded",
        "search for it first",
    )
    assert seen[0].name == "echo" and box.requests == []
    assert audit.events[0].session == "sess-1"


def test_pre_hook_can_deny_or_rewrite_and_a_rewrite_is_validated_again(tmp_path: Path) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())

    def guard(*, call: HookCall, input: Any) -> Deny | Rewrite | None:
        if input["text"] == "forbidden":
            return Deny("no forbidden words")
        if input["text"] == "bad-rewrite":
            return Rewrite({"text": 1})
        return Rewrite({"text": input["text"].upper()})

    setup.registry.add_pre_hook(guard, name="guard", match="ec*")
    denied = setup.registry.call("echo", {"text": "forbidden"})
    assert (
        denied.error is not None and denied.error.code == "hook-denied" and "no forbidden words" in denied.error.message
    )
    bad = setup.registry.call("echo", {"text": "bad-rewrite"})
    assert bad.error is not None and bad.error.code == "hook-failed" and "/text" in bad.error.message
    ok = setup.registry.call("echo", {"text": "abc"})
    assert ok.ok
    assert len(box.requests) == 1 and json.loads(box.requests[0].stdin)["input"] == {"text": "ABC"}


def test_post_hook_redacts_and_a_raising_hook_fails_closed(tmp_path: Path) -> None:
    box = FakeSandbox(b'{"ok": true, "content": "token=SECRET123"}')
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())
    setup.registry.add_post_hook(
        lambda *, call, content: Redact(content.replace("SECRET123", "***")), name="mask", match="echo"
    )
    result = setup.registry.call("echo", {"text": "x"})
    assert result.ok and result.content == "token=***"

    def explode(*, call: HookCall, content: Any) -> None:
        raise KeyError("oops")

    setup.registry.add_post_hook(explode, name="explode")
    failed = setup.registry.call("echo", {"text": "x"})
    assert failed.error is not None and failed.error.code == "hook-failed"
    assert failed.content is None  # never the unredacted content


def test_hooks_are_validated_when_registered(tmp_path: Path) -> None:
    setup = registry_for(tmp_path)
    with pytest.raises(ValueError, match="call= and input="):
        setup.registry.add_pre_hook(lambda x: None, name="bad")
    with pytest.raises(ValueError, match="not callable"):
        setup.registry.add_post_hook("nope", name="bad2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hook name"):
        setup.registry.add_pre_hook(lambda *, call, input: None, name="has space")
    setup.registry.add_pre_hook(lambda *, call, input: None, name="dup")
    with pytest.raises(ValueError, match="already registered"):
        setup.registry.add_pre_hook(lambda *, call, input: None, name="dup")


@pytest.mark.parametrize(
    ("stdout", "exit_code", "ok", "code", "content"),
    [
        (b"plain \x1b[31mred\x1b[0m text\n", 0, True, None, "plain red text\n"),
        (b'{"ok": false, "content": "no such unit"}', 0, False, "tool-error", "no such unit"),
        (b'{"ok": true, "content": "\\u001b]0;title\\u0007hi"}', 0, True, None, "hi"),
        (b"", 3, False, "tool-failed", None),
    ],
    ids=["plain-text-escapes-stripped", "tool-error", "json-escapes-stripped", "non-zero-exit"],
)
def test_tool_output_is_interpreted_and_sanitised(  # noqa: PLR0917 - pytest parameters
    tmp_path: Path, stdout: bytes, exit_code: int, ok: bool, code: str | None, content: Any
) -> None:
    box = FakeSandbox(stdout, exit_code)
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())
    result = setup.registry.call("echo", {"text": "x"})
    assert result.ok is ok
    assert (result.error.code if result.error else None) == code
    assert result.content == content


def test_network_and_env_reach_the_sandbox_only_when_declared_and_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOL_TOKEN", "t1")
    monkeypatch.setenv("OTHER_SECRET", "s1")
    execute = {"command": ["python3", "run.py"], "network": True, "env": ["TOOL_TOKEN", "OTHER_SECRET"]}
    user = user_tool(tmp_path, execute=execute)
    strict = registry_for(tmp_path / "a", user_dir=user, sandbox=(box1 := FakeSandbox()), audit=MemoryAudit())
    strict.registry.call("echo", {"text": "x"})
    assert box1.requests[0].network is False and dict(box1.requests[0].env) == {}
    policy = Policy.model_validate(
        {"sandbox": {"network": True, "network_unrestricted": True, "env_allow": ["TOOL_TOKEN"]}}
    )
    open_ = registry_for(
        tmp_path / "b", user_dir=user, policy=policy, sandbox=(box2 := FakeSandbox()), audit=MemoryAudit()
    )
    open_.registry.call("echo", {"text": "x"})
    assert box2.requests[0].network is True and dict(box2.requests[0].env) == {"TOOL_TOKEN": "t1"}
    assert box2.requests[0].egress is None
    # network: true under the master switch alone (no sandbox.network_unrestricted): no network
    master = Policy.model_validate({"sandbox": {"network": True}})
    only_master = registry_for(
        tmp_path / "c", user_dir=user, policy=master, sandbox=(box3 := FakeSandbox()), audit=MemoryAudit()
    )
    only_master.registry.call("echo", {"text": "x"})
    assert box3.requests[0].network is False and box3.requests[0].egress is None


def test_an_allow_list_reaches_the_sandbox_as_its_intersection_with_the_policy_ceiling(tmp_path: Path) -> None:
    execute = {"command": ["python3", "run.py"], "network": {"allow": ["api.example.com:443", "evil.example.net:443"]}}
    user = user_tool(tmp_path, execute=execute)
    policy = Policy.model_validate({"sandbox": {"network": True, "network_allow": ["*.example.com:443"]}})
    setup = registry_for(
        tmp_path / "a", user_dir=user, policy=policy, sandbox=(box := FakeSandbox()), audit=MemoryAudit()
    )
    setup.registry.call("echo", {"text": "x"})
    (request,) = box.requests
    assert request.network is False
    assert request.egress is not None and [str(e) for e in request.egress] == ["api.example.com:443"]
    off = registry_for(tmp_path / "b", user_dir=user, sandbox=(box_off := FakeSandbox()), audit=MemoryAudit())
    off.registry.call("echo", {"text": "x"})
    assert box_off.requests[0].network is False and box_off.requests[0].egress is None


def test_a_failing_audit_sink_withholds_the_result(tmp_path: Path) -> None:
    class BrokenAudit:
        def record(self, event: Any) -> str:
            raise OSError(28, "No space left on device")

    setup = registry_for(tmp_path, audit=BrokenAudit())
    setup.registry.register("noop", NOOP_SCHEMA, lambda *, input, context: "secret result", description="x")
    result = setup.registry.call("noop", {})
    assert not result.ok and result.content is None
    assert result.error is not None and result.error.code == "audit-failed"


def test_the_snapshot_is_taken_once_per_call(tmp_path: Path) -> None:
    user = user_tool(tmp_path)
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user, sandbox=box, audit=MemoryAudit())
    old = setup.store.current
    setup.store.publish(old)  # a new generation, same tools
    result = setup.registry.call("echo", {"text": "x"})
    assert result.ok and box.requests[0].record.digest == old.get("echo").digest  # type: ignore[union-attr]


def test_risk_of_a_directory_tool_comes_from_its_manifest(tmp_path: Path) -> None:
    calls: list[HookCall] = []
    setup = registry_for(
        tmp_path, user_dir=user_tool(tmp_path, risk="external-read"), sandbox=FakeSandbox(), audit=MemoryAudit()
    )
    setup.registry.add_pre_hook(lambda *, call, input: calls.append(call), name="spy")
    setup.registry.call("echo", {"text": "x"})
    assert calls[0].risk is Risk.EXTERNAL_READ and calls[0].digest is not None


def test_a_session_gate_that_raises_refuses_the_call(tmp_path: Path) -> None:
    class BrokenGate:
        def authorize(self, record: ToolRecord) -> tuple[str, str] | None:
            raise RuntimeError("session store offline")

    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())
    result = setup.registry.call("echo", {"text": "x"}, session=BrokenGate())
    assert result.error is not None and result.error.code == "session-refused"
    assert "session store offline" in result.error.message and box.requests == []


def test_public_api_exports_what_a_host_names_of_the_registry_and_open_makes_the_registry() -> None:
    import tooldir
    import tooldir.run.registry

    for name in ("CallResult", "CallError", "Hook", "Deny", "Rewrite", "Redact", "HookCall"):
        assert name in tooldir.__all__ and hasattr(tooldir, name)
    for name in ("Registry", "CallGate"):  # the machinery tooldir.open() wires: in its module
        assert name not in tooldir.__all__ and hasattr(tooldir.run.registry, name)


@pytest.mark.parametrize("context", [["a"], {"when": object()}, {"x": float("inf")}], ids=["list", "object", "inf"])
def test_a_context_that_is_not_a_plain_json_object_is_invalid_input(tmp_path: Path, context: Any) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())
    result = setup.registry.call("echo", {"text": "x"}, context=context)
    assert result.error is not None and result.error.code == "invalid-input" and "context" in result.error.message
    assert box.requests == []


def test_a_rejected_tool_is_refused_with_its_diagnostic(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "bad_cmd", execute={"command": ["python3", "../escape.py"]})  # exec:traversal
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user, sandbox=box, audit=MemoryAudit())
    result = setup.registry.call("bad_cmd", {"text": "x"})
    assert result.error is not None and result.error.code == "not-active"
    assert "rejected" in result.error.message and "unsafe-command" in result.error.message
    assert box.requests == []


def test_a_builtin_known_to_the_snapshot_but_not_registered_here_is_unknown(tmp_path: Path) -> None:
    from tooldir.model import BuiltinSpec

    spec = BuiltinSpec(name="host_only", description="x", input_schema={"type": "object"})
    setup = registry_for(tmp_path, builtins=[spec], audit=MemoryAudit())
    result = setup.registry.call("host_only", {})
    assert result.error is not None and result.error.code == "unknown-tool"
    assert "not registered" in result.error.message


def test_a_session_gate_returning_garbage_refuses_and_the_denial_hashes_the_input(tmp_path: Path) -> None:
    from tooldir.run.audit import input_digest

    class OddGate:
        def authorize(self, record: ToolRecord) -> Any:
            return "no"

    audit = MemoryAudit()
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=audit)
    result = setup.registry.call("echo", {"text": "x"}, session=OddGate())
    assert result.error is not None and result.error.code == "session-refused" and box.requests == []
    assert audit.events[0].input_sha256 == input_digest({"text": "x"})


def test_an_uncompilable_input_schema_in_a_snapshot_is_a_result_not_a_crash(tmp_path: Path) -> None:
    from shared_helpers import forge_active

    from tooldir._internal.strictjson import freeze
    from tooldir.snapshot.store import SnapshotStore, build_snapshot

    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), audit=MemoryAudit())
    good = setup.store.current.get("echo")
    assert good is not None and good.manifest is not None
    broken_manifest = good.manifest.model_copy(
        update={"input_schema": freeze({"type": "object", "properties": {"a": {"$ref": "#/nope"}}})}
    )
    broken = forge_active(good, manifest=broken_manifest, digest="sha256:" + "0" * 64)
    store = SnapshotStore(build_snapshot([broken], [], 1))
    from tooldir.run.registry import Registry

    registry = Registry(store, policy=Policy(), state_dir=tmp_path / "s2", sandbox=FakeSandbox(), audit=MemoryAudit())
    result = registry.call("echo", {"a": 1})
    assert result.error is not None and result.error.code == "invalid-schema"


def test_a_reloaded_policy_is_enforced_from_the_next_call(tmp_path: Path) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user_tool(tmp_path), sandbox=box, audit=MemoryAudit())
    assert setup.registry.call("echo", {"text": "x"}).ok
    setup.registry.update_policy(Policy.model_validate({"permissions": {"deny": ["ech*"]}}))
    refused = setup.registry.call("echo", {"text": "x"})
    assert refused.error is not None and refused.error.code == "permission-denied"
    assert len(box.requests) == 1  # the refused call never reached the sandbox
