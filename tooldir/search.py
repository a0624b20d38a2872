"""Ranked keyword search over tools: a BM25F index built from a Snapshot, updated from diffs. Pure.

Each tool is split into fields that are weighted separately (BM25F): the name, the summary
(description), keywords, parameter names and parameter descriptions. Text is tokenized by
splitting identifiers on camelCase, snake_case, dots and digits, lower-casing, dropping a short
list of English stop words and stripping common English suffixes (a light, conservative stemmer).

Scores are query-independent per (term, tool), so every term keeps an *impact-ordered* postings
list (highest contribution first). A query adds impacts term by term, highest-impact terms first,
and stops admitting new candidates as soon as the terms still to come cannot lift an unseen tool
into the top k (the MaxScore idea); the top k found are exact.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Protocol

from .model import Status, ToolRecord
from .snapshot import Snapshot, SnapshotDiff

# ------------------------------------------------------------------------------------------------
# Tokenization

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "those",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing, -ed, -ly, -ies and a final -e, so that ``analyze``,
    ``analyzes``, ``analyzing`` and ``analyzed`` meet. Conservative by design: only alphabetic
    words longer than three letters are touched, so short identifiers stay whole."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ing") and len(word) >= 6:
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) >= 5 and not word.endswith("eed"):
        word = _undouble(word[:-2])
    elif (
        (word.endswith("ly") and len(word) >= 6)
        or (word.endswith("es") and word[-3] in "sxz")
        or word.endswith(("ches", "shes"))
    ):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


def _undouble(base: str) -> str:
    return base[:-1] if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz" else base


def split_words(text: str) -> list[str]:
    """Identifier-aware split: ``getUserID_v2`` -> ``get user id v 2`` (lower-cased)."""
    return [w.lower() for w in _WORD.findall(text)]


_SCAN_TAIL = 32  # postings longer than this get a doc -> position map for tail updates
_COARSE = re.compile(r"[A-Za-z]+|[0-9]+")


@functools.lru_cache(maxsize=1 << 17)
def _terms_of(raw: str) -> tuple[str, ...]:
    """Index terms of one coarse token (a run of letters or of digits); cached."""
    words = (raw,) if raw.islower() or raw.isdigit() else _WORD.findall(raw)
    return tuple(stem(w) for w in map(str.lower, words) if w not in STOP_WORDS)


def tokenize(text: str) -> list[str]:
    """Words of ``text`` as index terms: split, lower-cased, stop words dropped, stemmed."""
    return [t for raw in _COARSE.findall(text) for t in _terms_of(raw)]


# ------------------------------------------------------------------------------------------------
# Documents


@dataclass(frozen=True, slots=True)
class SearchDoc:
    """The searchable text of one tool."""

    name: str
    description: str
    keywords: tuple[str, ...] = ()
    params: tuple[tuple[str, str], ...] = ()  # (parameter name, parameter description)
    enums: tuple[str, ...] = ()  # enum values of the parameters (indexed with their descriptions)


def _params(schema: Any, depth: int = 0) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if not isinstance(schema, Mapping) or depth > 3:
        return out
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for key, sub in props.items():
            desc = sub.get("description", "") if isinstance(sub, Mapping) else ""
            out.append((str(key), desc if isinstance(desc, str) else ""))
            out.extend(_params(sub, depth + 1))
    items = schema.get("items")
    if isinstance(items, Mapping):
        out.extend(_params(items, depth + 1))
    return out


def _enums(schema: Any, depth: int = 0) -> list[str]:
    out: list[str] = []
    if not isinstance(schema, Mapping) or depth > 3:
        return out
    values = schema.get("enum")
    if isinstance(values, list):
        out.extend(v for v in values if isinstance(v, str))
    props = schema.get("properties")
    for sub in props.values() if isinstance(props, Mapping) else ():
        out.extend(_enums(sub, depth + 1))
    out.extend(_enums(schema.get("items"), depth + 1))
    return out


def doc_from_schema(name: str, description: str, input_schema: Any, keywords: Iterable[str] = ()) -> SearchDoc:
    enums = tuple(dict.fromkeys(_enums(input_schema)))
    return SearchDoc(name, description or "", tuple(keywords), tuple(_params(input_schema)), enums)


def doc_from_record(record: ToolRecord, builtin: Mapping[str, Any] | None = None) -> SearchDoc | None:
    """The document of a record with a manifest, or of a builtin given its spec as
    ``{"description", "input_schema"}``; None when there is nothing to index."""
    m = record.manifest
    if m is not None:
        return doc_from_schema(m.name, m.description, m.input_schema, m.keywords)
    if builtin is not None:
        return _builtin_doc(record.name, builtin)
    return None


def _builtin_doc(name: str, spec: Mapping[str, Any]) -> SearchDoc:
    return doc_from_schema(name, str(spec.get("description", "")), spec.get("input_schema"))


# ------------------------------------------------------------------------------------------------
# Parameters

FIELDS = ("name", "description", "keywords", "param_names", "param_descriptions")


@dataclass(frozen=True, slots=True)
class Bm25fParams:
    """Field weights and length normalisation (BM25F). Defaults are principled, not fitted:
    a name is the most specific evidence, keywords are curated, parameter descriptions are
    long and generic. Names are short and not length-normalised much."""

    k1: float = 1.2
    weights: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType(
            {"name": 3.0, "description": 1.0, "keywords": 1.5, "param_names": 1.0, "param_descriptions": 0.4}
        )
    )
    b: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType(
            {"name": 0.3, "description": 0.75, "keywords": 0.5, "param_names": 0.5, "param_descriptions": 0.75}
        )
    )


def _field_terms(doc: SearchDoc) -> dict[str, list[str]]:
    return {
        "name": tokenize(doc.name),
        "description": tokenize(doc.description),
        "keywords": tokenize(" ".join(doc.keywords)),
        "param_names": tokenize(" ".join(p for p, _ in doc.params)),
        "param_descriptions": tokenize(" ".join([*(d for _, d in doc.params), *doc.enums])),
    }


@dataclass(frozen=True, slots=True)
class _Analyzed:
    """One document's per-field term counts and lengths (kept so updates never re-tokenize)."""

    doc: SearchDoc
    counts: tuple[tuple[str, Mapping[str, int], int], ...]  # (field, term -> count, field length)
    terms: frozenset[str]


