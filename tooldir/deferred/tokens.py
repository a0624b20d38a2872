"""Token accounting: what tool definitions cost in the model's context.

Counts are real where the optional ``bpe-openai`` package is installed (``pip install
tooldir[tokens]``; the o200k vocabulary, counted exactly like tiktoken, offline). Without it, counts
are an estimate (compact JSON characters / 4.4) and every report says so (``exact: false``,
``method: "estimate: chars/4.4"``). On the tool sets in /work/shared/eval the estimate runs high:
3-8% over a whole set, up to ~17% for one tool (p90; measured against o200k).

The tokenizer is imported on first use, never on the load path (the import costs ~0.5 s), and
counts are cached by the sha256 of the text counted. ``scan``, ``list`` and ``show`` do count in
``auto`` defer mode: their ``deferred`` is the deferral plan (:mod:`tooldir.deferred.defer`), which weighs
tokens with this same counter, so it matches what a session does.
"""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

ENCODING = "o200k_base"
CHARS_PER_TOKEN = 4.4
_CACHE_SIZE = 16384


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


class TokenCounter:
    """Counts tokens with o200k if ``bpe-openai`` is importable, else estimates (labelled).

    ``prefer_exact=False`` forces the estimate (tests, or to keep the import out entirely).
    """

    def __init__(self, *, encoding: str = ENCODING, prefer_exact: bool = True) -> None:
        self._encoding_name = encoding
        self._prefer_exact = prefer_exact
        self._encoder: Any = None
        self._resolved = False
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, int] = OrderedDict()

    def _resolve(self) -> None:
        with self._lock:
            if self._resolved:
                return
            if self._prefer_exact:
                try:
                    with warnings.catch_warnings():
                        # bpe-openai 0.1 loads its vocabulary with a deprecated importlib API
                        warnings.simplefilter("ignore", DeprecationWarning)
                        import bpe_openai

                        self._encoder = bpe_openai.get_encoding(self._encoding_name)
                except Exception:  # not installed, or no such vocabulary: estimate instead
                    self._encoder = None
            self._resolved = True

    @property
    def encoding_name(self) -> str:
        """The encoding counted with when exact (without loading the tokenizer)."""
        return self._encoding_name

    @property
    def exact(self) -> bool:
        self._resolve()
        return self._encoder is not None

    @property
    def method(self) -> str:
        return self._encoding_name if self.exact else f"estimate: chars/{CHARS_PER_TOKEN}"

    def count(self, text: str) -> int:
        """Tokens in ``text`` (cached by its sha256)."""
        self._resolve()
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        if self._encoder is not None:
            n = len(self._encoder.encode_ordinary(text))
        else:
            n = max(1, round(len(text) / CHARS_PER_TOKEN)) if text else 0
        with self._lock:
            self._cache[key] = n
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return n

    def count_json(self, value: Any) -> int:
        """Tokens of ``value`` serialised as compact JSON (how tool definitions are sent)."""
        return self.count(compact_json(value))


_default: TokenCounter | None = None
_default_lock = threading.Lock()


def default_counter() -> TokenCounter:
    """One shared counter per process (so its cache is shared)."""
    global _default  # noqa: PLW0603 - a process-wide cache is the point
    with _default_lock:
        if _default is None:
            _default = TokenCounter()
        return _default


@dataclass(frozen=True, slots=True)
class TokenReport:
    """What the tool definitions of one session cost.

    - ``full_load``: every available tool's full definition sent up front (no deferral);
    - ``first_turn``: eager definitions + guard tools + the compact directory of deferred tools;
    - ``loaded_increment``: definitions loaded on demand so far (the working set beyond eager);
    - ``saving``: ``full_load - (first_turn + loaded_increment)``;
    - ``directory``: of ``first_turn``, the compact directory of deferred tools. A host that puts it
      in the system prompt (``tooldir catalog``) sends it; ``tooldir serve`` does not (its clients
      find deferred tools with ``tool_search``), so its first turn is ``first_turn - directory``
      plus its ``initialize`` instructions (issue 25 item 4; ``benchmarks/bench_tokens.py``).
    """

    full_load: int
    first_turn: int
    loaded_increment: int
    exact: bool
    method: str
    tools: int
    deferred: int
    directory: int = 0

    @property
    def saving(self) -> int:
        return self.full_load - (self.first_turn + self.loaded_increment)

    @property
    def first_turn_share(self) -> float:
        return self.first_turn / self.full_load if self.full_load else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "full_load": self.full_load,
            "first_turn": self.first_turn,
            "loaded_increment": self.loaded_increment,
            "saving": self.saving,
            "first_turn_share": round(self.first_turn_share, 4),
            "exact": self.exact,
            "method": self.method,
            "tools": self.tools,
            "deferred": self.deferred,
            "directory": self.directory,
        }
