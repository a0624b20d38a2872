"""Upstream tool names follow the precedence, shadowing and confusable rules of directory tools
(issue 23 item 8): a pending project tool named like the user's server tool, or like it, never
hides or rejects it when the project may not shadow; the lower-trust look-alike is the one refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import rig, server_policy
from servertools import make_hostile
from shared_helpers import require_sandbox
from toolkit import make_tool

from tooldir.model import Source, Status
from tooldir.policy import Policy, ProjectSourcePolicy, SourcesPolicy


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    require_sandbox()


def no_shadow_policy() -> Policy:
    base = server_policy()
    return base.model_copy(update={"sources": SourcesPolicy(project=ProjectSourcePolicy(may_shadow=False))})


def test_a_pending_project_tool_named_like_a_user_server_tool_is_shadowed_when_the_project_may_not_shadow(
    tmp_path: Path, root: Path
) -> None:
    make_hostile(root)
    project = tmp_path / "proj"
    make_tool(project / ".tooldir" / "tools", "evil__count")
    with rig(root, tmp_path / "state", no_shadow_policy(), project=project) as r:
        records = [t for t in r.snapshot.tools if t.name == "evil__count"]
        upstream = next(t for t in records if t.upstream is not None)
        squatter = next(t for t in records if t.upstream is None)
        assert upstream.status is Status.ACTIVE and upstream.source is Source.USER
        assert squatter.source is Source.PROJECT and squatter.status is Status.SHADOWED
        assert "shadowed" in {d.code for d in squatter.diagnostics}
        assert r.registry.call("evil__count", {}).ok


def test_a_pending_project_look_alike_of_a_user_server_tool_is_refused_and_the_server_tool_stays(
    tmp_path: Path, root: Path
) -> None:
    make_hostile(root)
    project = tmp_path / "proj"
    make_tool(project / ".tooldir" / "tools", "evi1__count")
    with rig(root, tmp_path / "state", no_shadow_policy(), project=project) as r:
        upstream = next(t for t in r.snapshot.tools if t.name == "evil__count")
        squatter = next(t for t in r.snapshot.tools if t.name == "evi1__count")
        assert upstream.status is Status.ACTIVE and upstream.upstream is not None
        assert squatter.status is Status.REJECTED and "confusable-name" in {d.code for d in squatter.diagnostics}
        assert r.registry.call("evil__count", {}).ok
