"""Pure conversions of tooldir tools and call outcomes to MCP shapes."""

from __future__ import annotations

import mcp_types as types
import pytest

from tooldir.mcp.server import (
    AUDIT_META_KEY,
    MCP_TOOL_NAME,
    call_tool_result,
    mcp_tool,
    tool_annotations,
)
from tooldir.model import Risk

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


@pytest.mark.parametrize(
    ("risk", "read_only", "destructive", "open_world"),
    [
        (Risk.READ, True, False, False),
        (Risk.WRITE, False, True, False),
        (Risk.EXTERNAL_READ, True, False, True),
        (Risk.EXTERNAL_WRITE, False, True, True),
        (Risk.EXEC, False, True, True),
    ],
    ids=str,
)
def test_risk_becomes_hints_that_never_understate_danger(
    risk: Risk, read_only: bool, destructive: bool, open_world: bool
) -> None:
    hints = tool_annotations(risk)
    assert (hints.read_only_hint, hints.destructive_hint, hints.open_world_hint) == (read_only, destructive, open_world)


def test_every_risk_level_has_hints_and_only_read_levels_claim_read_only() -> None:
    for risk in Risk:
        hints = tool_annotations(risk)
        assert hints.read_only_hint is (risk in (Risk.READ, Risk.EXTERNAL_READ))
        assert hints.destructive_hint is not hints.read_only_hint


def test_tool_carries_name_description_plain_schema_and_risk_on_the_wire() -> None:
    from tooldir._internal.strictjson import freeze

    tool = mcp_tool("jira_get_issue", "Read one issue.", freeze(SCHEMA), Risk.EXTERNAL_READ)
    wire = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert wire["name"] == "jira_get_issue"
    assert wire["inputSchema"] == SCHEMA
    assert type(wire["inputSchema"]) is dict
    assert wire["annotations"]["readOnlyHint"] is True
    assert wire["annotations"]["openWorldHint"] is True
    assert wire["_meta"] == {"tooldir/risk": "external-read"}


@pytest.mark.parametrize(
    "name", ["", "a b", "x" * 129, "rеad_file", "tool/../x"], ids=["empty", "space", "long", "cyrillic", "slash"]
)
def test_names_outside_the_mcp_alphabet_are_refused(name: str) -> None:
    assert not MCP_TOOL_NAME.fullmatch(name)
    with pytest.raises(ValueError, match="not a valid MCP tool name"):
        mcp_tool(name, "d", SCHEMA, Risk.READ)


def test_a_schema_that_is_not_an_object_schema_is_refused() -> None:
    with pytest.raises(ValueError, match="type object"):
        mcp_tool("ok_name", "d", {"type": "string"}, Risk.READ)


def test_failure_is_an_is_error_result_with_the_code_in_text_structure_and_meta() -> None:
    result = call_tool_result(
        ok=False, content=None, error_code="not-loaded", error_message="call tool_search first", audit_id="a-1"
    )
    assert result.is_error is True
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text == "error[not-loaded]: call tool_search first"
    assert result.structured_content == {"error": {"code": "not-loaded", "message": "call tool_search first"}}
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert wire["_meta"] == {AUDIT_META_KEY: "a-1", "tooldir/error_code": "not-loaded"}


def test_object_content_is_sent_as_json_text_and_structured_content() -> None:
    result = call_tool_result(ok=True, content={"b": 1, "a": [1, 2]}, audit_id=None)
    assert result.is_error is False
    assert result.structured_content == {"b": 1, "a": [1, 2]}
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text == '{"a": [1, 2], "b": 1}'
    assert result.meta is None


def test_text_content_is_sent_verbatim_without_structured_content() -> None:
    result = call_tool_result(ok=True, content="hello\nworld")
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text == "hello\nworld"
    assert result.structured_content is None
