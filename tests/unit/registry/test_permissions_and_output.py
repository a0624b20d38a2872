from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tooldir.errors import PermissionDeniedError
from tooldir.model import Risk, Source
from tooldir.run.permissions import AllOf, AllowNames, AnyOf, DenyNames, MaxRisk, PermissionRequest, PlanMode
from tooldir.sandbox.output import CappedBuffer, sanitize_json, sanitize_text

REQUEST = PermissionRequest("jira_get_issue", Source.USER, Risk.EXTERNAL_READ)


@pytest.mark.parametrize("composite", [AllOf([]), AnyOf([])], ids=["AllOf", "AnyOf"])
def test_an_empty_composite_denies(composite: AllOf | AnyOf) -> None:
    with pytest.raises(PermissionDeniedError) as caught:
        composite.check(REQUEST)
    assert caught.value.code == "permission-denied" and "empty rule set" in caught.value.message


def test_any_of_passes_when_one_check_passes_and_otherwise_lists_every_reason() -> None:
    AnyOf([DenyNames(("jira_*",)), AllowNames(("jira_get_issue",))]).check(REQUEST)
    with pytest.raises(PermissionDeniedError) as caught:
        AnyOf([DenyNames(("jira_*",)), MaxRisk(Risk.READ)]).check(REQUEST)
    assert "deny rule 'jira_*'" in caught.value.message and "above the policy limit" in caught.value.message


def test_plan_mode_allows_only_reading_risks() -> None:
    PlanMode().check(REQUEST)
    for risk in (Risk.WRITE, Risk.EXTERNAL_WRITE, Risk.EXEC):
        with pytest.raises(PermissionDeniedError):
            PlanMode().check(PermissionRequest("t", Source.BUILTIN, risk))


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@given(st.text())
def test_sanitized_text_has_no_escape_or_control_characters_except_tab_and_newline(text: str) -> None:
    assert not _CONTROL.search(sanitize_text(text))


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf"))))
def test_sanitizing_leaves_ordinary_text_unchanged(text: str) -> None:
    assert sanitize_text(text) == text


def test_known_terminal_attacks_are_removed_whole() -> None:
    attack = "a\x1b]0;title\x07b\x1b[2J\x1b[31mc\x1bPdcs\x1b\\d\x9b1;2He\u202ef"
    assert sanitize_text(attack) == "abcdef"
    assert sanitize_json({"k\x1b[0m": ["\x1b[1mx"]}) == {"k": ["x"]}


def test_capped_buffer_keeps_exactly_the_cap_and_reports_overflow() -> None:
    buffer = CappedBuffer(10)
    assert buffer.feed(b"12345")
    assert not buffer.feed(b"6789012")
    assert buffer.value() == b"1234567890" and buffer.truncated
