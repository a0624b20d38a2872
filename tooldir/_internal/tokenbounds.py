"""Exact bounds on what :class:`tooldir.tokens.TokenCounter` can answer, without its tokenizer.

Importing ``bpe-openai`` costs about a second and 130 MB (its import builds every vocabulary it
ships). A decision that only compares two token counts (the ``auto`` deferral plan) can often be
made from bounds instead, with the same outcome: if a lower bound of one side already exceeds an
upper bound of the other, the exact counts compare the same way.

Both bounds hold for either answer of the counter:

- the exact o200k count (``encode_ordinary``): a byte-level BPE token covers at least one UTF-8
  byte, so tokens <= bytes. And BPE never merges across the pieces of o200k's pre-tokenizer, and
  no piece holds two ASCII letters/digits with an ASCII separator between them (any ASCII
  character but a letter, a digit or an apostrophe): letter pieces are ``[one non-letter]?
  letters['s|'t|...]``, number pieces are digits only, the other pieces hold no letters or
  digits. So the segments between ASCII separators that hold an ASCII letter or digit each own
  at least one piece (the one holding their first ASCII letter or digit): tokens >= segments;
- the estimate, ``max(1, round(chars / 4.4))``: at most the character count, so at most the bytes.

tests/unit/session/test_token_bounds.py checks both against the real tokenizer (hypothesis).
"""

from __future__ import annotations

import re

from ..tokens import CHARS_PER_TOKEN

#: The encodings whose pre-tokenizer the lower bound is proven for.
BOUNDED_ENCODINGS = frozenset({"o200k_base"})

#: From a segment's first ASCII letter or digit to its end (linear: no backtracking). A segment
#: never splits at an apostrophe or a non-ASCII character: merging pieces only lowers the count.
_SEGMENT = re.compile(r"[A-Za-z0-9][^\x00-\x26\x28-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]*")


def token_upper_bound(text: str) -> int:
    """At least as many as the counter returns for ``text``."""
    return len(text.encode("utf-8", "surrogatepass"))


def token_lower_bound(text: str) -> int:
    """At most as many as the counter returns for ``text``, exact or estimated."""
    if not text:
        return 0
    estimate = max(1, round(len(text) / CHARS_PER_TOKEN))
    # counting every segment in C (findall) is ~2.5x faster than stopping early in a Python loop
    return min(len(_SEGMENT.findall(text)), estimate)
