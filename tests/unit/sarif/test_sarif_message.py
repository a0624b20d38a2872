"""SARIF message text is plain text that reads as itself (issue 23 item 5, SARIF 2.1.0 §3.11.5–6)."""

from __future__ import annotations

from pathlib import Path

from tooldir._cli.sarif import message_text, result
from tooldir.model import Diagnostic, Severity


def test_link_syntax_from_a_manifest_name_is_escaped_so_it_is_no_embedded_link() -> None:
    assert message_text("name '[click](https://evil.example/x)'") == "name '\\[click\\](https://evil.example/x)'"


def test_braces_are_doubled_so_no_placeholder_remains() -> None:
    assert message_text("{0} and {{1}}") == "{{0}} and {{{{1}}}}"


def test_a_backslash_before_a_bracket_is_doubled_and_elsewhere_kept() -> None:
    assert message_text("a\\[b] c\\d") == "a\\\\\\[b\\] c\\d"


def test_hidden_characters_are_still_shown_and_plain_text_is_unchanged() -> None:
    assert message_text("a\u202eb") == "a<U+202E>b"
    assert message_text("project tool needs approval") == "project tool needs approval"


def test_a_result_message_carries_the_escaped_text() -> None:
    d = Diagnostic(Severity.ERROR, "invalid-name", "name '[x](https://e.example) {0}': bad", tool="x")
    out = result(d, index=0, root=Path("/"), locate=lambda _: None)
    assert out["message"] == {"text": "name '\\[x\\](https://e.example) {{0}}': bad"}