def _analyze(doc: SearchDoc) -> _Analyzed:
    counts = []
    terms: set[str] = set()
    for f, words in _field_terms(doc).items():
        c = Counter(words)
        terms.update(c)
        counts.append((f, c, len(words)))
    return _Analyzed(doc, tuple(counts), frozenset(terms))


@dataclass(frozen=True, slots=True)
class Hit:
    name: str
    score: float


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    terms: tuple[str, ...]  # distinct, in query order
    required: tuple[str, ...]  # from ``+word``
    text: str = ""  # the query as written (what a semantic ranker embeds)


def parse_query(query: str) -> ParsedQuery:
    terms: list[str] = []
    required: list[str] = []
    for raw in query.split():
        is_required = len(raw) > 1 and raw[0] == "+" and raw[1].isalpha()  # "+1234" is a number
        toks = tokenize(raw[1:] if is_required else raw)
        if is_required and not toks:  # a required stop word still has to match
            toks = [stem(w) for w in split_words(raw[1:])]
        for t in toks:
            if t not in terms:
                terms.append(t)
            if is_required and t not in required:
                required.append(t)
    return ParsedQuery(tuple(terms), tuple(required), query)


class Ranker(Protocol):
    """The one seam for a second ranker (``tooldir.semantic.HybridRanker``): the index asks it
    to order the query's best ``pool`` lexical candidates (BM25F hits that hold every required
    term), and hands it on to every updated index through :meth:`follow`."""

    name: str
    pool: int

    def follow(self, index: SearchIndex) -> Ranker: ...

    def rank(
        self, parsed: ParsedQuery, lexical: Sequence[Hit], top_k: int, allow: Callable[[str], bool] | None
    ) -> list[Hit]: ...


