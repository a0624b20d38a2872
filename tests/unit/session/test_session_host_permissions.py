"""A host's PermissionCheck given to the Registry is the one the session's listing asks too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sesskit import defer_policy, setup
from toolkit import make_tool

from tooldir.deferred.catalog import FORMATS
from tooldir.policy import DeferPolicy, PermissionsPolicy, Policy
from tooldir.run.permissions import PermissionRequest, deny


class DenyOne:
    """A host rule: refuses one tool by name, and counts what it was asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []

    def check(self, request: PermissionRequest) -> None:
        self.asked.append(request.tool)
        if request.tool == self.name:
            raise deny(f"the host refuses {request.tool}")


def _names(tools: list[dict[str, Any]]) -> set[str]:
    return {str(t.get("name") or t.get("function", {}).get("name")) for t in tools}


@pytest.mark.parametrize("policy", [Policy(defer=DeferPolicy(mode="off")), defer_policy()], ids=["eager", "deferred"])
@pytest.mark.both_rankers
def test_a_tool_the_host_permission_check_denies_is_neither_listed_found_nor_callable(
    tmp_path: Path, policy: Policy
) -> None:
    user = tmp_path / "user"
    make_tool(user, "dir_tool")
    host = DenyOne("stock_quote")
    s = setup(tmp_path, policy=policy, user_dir=user, permissions=host)
    assert s.registry.host_permissions is host
    search = s.session.tool_search(tool_names=["stock_quote", "weather_lookup"], queries=["stock price quote"])
    assert "stock_quote" not in [m.name for m in search.matches]
    assert [n for n, _ in search.unavailable] == ["stock_quote"]
    for fmt in FORMATS:
        listed = _names(s.session.tools(fmt))
        assert "stock_quote" not in listed
    assert "stock_quote" not in [e.name for e in s.session.directory()]
    assert "stock_quote" not in _names(s.session.anthropic_deferred_tools())
    assert "stock_quote" in host.asked  # the listing asked the host's object itself
    for refused in (
        s.session.call("stock_quote", {"text": "ACME"}),
        s.session.call("defer_execute_tool", {"name": "stock_quote", "input": {"text": "ACME"}}),
        s.registry.call("stock_quote", {"text": "ACME"}),
    ):
        assert not refused.ok and refused.error is not None
        assert refused.error.code == "permission-denied"
    if policy.defer.mode == "off":
        assert s.session.call("weather_lookup", {"text": "Oslo"}).ok  # the host refuses only stock_quote
    assert s.sandbox.requests == []


def test_a_host_permission_check_allows_what_the_policy_rules_would_deny_in_listing_and_call_alike(
    tmp_path: Path,
) -> None:
    # the host's check replaces the policy's [permissions] rules in the registry; the session agrees
    policy = Policy(defer=DeferPolicy(mode="off"), permissions=PermissionsPolicy(deny=("stock_*",)))
    s = setup(tmp_path, policy=policy, permissions=DenyOne("weather_lookup"))
    listed = _names(s.session.tools())
    assert "stock_quote" in listed and "weather_lookup" not in listed
    assert s.session.call("stock_quote", {"text": "ACME"}).ok
    denied = s.session.call("weather_lookup", {"text": "Oslo"})
    assert denied.error is not None and denied.error.code == "permission-denied"
