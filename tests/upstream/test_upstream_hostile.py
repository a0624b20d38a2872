"""An upstream MCP server as an attacker writes it (issue 16 follow-up, item 3): it floods
tools/list_changed, lists too many or too large tools, uses confusable or reserved names, a remote
``$ref``, writes to stderr without end, or sends requests to the client. Each is contained, with
the code that names the limit or the rule, and the server's good tools keep working."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from harness import rig, server_policy
from servertools import make_hostile
from shared_helpers import require_sandbox
from toolkit import make_tool

from tooldir.model import Status, ToolRecord


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    require_sandbox()


def codes(record: ToolRecord) -> set[str]:
    return {d.code for d in record.diagnostics}


def test_a_flood_of_list_changed_costs_at_most_one_relisting_a_second(tmp_path: Path, root: Path) -> None:
    make_hostile(root)
    with rig(root, tmp_path / "state") as r:
        assert r.registry.call("evil__flood", {}).content == "flooded"
        time.sleep(2.5)
        listed = int(r.registry.call("evil__count", {}).content)
        # the first listing, then at most one re-listing per second (plus the one folded in)
        assert 2 <= listed <= 5
        assert r.snapshot.by_name["evil__count"].status is Status.ACTIVE


def test_a_listing_over_the_tool_count_limit_is_refused_with_a_diagnostic_naming_it(tmp_path: Path, root: Path) -> None:
    make_hostile(root, "many")
    make_tool(root, "fine")
    with rig(root, tmp_path / "state") as r:
        snap = r.snapshot
        over = [d for d in snap.diagnostics if d.code == "upstream-over-limit"]
        assert over and "256" in over[0].message and over[0].tool == "evil"
        assert not [t for t in snap.tools if t.upstream is not None]
        assert snap.by_name["fine"].status is Status.ACTIVE


def test_a_listing_that_pages_without_end_is_refused_at_the_page_limit(tmp_path: Path, root: Path) -> None:
    make_hostile(root, "endless-pages")
    with rig(root, tmp_path / "state") as r:
        over = [d for d in r.snapshot.diagnostics if d.code == "upstream-over-limit"]
        assert over and "16 pages" in over[0].message
        assert not [t for t in r.snapshot.tools if t.upstream is not None]


def test_a_listing_whose_definitions_together_are_over_the_per_server_cap_is_refused_and_not_stored(
    tmp_path: Path, root: Path
) -> None:
    make_hostile(root, "bloat")
    make_tool(root, "fine")
    with rig(root, tmp_path / "state") as r:
        over = [d for d in r.snapshot.diagnostics if d.code == "upstream-over-limit"]
        assert over and over[0].tool == "evil" and str(2 << 20) in over[0].message
        assert not [t for t in r.snapshot.tools if t.upstream is not None]
        assert r.registry.call("fine", {"text": "hi"}).ok
    state = tmp_path / "state" / "upstream.json"
    assert not state.exists() or state.stat().st_size < 64 * 1024


def test_a_message_over_the_size_limit_stops_the_server_with_a_diagnostic_naming_it(tmp_path: Path, root: Path) -> None:
    make_hostile(root, "huge-message")
    make_tool(root, "fine")
    with rig(root, tmp_path / "state") as r:
        over = [d for d in r.snapshot.diagnostics if d.code == "upstream-over-limit"]
        assert over and str(4 << 20) in over[0].message
        assert r.registry.call("fine", {"text": "hi"}).ok


def test_a_definition_over_the_manifest_size_limit_is_rejected_and_the_others_stay(tmp_path: Path, root: Path) -> None:
    make_hostile(root, "huge-definition")
    with rig(root, tmp_path / "state") as r:
        big = next(t for t in r.snapshot.tools if t.name == "evil__big")
        assert big.status is Status.REJECTED and "upstream-over-limit" in codes(big)
        assert r.snapshot.by_name["evil__count"].status is Status.ACTIVE


def test_confusable_and_reserved_upstream_names_are_refused_by_the_directory_name_rules(
    tmp_path: Path, root: Path
) -> None:
    make_hostile(root, "names")
    make_tool(root, "evil__tool_search")  # a directory tool taking the namespaced name
    policy = server_policy()
    policy = policy.model_copy(update={"reserved": policy.reserved.model_copy(update={"names": ("evil__shout",)})})
    with rig(root, tmp_path / "state", policy) as r:
        named = {t.name: t for t in r.snapshot.tools if t.upstream is not None}
        assert "invalid-name" in codes(named["evil__\u0430dd"])  # a look-alike letter: not a tool name
        for name in ("evil__add", "evil__Add"):  # one name but for case: both go, as in one tool root
            assert named[name].status is Status.REJECTED and codes(named[name]) & {"collision", "confusable-name"}
        assert "collision" in codes(named["evil__tool_search"])
        assert "reserved-name" in codes(named["evil__shout"])
        assert {named[n].status for n in ("evil__\u0430dd", "evil__tool_search", "evil__shout")} == {Status.REJECTED}
        assert r.snapshot.by_name["evil__sum"].status is Status.ACTIVE
        assert r.snapshot.by_name["evil__tool_search"].upstream is None  # the directory tool keeps its name


def test_a_remote_ref_in_an_upstream_input_schema_is_refused_exactly_like_a_directory_tools(
    tmp_path: Path, root: Path
) -> None:
    make_hostile(root, "remote-ref")
    schema = {"type": "object", "properties": {"x": {"$ref": "https://evil.example/schema.json"}}}
    make_tool(root, "local_ref", input_schema=schema)
    with rig(root, tmp_path / "state") as r:
        remote = next(t for t in r.snapshot.tools if t.name == "evil__remote")
        local = next(t for t in r.snapshot.tools if t.name == "local_ref")
        assert remote.status is Status.REJECTED and local.status is Status.REJECTED
        assert {d.code for d in remote.diagnostics if d.severity.value == "error"} == {
            d.code for d in local.diagnostics if d.severity.value == "error"
        }
        assert r.snapshot.by_name["evil__count"].status is Status.ACTIVE


def test_a_server_writing_megabytes_to_stderr_never_blocks_and_keeps_a_bounded_tail(tmp_path: Path, root: Path) -> None:
    make_hostile(root, "noisy")
    with rig(root, tmp_path / "state") as r:
        started = time.monotonic()
        for _ in range(3):
            assert r.registry.call("evil__shout", {}).content == "shouted"
        assert time.monotonic() - started < 15
        (session,) = r.hub._sessions.values()
        assert len(session.stderr) <= 20 and all(len(line) <= 500 for line in session.stderr)


def test_requests_from_the_server_to_the_client_are_refused_and_no_capability_is_offered(
    tmp_path: Path, root: Path
) -> None:
    make_hostile(root)
    with rig(root, tmp_path / "state") as r:
        result = r.registry.call("evil__ask", {})
    seen = json.loads(result.content)
    answers = seen["answers"]
    assert set(answers) == {"sampling/createMessage", "elicitation/create", "roots/list"}
    assert all("error" in a and "result" not in a for a in answers.values())
    assert not {"sampling", "elicitation", "roots"} & set(seen["capabilities"])