# ------------------------------------------------------------------------------------------------
# The index


class SearchIndex:
    """An immutable BM25F index. Build with :meth:`build` or :meth:`from_snapshot`; derive an
    updated index with :meth:`updated` / :meth:`apply_diff` (the original is untouched)."""

    __slots__ = ("_analyzed", "_max_impact", "_names", "_position", "_postings", "params", "ranker")

    def __init__(self, analyzed: Mapping[str, _Analyzed], params: Bm25fParams, ranker: Ranker | None = None) -> None:
        self.params = params
        self._analyzed: Mapping[str, _Analyzed] = MappingProxyType(dict(analyzed))
        self._names = tuple(sorted(self._analyzed))
        self._postings: dict[str, tuple[tuple[int, float], ...]] = {}
        self._position: dict[str, dict[int, int]] = {}
        self._max_impact: dict[str, float] = {}
        self._compute()
        self.ranker = None if ranker is None else ranker.follow(self)

    @classmethod
    def build(
        cls, docs: Iterable[SearchDoc], params: Bm25fParams | None = None, ranker: Ranker | None = None
    ) -> SearchIndex:
        analyzed: dict[str, _Analyzed] = {}
        for doc in docs:
            if doc.name in analyzed:
                raise ValueError(f"duplicate tool name {doc.name!r} in search index")
            analyzed[doc.name] = _analyze(doc)
        return cls(analyzed, params or Bm25fParams(), ranker)

    @classmethod
    def from_snapshot(
        cls,
        snapshot: Snapshot,
        *,
        builtins: Mapping[str, Mapping[str, Any]] | None = None,
        ranker: Ranker | None = None,
    ) -> SearchIndex:
        """Index every active tool of ``snapshot``. Nothing of a pending or rejected tool is
        indexed: its text must never reach the model, not even through the collection
        statistics that score the other tools (trust:listing)."""
        builtins = builtins or {}
        docs = []
        for record in snapshot.by_name.values():
            if record.status is not Status.ACTIVE:
                continue
            doc = doc_from_record(record, builtins.get(record.name))
            if doc is not None:
                docs.append(doc)
        for name, spec in builtins.items():  # builtins the loader was not told about
            if name not in snapshot.by_name:
                docs.append(_builtin_doc(name, spec))
        return cls.build(docs, ranker=ranker)

    def updated(self, upserts: Iterable[SearchDoc] = (), removals: Iterable[str] = ()) -> SearchIndex:
        """A new index with ``removals`` dropped and ``upserts`` added or replaced. Unchanged
        tools are not re-tokenized; collection statistics are recomputed."""
        analyzed = dict(self._analyzed)
        for name in removals:
            analyzed.pop(name, None)
        for doc in upserts:
            analyzed[doc.name] = _analyze(doc)
        return SearchIndex(analyzed, self.params, self.ranker)

    def apply_diff(
        self, snapshot: Snapshot, change: SnapshotDiff, *, builtins: Mapping[str, Mapping[str, Any]] | None = None
    ) -> SearchIndex:
        """Follow ``change`` (which produced ``snapshot``): names whose owning record changed are
        re-indexed from ``snapshot``; names no longer owned by an active tool are dropped."""
        touched = {t.name for t in change.added} | {t.name for t in change.removed}
        touched |= {n.name for _, n in change.changed} | {n.name for _, n in change.status_changed}
        if not touched:
            return self
        upserts, removals = [], []
        for name in touched:
            record = snapshot.by_name.get(name)
            spec = (builtins or {}).get(name)
            if record is not None:
                doc = doc_from_record(record, spec) if record.status is Status.ACTIVE else None
            else:
                doc = None if spec is None else _builtin_doc(name, spec)
            if doc is None:
                removals.append(name)
            elif name not in self._analyzed or self._analyzed[name].doc != doc:
                upserts.append(doc)
        if not upserts and not any(n in self._analyzed for n in removals):
            return self
        return self.updated(upserts, removals)

    # -- statistics ------------------------------------------------------------------------------

    def _compute(self) -> None:
        n = len(self._names)
        if n == 0:
            return
        p = self.params
        totals = dict.fromkeys(FIELDS, 0)
        df: Counter[str] = Counter()
        for a in self._analyzed.values():
            df.update(a.terms)
            for f, _, length in a.counts:
                totals[f] += length
        avg = {f: max(totals[f] / n, 1e-9) for f in FIELDS}
        idf = {t: math.log(1.0 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        k1 = p.k1
        postings: dict[str, list[tuple[int, float]]] = {t: [] for t in df}
        for doc_id, name in enumerate(self._names):
            pseudo: dict[str, float] = {}
            get = pseudo.get
            for f, counts, length in self._analyzed[name].counts:
                scale = p.weights[f] / (1.0 - p.b[f] + p.b[f] * length / avg[f])
                for t, c in counts.items():
                    pseudo[t] = get(t, 0.0) + scale * c
            for t, x in pseudo.items():
                postings[t].append((doc_id, idf[t] * x / (k1 + x)))
        for t, plist in postings.items():
            plist.sort(key=itemgetter(1), reverse=True)  # stable: equal impacts keep doc order
            self._postings[t] = tuple(plist)
            self._max_impact[t] = plist[0][1]
            if len(plist) > _SCAN_TAIL:
                self._position[t] = {d: pos for pos, (d, _) in enumerate(plist)}

    # -- queries ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._analyzed

    def names(self) -> tuple[str, ...]:
        return self._names

    def doc(self, name: str) -> SearchDoc | None:
        a = self._analyzed.get(name)
        return None if a is None else a.doc

    def search(
        self, query: str | ParsedQuery, *, top_k: int = 5, allow: Callable[[str], bool] | None = None
    ) -> list[Hit]:
        """The ``top_k`` best tools for ``query``, ordered by (-score, name). Only tools for which
        ``allow(name)`` is true are considered. Tools matching no term never appear, unless
        the index has a :class:`Ranker` (which has its own rule for that)."""
        parsed = parse_query(query) if isinstance(query, str) else query
        if top_k <= 0 or not parsed.terms:
            return []
        if self.ranker is not None:
            lexical = self.lexical(parsed, top_k=max(top_k, self.ranker.pool), allow=allow)
            return self.ranker.rank(parsed, lexical, top_k, allow)
        return self.lexical(parsed, top_k=top_k, allow=allow)

    def lexical(self, parsed: ParsedQuery, *, top_k: int, allow: Callable[[str], bool] | None = None) -> list[Hit]:
        """The BM25F ranking alone (what :meth:`search` returns without a ranker)."""
        if top_k <= 0 or not parsed.terms:
            return []
        names = self._names
        ok: Callable[[int], bool] = (lambda _i: True) if allow is None else (lambda i: allow(names[i]))
        required: set[int] | None = None
        for t in parsed.required:
            ids = {d for d, _ in self._postings.get(t, ())}
            required = ids if required is None else required & ids
            if not required:
                return []
        terms = sorted((t for t in parsed.terms if t in self._postings), key=lambda t: -self._max_impact[t])
        remaining = [0.0] * (len(terms) + 1)
        for i in range(len(terms) - 1, -1, -1):
            remaining[i] = remaining[i + 1] + self._max_impact[terms[i]]
        acc: dict[int, float] = {}
        rejected: set[int] = set()
        unfiltered = required is None and allow is None

        def admissible(d: int) -> bool:
            return (required is None or d in required) and ok(d)

        # a lower bound of the final k-th score, from the exact scores of a few promising tools
        threshold = self._seed_threshold(terms, top_k, admissible)
        for i, t in enumerate(terms):
            rest = remaining[i + 1]
            plist = self._postings[t]
            n = len(plist)
            start = 0
            if threshold == -math.inf:  # admit from the head of the list until there are top_k candidates
                start = _accumulate(acc, rejected, admissible, plist, fill=top_k)
                if len(acc) >= top_k:
                    threshold = heapq.nlargest(top_k, acc.values())[-1]
            if start < n:
                # an unseen tool needs an impact of at least ``cutoff`` here to still reach the top k
                cutoff = -math.inf
                if threshold > -math.inf:
                    if len(acc) >= top_k and max(acc.values()) * (1 - 1e-9) - rest > max(threshold, plist[-1][1]):
                        threshold = max(threshold, heapq.nlargest(top_k, acc.values())[-1])
                    cutoff = threshold * (1 - 1e-9) - rest
                # impact-ordered: entries before ``stop`` may admit unseen tools, later ones cannot
                stop = n if cutoff <= plist[-1][1] else max(start, bisect_right(plist, -cutoff, key=_neg_impact))
                if unfiltered:
                    get = acc.get
                    for d, s in plist[start:stop]:
                        acc[d] = get(d, 0.0) + s
                else:
                    _accumulate(acc, rejected, admissible, plist[start:stop])
                if stop < n:  # the tail only updates known candidates
                    where = self._position.get(t)
                    if where is None or n - stop < len(acc):
                        for d, s in plist[stop:]:
                            if d in acc:
                                acc[d] += s
                    else:
                        for d in acc:
                            pos = where.get(d, -1)
                            if pos >= stop:
                                acc[d] += plist[pos][1]
                    if len(acc) > 8 * top_k:  # drop what can no longer reach the top k
                        threshold = max(threshold, heapq.nlargest(top_k, acc.values())[-1])
                        floor = threshold * (1 - 1e-9) - rest
                        kept = {d: s for d, s in acc.items() if s >= floor}
                        rejected.update(acc.keys() - kept.keys())
                        acc = kept
        best = heapq.nsmallest(top_k, acc.items(), key=lambda e: (-e[1], names[e[0]]))
        return [Hit(names[d], s) for d, s in best]

    def _impact(self, term: str, doc_id: int) -> float:
        plist = self._postings[term]
        where = self._position.get(term)
        if where is not None:
            pos = where.get(doc_id)
            return 0.0 if pos is None else plist[pos][1]
        for d, s in plist:
            if d == doc_id:
                return s
        return 0.0

    def _seed_threshold(self, terms: list[str], top_k: int, admissible: Callable[[int], bool]) -> float:
        """The k-th best *exact* score among the heads of the strongest terms' lists: no tool
        scoring below it can be in the top k. ``-inf`` when there are fewer than k such tools."""
        seeds: dict[int, None] = {}
        for t in terms[:4]:
            for d, _ in self._postings[t][:top_k]:
                if d not in seeds and admissible(d):
                    seeds[d] = None
        if len(seeds) < top_k:
            return -math.inf
        scores = [sum(self._impact(t, d) for t in terms) for d in seeds]
        return heapq.nlargest(top_k, scores)[-1]


def _accumulate(
    acc: dict[int, float],
    rejected: set[int],
    admissible: Callable[[int], bool],
    entries: Iterable[tuple[int, float]],
    *,
    fill: float = math.inf,
) -> int:
    """Add ``entries`` to the known candidates in ``acc``; an unseen tool is admitted if
    ``admissible``, else remembered in ``rejected``. Stops once ``acc`` holds ``fill`` candidates.
    Returns how many entries were consumed."""
    consumed = 0
    for consumed, (d, s) in enumerate(entries, 1):  # noqa: B007 - returned after the loop
        cur = acc.get(d)
        if cur is not None:
            acc[d] = cur + s
        elif d not in rejected:
            if not admissible(d):
                rejected.add(d)
                continue
            acc[d] = s
            if len(acc) >= fill:
                break
    return consumed


def _neg_impact(entry: tuple[int, float]) -> float:
    return -entry[1]
