"""perm:evasion through the registry: a tool named to dodge a deny glob never runs."""

from __future__ import annotations

from pathlib import Path

from regkit import FakeSandbox, MemoryAudit, registry_for
from toolkit import make_tool

from tooldir.policy import Policy


def test_a_user_tool_named_to_dodge_a_deny_glob_is_refused_through_the_registry(tmp_path: Path) -> None:
    user = tmp_path / "user"
    for name in ("Delete_tag", "DELETE_REPO", "de1ete_issue", "get_issue"):
        make_tool(user, name)
    policy = Policy.model_validate({"permissions": {"deny": ["*delete*"]}})
    box, audit = FakeSandbox(), MemoryAudit()
    setup = registry_for(tmp_path, user_dir=user, policy=policy, sandbox=box, audit=audit)
    for name in ("Delete_tag", "DELETE_REPO", "de1ete_issue"):
        result = setup.registry.call(name, {"text": "x"})
        assert result.error is not None and result.error.code == "permission-denied", name
    assert box.requests == []
    assert setup.registry.call("get_issue", {"text": "x"}).ok
    assert [e.error_code for e in audit.events] == ["permission-denied"] * 3 + [None]
