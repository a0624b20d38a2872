"""The line finder behind FILE:LINE origins, on the TOML shapes a hand-written policy uses."""

from __future__ import annotations

import tomllib

from tooldir._internal.tomllines import key_lines, line_of

TRICKY = '''\
# [not.a.table] = "in a comment"
[sources.project]   # trailing [comment]
require = [
  "approval", # ] inside a comment
  "pin",
]
"max_risk" = """write""\""
may_shadow = false
[ "sand box" . inner ]
text = \'\'\'one
two = 3
[three]\'\'\'
quoted = "a\\"b = [c"
table = {a = 1, b = [1, 2]}
sources.user.max_risk = 'exec'
[[many]]
k = 1
'''


def test_every_statement_of_a_tricky_document_is_found_on_its_line() -> None:
    tomllib.loads(TRICKY)  # the finder only ever sees documents tomllib accepted
    lines = key_lines(TRICKY)
    assert lines == {
        ("sources", "project"): 2,
        ("sources", "project", "require"): 3,
        ("sources", "project", "max_risk"): 7,
        ("sources", "project", "may_shadow"): 8,
        ("sand box", "inner"): 9,
        ("sand box", "inner", "text"): 10,
        ("sand box", "inner", "quoted"): 13,
        ("sand box", "inner", "table"): 14,
        ("sand box", "inner", "sources", "user", "max_risk"): 15,
        ("many",): 16,
        ("many", "k"): 17,
    }


def test_a_key_inside_an_inline_table_gets_the_line_of_its_statement() -> None:
    lines = key_lines("\n[sources]\nproject = { may_shadow = false }\n")
    assert line_of(lines, ("sources", "project", "may_shadow")) == 3
    assert line_of(lines, ("keys", "minisign")) is None


def test_text_that_is_not_toml_gives_what_was_found_without_raising() -> None:
    assert key_lines('a = 1\nb = "unterminated\n') == {("a",): 1, ("b",): 2}
