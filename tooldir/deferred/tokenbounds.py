"""Exact bounds on what :class:`tooldir.deferred.tokens.TokenCounter` can answer, without its tokenizer.

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

from .tokens import CHARS_PER_TOKEN

#: The encodings whose pre-tokenizer the lower bound is proven for.
BOUNDED_ENCODINGS = frozenset({"o200k_base"})

#: From a segment's first ASCII letter or digit to its end (linear: no backtracking). A segment
#: never splits at an apostrophe or a non-ASCII character: merging pieces only lowers the count.
#: The definition of a segment; :func:`segments` counts the same without matching it.
_SEGMENT = re.compile(r"[A-Za-z0-9][^\x00-\x26\x28-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]*")

_ALNUM = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
#: On UTF-8 bytes: every ASCII separator becomes a space, every ASCII letter or digit an ``a``;
#: the apostrophe and every byte of a non-ASCII character (>= 0x80) are deleted.
_CLASSES = bytes(0x61 if b in _ALNUM else 0x20 for b in range(256))
_DELETE = b"'" + bytes(range(0x80, 0x100))


def segments(text: str) -> int:
    """``len(_SEGMENT.findall(text))``, ~5x faster: a segment is a maximal run of characters that
    are not ASCII separators holding an ASCII letter or digit (the match starts at its first one and
    runs to its end), so with the separators made spaces and the other characters that are not
    letters or digits deleted (bytes.translate, in C), each segment is one run of ``a`` after a
    space or at the start, and a run without a letter or digit vanishes."""
    data = text.encode("utf-8", "surrogatepass").translate(_CLASSES, _DELETE)
    return data.count(b" a") + data.startswith(b"a")


def token_upper_bound(text: str) -> int:
    """At least as many as the counter returns for ``text``."""
    return len(text.encode("utf-8", "surrogatepass"))


def token_lower_bound(text: str) -> int:
    """At most as many as the counter returns for ``text``, exact or estimated."""
    if not text:
        return 0
    estimate = max(1, round(len(text) / CHARS_PER_TOKEN))
    return min(segments(text), estimate)
