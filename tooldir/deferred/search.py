"""Ranked keyword search over tools: a BM25F index built from a Snapshot, updated from diffs. Pure.

Each tool is split into fields that are weighted separately (BM25F): the name, the summary
(description), keywords, parameter names and parameter descriptions. Text is tokenized by
splitting identifiers on camelCase, snake_case, dots and digits, lower-casing, dropping a short
list of English stop words and stripping common English suffixes (a light, conservative stemmer).

Scoring is vectorised (numpy, imported on first use so ``import tooldir`` does not load it).
The score of a tool is the sum over the query's terms of a query-independent *impact*
``idf(t) * x / (k1 + x)`` with ``x = sum_f weight_f * count_f / (1 - b_f + b_f * len_f / avg_f)``.
Every term keeps a postings pair (tool slots, per-field counts: a CSC-like column); its impacts
are computed from the counts and the current collection statistics once per index version, in one
vector step, and cached. A query adds the impacts of its terms into a dense score array
(``bincount``), applies the exact filters (``+required`` terms, a name restriction, an ``allow``
predicate) and takes the top k (a threshold guessed on a sample, then ``argpartition``), ordered
by (-score, name); scores are rounded to 1e-9 so that ties are ties whatever the order the floats
were added in. :func:`lexical_scores` gives the scores before top-k, for other rankers.

Updates are incremental per tool: a tool keeps its slot (removed tools leave an empty slot until
they outnumber the live ones; then the columns are rebuilt from the kept counts), and an edit
rewrites only the postings of the terms whose counts changed in that tool (an overlay over the
shared base columns). Collection statistics are exact after every edit: impacts are recomputed
lazily, in one vector step per query for the terms it needs.
"""

from __future__ import annotations

import functools
import math
import re
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

from ..model import ToolRecord, is_runnable
from ..snapshot.store import Snapshot, SnapshotDiff

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    _Ids: TypeAlias = npt.NDArray[np.int64]
    _Floats: TypeAlias = npt.NDArray[np.float64]
else:  # numpy arrays, opaque at run time (numpy is imported on first use, not with this module)
    _Ids = _Floats = Any

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
    ``{"description", "input_schema"}``; None when there is nothing to index. An upstream MCP
    tool's keywords also hold its ``title`` and its server package's own description."""
    m = record.manifest
    if m is not None:
        up = record.upstream
        if up is not None:  # an upstream MCP tool: also what its title and its server say (issue 26)
            extra = tuple(t for t in (up.title, up.server_description) if t and t not in m.keywords)
            return doc_from_schema(m.name, m.description, m.input_schema, (*m.keywords, *extra))
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

    def __post_init__(self) -> None:
        # every term occurrence must add a positive impact: "matched a term" is "scored above 0"
        if not (math.isfinite(self.k1) and self.k1 >= 0):
            raise ValueError(f"Bm25fParams.k1 must be a finite number >= 0, not {self.k1!r}")
        for f in FIELDS:
            w, b = self.weights.get(f), self.b.get(f)
            if not (isinstance(w, int | float) and math.isfinite(w) and w > 0):
                raise ValueError(f"Bm25fParams.weights[{f!r}] must be a finite number > 0, not {w!r}")
            if not (isinstance(b, int | float) and 0 <= b <= 1):
                raise ValueError(f"Bm25fParams.b[{f!r}] must be a number from 0 to 1, not {b!r}")


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
    """One document's term vectors and field lengths (kept so updates never re-tokenize)."""

    doc: SearchDoc
    vectors: Mapping[str, tuple[int, ...]]  # term -> its count in each of FIELDS
    lengths: tuple[int, ...]  # terms per field, in FIELDS order


@dataclass(frozen=True, slots=True)
class _Indexed:
    """What the index keeps of a tool once its counts are in the postings: enough to take it out."""

    doc: SearchDoc
    terms: tuple[str, ...]
    lengths: tuple[int, ...]
    counts: array[int]  # the term vectors, flat: len(FIELDS) counts per term, in ``terms`` order

    def vector(self, i: int) -> tuple[int, ...]:
        w = len(FIELDS)
        return tuple(self.counts[i * w : (i + 1) * w])

    def analyzed(self) -> _Analyzed:
        return _Analyzed(self.doc, {t: self.vector(i) for i, t in enumerate(self.terms)}, self.lengths)


def _kept(a: _Analyzed) -> _Indexed:
    flat = [c for v in a.vectors.values() for c in v]
    return _Indexed(a.doc, tuple(a.vectors), a.lengths, array("H" if max(flat, default=0) <= 0xFFFF else "Q", flat))


def _analyze(doc: SearchDoc) -> _Analyzed:
    vectors: dict[str, list[int]] = {}
    lengths = []
    for i, words in enumerate(_field_terms(doc).values()):
        for t in words:
            vec = vectors.get(t)
            if vec is None:
                vec = vectors[t] = [0] * len(FIELDS)
            vec[i] += 1
        lengths.append(len(words))
    return _Analyzed(doc, {t: tuple(v) for t, v in vectors.items()}, tuple(lengths))


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
    if "+" not in query:  # no required terms: the words of the whole query, in order
        return ParsedQuery(tuple(dict.fromkeys(tokenize(query))), (), query)
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
    """The one seam for a second ranker (``tooldir.deferred.semantic.HybridRanker``): the index hands it
    the query's lexical scores before top-k (:class:`LexicalScores`: every BM25F candidate that
    holds every required term, as arrays; ``lexical.best(pool, allow=allow)`` is the best
    ``pool`` of them) to order, and hands it on to every updated index through :meth:`follow`."""

    name: str
    pool: int

    def follow(self, index: SearchIndex) -> Ranker: ...

    def rank(
        self, parsed: ParsedQuery, lexical: LexicalScores, top_k: int, allow: Callable[[str], bool] | None
    ) -> list[Hit]: ...


# ------------------------------------------------------------------------------------------------
# The index

_DIGITS = 9  # scores are rounded to this many decimals: equal sums added in another order stay equal
_NO_TERMS: tuple[Any, Any] = ((), ())
_COMPACT_AFTER = 1024  # an update rebuilds the columns once removed tools leave more empty slots than this
_SAMPLE_FROM = 4096  # top-k of at least this many scores starts from a threshold guessed on a sample


@dataclass(frozen=True, slots=True)
class _Base:
    """The postings of one full build, column by term (CSC-like), shared by every index derived
    from it: term ``vocab[t]`` owns ``slots[ptr[i]:ptr[i+1]]`` and the matching rows of ``counts``
    (per-field term counts). ``impacts`` are valid for the collection statistics of that build."""

    vocab: Mapping[str, int]
    ptr: _Ids
    slots: _Ids
    counts: Any  # npt.NDArray[np.float32], shape (postings, len(FIELDS))
    impacts: _Floats


class SearchIndex:
    """An immutable BM25F index. Build with :meth:`build` or :meth:`from_snapshot`; derive an
    updated index with :meth:`updated` / :meth:`apply_diff` (the original is untouched)."""

    __slots__ = (
        "_base",
        "_base_valid",
        "_cache",
        "_lengths",
        "_n",
        "_names",
        "_overlay",
        "_scale",
        "_slot_names",
        "_slots",
        "_tools",
        "_totals",
        "params",
        "ranker",
    )

    def __init__(self, analyzed: Mapping[str, _Analyzed], params: Bm25fParams, ranker: Ranker | None = None) -> None:
        import numpy as np

        self.params = params
        names = sorted(analyzed)
        self._tools: list[_Indexed | None] = [_kept(analyzed[n]) for n in names]  # by slot; None: removed
        self._names: tuple[str, ...] | None = tuple(names)
        self._slots: dict[str, int] = {n: i for i, n in enumerate(names)}
        self._slot_names: list[str | None] = list(names)
        self._n = len(names)
        self._lengths = np.array([analyzed[n].lengths for n in names], dtype=np.float64).reshape(-1, len(FIELDS))
        self._totals: tuple[float, ...] = tuple(float(v) for v in self._lengths.sum(axis=0))
        self._overlay: dict[str, tuple[_Ids, Any]] = {}
        self._cache: dict[str, tuple[_Ids, _Floats]] = {}
        self._scale: Any = None
        vocab: dict[str, int] = {}
        term_ids: list[int] = []
        rows: list[tuple[int, ...]] = []
        sizes: list[int] = []
        for n in names:
            vectors = analyzed[n].vectors
            term_ids.extend([vocab.setdefault(t, len(vocab)) for t in vectors])
            rows.extend(vectors.values())
            sizes.append(len(vectors))
        tids = np.array(term_ids, dtype=np.int64)
        order = np.argsort(tids, kind="stable")  # by term, then slot (slots were visited in order)
        slots = np.repeat(np.arange(len(names), dtype=np.int64), sizes)[order]
        counts = np.array(rows, dtype=np.float32).reshape(-1, len(FIELDS))[order]
        ptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(tids, minlength=len(vocab)), out=ptr[1:])
        df = np.diff(ptr)
        idf = self._idf(df)
        x = self._pseudo(slots, counts)
        impacts = np.repeat(idf, df) * x / (params.k1 + x)
        self._base = _Base(MappingProxyType(vocab), ptr, slots, counts, impacts)
        self._base_valid = True
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
            if not is_runnable(record):
                continue
            doc = doc_from_record(record, builtins.get(record.name))
            if doc is not None:
                docs.append(doc)
        for name, spec in builtins.items():  # builtins the loader was not told about
            if name not in snapshot.by_name:
                docs.append(_builtin_doc(name, spec))
        return cls.build(docs, ranker=ranker)

    def updated(self, upserts: Iterable[SearchDoc] = (), removals: Iterable[str] = ()) -> SearchIndex:
        """A new index with ``removals`` dropped and ``upserts`` added or replaced. Only the
        changed tools are tokenized and only the postings of their terms are rewritten;
        collection statistics are exact (impacts follow lazily, see the module docstring)."""
        import numpy as np

        tools = list(self._tools)
        slots, slot_names = self._slots, self._slot_names  # copied on the first add or removal
        lengths = self._lengths.copy()
        totals = list(self._totals)
        n = self._n
        drop: dict[str, list[int]] = {}
        add: dict[str, dict[int, tuple[int, ...]]] = {}
        was: dict[tuple[str, int], tuple[_Indexed, int]] = {}  # (term, slot) -> where its old counts are

        def forget(slot: int) -> None:
            old = cast(_Indexed, tools[slot])  # a live slot always holds its tool
            tools[slot] = None
            for i, v in enumerate(old.lengths):
                totals[i] -= v
            if slot < len(lengths):  # else appended by this update and written again below
                lengths[slot] = 0.0
            indexed = slot < len(self._tools) and self._tools[slot] is old
            for i, t in enumerate(old.terms):
                drop.setdefault(t, []).append(slot)
                add.get(t, {}).pop(slot, None)
                if indexed:  # the version the postings hold (not one added earlier in this update)
                    was[t, slot] = (old, i)

        for name in removals:
            slot = slots.get(name)
            if slot is not None:
                if slots is self._slots:
                    slots, slot_names = dict(slots), list(slot_names)
                forget(slot)
                slot_names[slot] = None
                del slots[name]
                n -= 1
        grown: dict[int, tuple[int, ...]] = {}  # lengths of the slots this update appends
        for doc in upserts:
            a = _analyze(doc)
            slot = slots.get(doc.name)
            if slot is not None:
                forget(slot)
            else:
                if slots is self._slots:
                    slots, slot_names = dict(slots), list(slot_names)
                slot = slots[doc.name] = len(slot_names)
                slot_names.append(doc.name)
                tools.append(None)
                n += 1
            tools[slot] = _kept(a)
            for i, v in enumerate(a.lengths):
                totals[i] += v
            if slot < len(lengths):
                lengths[slot] = a.lengths
            else:
                grown[slot] = a.lengths
            for t, vec in a.vectors.items():
                add.setdefault(t, {})[slot] = vec
        if grown:
            rows = [grown[i] for i in range(len(lengths), len(slot_names))]
            lengths = np.concatenate([lengths, np.array(rows, dtype=np.float64).reshape(-1, len(FIELDS))])
        overlay = dict(self._overlay)
        for t in drop.keys() | add.keys():
            gone = drop.get(t, [])
            extra = add.get(t, {})
            kept = len(gone) == 1 and len(extra) == 1 and gone[0] in extra  # one tool edited, term kept
            source = was.get((t, gone[0])) if kept else None
            if source is not None and source[0].vector(source[1]) == extra[gone[0]]:
                continue  # same counts: the postings do not change (its lengths are not in them)
            old_slots, old_counts = self._postings(t)
            if kept:
                row = np.flatnonzero(old_slots == gone[0])
                if len(row) == 1:
                    counts = old_counts.copy()
                    counts[row[0]] = extra[gone[0]]
                    overlay[t] = (old_slots, counts)  # same slots: the array is shared, never written
                    continue
            if gone and len(old_slots):
                keep = old_slots != gone[0]
                for slot in gone[1:]:
                    keep &= old_slots != slot
                old_slots, old_counts = old_slots[keep], old_counts[keep]
            if extra:
                new_slots = np.fromiter(extra, dtype=np.int64, count=len(extra))
                new_counts = np.array(list(extra.values()), dtype=np.float32).reshape(-1, len(FIELDS))
                if len(old_slots):
                    new_slots = np.concatenate([old_slots, new_slots])
                    new_counts = np.concatenate([old_counts, new_counts])
                overlay[t] = (new_slots, new_counts)
            else:
                overlay[t] = (np.asarray(old_slots, dtype=np.int64), old_counts)
        if len(slot_names) - n > max(_COMPACT_AFTER, n):  # mostly removed slots: rebuild, without re-tokenizing
            return SearchIndex({t.doc.name: t.analyzed() for t in tools if t is not None}, self.params, self.ranker)
        new = object.__new__(SearchIndex)
        new.params = self.params
        new._tools = tools
        new._names = self._names if slots is self._slots else None
        new._slots = slots
        new._slot_names = slot_names
        new._n = n
        new._lengths = lengths
        new._totals = tuple(totals)
        new._overlay = overlay
        new._cache = {}
        new._scale = None
        new._base = self._base
        new._base_valid = False
        new.ranker = None if self.ranker is None else self.ranker.follow(new)
        return new

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
        for name in sorted(touched):
            record = snapshot.by_name.get(name)
            spec = (builtins or {}).get(name)
            if record is not None:
                doc = doc_from_record(record, spec) if is_runnable(record) else None
            else:
                doc = None if spec is None else _builtin_doc(name, spec)
            if doc is None:
                removals.append(name)
            elif self.doc(name) != doc:
                upserts.append(doc)
        if not upserts and not any(n in self._slots for n in removals):
            return self
        return self.updated(upserts, removals)

    # -- statistics ------------------------------------------------------------------------------

    def _idf(self, df: Any) -> Any:
        import numpy as np

        n = self._n
        return np.log1p((n - df + 0.5) / (df + 0.5))

    def _pseudo(self, slots: _Ids, counts: Any) -> _Floats:
        """BM25F's pseudo-frequency ``x`` of each (slot, counts) posting under the current statistics."""
        import numpy as np

        consts = self._scale
        if consts is None:  # per field: weight, 1 - b, b / average length
            p = self.params
            n = max(self._n, 1)
            b = np.array([p.b[f] for f in FIELDS])
            avg = np.array([max(t / n, 1e-9) for t in self._totals])
            consts = self._scale = (np.array([p.weights[f] for f in FIELDS]), 1.0 - b, b / avg)
        weights, keep, per_length = consts
        x: _Floats = (counts * (weights / (keep + self._lengths[slots] * per_length))).sum(axis=1)
        return x

    def _postings(self, term: str) -> tuple[Any, Any]:
        """(slots, per-field counts) of ``term``: empty when no tool has it."""
        hit = self._overlay.get(term)
        if hit is not None:
            return hit
        base = self._base
        i = base.vocab.get(term)
        if i is None:
            return _NO_TERMS
        lo, hi = int(base.ptr[i]), int(base.ptr[i + 1])
        return base.slots[lo:hi], base.counts[lo:hi]

    def _term(self, term: str) -> tuple[_Ids, _Floats] | None:
        """(slots, impacts) of ``term`` under this index's statistics, or None when no tool has it."""
        return self._terms((term,))[0]

    def _terms(self, terms: Iterable[str]) -> list[tuple[_Ids, _Floats] | None]:
        """:meth:`_term` of each of ``terms``; the impacts not cached yet are computed in one step."""
        import numpy as np

        cache, base = self._cache, self._base
        out: list[tuple[_Ids, _Floats] | None] = []
        todo: list[tuple[int, str, Any, Any]] = []
        for term in terms:
            hit = cache.get(term)
            if hit is None:
                if self._base_valid and term not in self._overlay:
                    i = base.vocab.get(term)
                    if i is not None:
                        lo, hi = int(base.ptr[i]), int(base.ptr[i + 1])
                        hit = cache[term] = (base.slots[lo:hi], base.impacts[lo:hi])
                else:
                    slots, counts = self._postings(term)
                    if len(slots):
                        todo.append((len(out), term, slots, counts))
            out.append(hit)
        if todo:
            sizes = [len(e[2]) for e in todo]
            slots = np.concatenate([e[2] for e in todo]) if len(todo) > 1 else todo[0][2]
            x = self._pseudo(slots, np.concatenate([e[3] for e in todo]) if len(todo) > 1 else todo[0][3])
            df = np.array(sizes, dtype=np.float64)
            impacts = np.repeat(self._idf(df), sizes) * x / (self.params.k1 + x)
            at = 0
            for (pos, term, own, _), size in zip(todo, sizes, strict=True):
                hit = (own, impacts[at : at + size])
                cache[term] = hit  # one value per term and index version: a race computes it twice
                out[pos] = hit
                at += size
        return out

    # -- queries ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def __contains__(self, name: object) -> bool:
        return name in self._slots

    def slot_names(self) -> tuple[str | None, ...]:
        """The name in each slot (None: an empty slot), in slot order: what the slots of
        :class:`LexicalScores` refer to."""
        return tuple(self._slot_names)

    def names(self) -> tuple[str, ...]:
        names = self._names
        if names is None:
            names = self._names = tuple(sorted(self._slots))
        return names

    def doc(self, name: str) -> SearchDoc | None:
        slot = self._slots.get(name)
        a = None if slot is None else self._tools[slot]
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
            return self.ranker.rank(parsed, lexical_scores(self, parsed), top_k, allow)
        return self.lexical(parsed, top_k=top_k, allow=allow)

    def lexical(self, parsed: ParsedQuery, *, top_k: int, allow: Callable[[str], bool] | None = None) -> list[Hit]:
        """The BM25F ranking alone (what :meth:`search` returns without a ranker)."""
        if top_k <= 0 or not parsed.terms:
            return []
        return lexical_scores(self, parsed).top(top_k, allow=allow)


# ------------------------------------------------------------------------------------------------
# Scores before top-k: the seam for other rankers (tooldir.deferred.semantic fuses them with embeddings)


class LexicalScores:
    """The BM25F scores of every candidate of one query, before top-k.

    Candidates are the tools that match at least one query term and every ``+required`` term
    (and, given ``among``, are among those names). :meth:`candidates` gives them as aligned
    arrays ``(slots, scores)``; :meth:`names_of` turns slots into tool names; :meth:`top` is the
    exact, deterministic top k by (-score, name), optionally filtered by ``allow``. A slot is
    stable for a tool within one index and the indexes derived from it by updates."""

    __slots__ = ("_dense", "_ids", "_index", "parsed")

    def __init__(self, index: SearchIndex, parsed: ParsedQuery, dense: _Floats | None, ids: _Ids | None) -> None:
        self._index = index
        self.parsed = parsed
        self._dense = dense  # score per slot (0: no match); None: no candidate at all
        self._ids = ids  # the candidate slots when a filter restricts them, else None (all matches)

    def __bool__(self) -> bool:
        return self._dense is not None and (self._ids is None or len(self._ids) > 0)

    def candidates(self) -> tuple[_Ids, _Floats]:
        """(slots, scores) of every candidate, in slot order; scores are > 0."""
        import numpy as np

        dense = self._dense
        if dense is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        ids = np.flatnonzero(dense) if self._ids is None else self._ids
        return ids, dense[ids]

    def names_of(self, slots: Iterable[int]) -> list[str]:
        table = self._index._slot_names
        return [str(table[int(s)]) for s in slots]

    def top(self, k: int, *, allow: Callable[[str], bool] | None = None) -> list[Hit]:
        """The ``k`` best candidates for which ``allow(name)`` holds, by (-score, name)."""
        table = self._index._slot_names
        return [Hit(str(table[s]), v) for v, s in self._ranked(k, allow)]

    def best(self, k: int, *, allow: Callable[[str], bool] | None = None) -> tuple[_Ids, _Floats]:
        """:meth:`top` as aligned arrays ``(slots, scores)``, in the same order, with the same
        (rounded) scores: what another ranker fuses, without making a Hit per candidate."""
        import numpy as np

        rows = self._ranked(k, allow)
        return (
            np.fromiter((s for _, s in rows), dtype=np.int64, count=len(rows)),
            np.fromiter((v for v, _ in rows), dtype=np.float64, count=len(rows)),
        )

    @property
    def index(self) -> SearchIndex:
        """The index these scores are of (its slots are what :meth:`candidates` gives)."""
        return self._index

    def best_ordered(self, k: int, rank_of: _Ids) -> tuple[_Ids, _Floats]:
        """:meth:`best` without ``allow``, ordered without a name lookup: ``rank_of[slot]`` must
        order the live slots as their names do (e.g. the tool's position among the sorted
        names). The same slots, order and rounded scores as :meth:`best`, vectorised."""
        import numpy as np

        dense = self._dense
        if k <= 0 or dense is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        ids = self._ids
        scores = dense if ids is None else dense[ids]
        m = k + 8
        while True:
            part, floor = _above(scores, m)
            slots = part if ids is None else ids[part]
            rounded = _rounded(scores[part])
            order = np.lexsort((rank_of[slots], -rounded))[:k]
            if floor <= 0 or (len(order) == k and rounded[order[-1]] > floor):
                return slots[order], rounded[order]
            m *= 4

    def _ranked(self, k: int, allow: Callable[[str], bool] | None) -> list[tuple[float, int]]:
        dense = self._dense
        if k <= 0 or dense is None:
            return []
        if self._ids is None:
            return _ranked(dense, None, k, allow, self._index._slot_names)
        return _ranked(dense[self._ids], self._ids, k, allow, self._index._slot_names)


def lexical_scores(
    index: SearchIndex, query: str | ParsedQuery, *, among: Iterable[str] | None = None
) -> LexicalScores:
    """Score ``query`` against every tool of ``index`` (see :class:`LexicalScores`). ``among``
    restricts the candidates to those names (names not in the index are ignored)."""
    import numpy as np

    parsed = parse_query(query) if isinstance(query, str) else query
    found = [p for p in index._terms(parsed.terms) if p is not None]
    if not found:
        return LexicalScores(index, parsed, None, None)
    size = len(index._slot_names)
    ids: _Ids | None = None
    if parsed.required:
        need = index._terms(parsed.required)
        if any(p is None for p in need):
            return LexicalScores(index, parsed, None, None)
        if len(need) == 1:
            ids = need[0][0]  # type: ignore[index]
        else:
            hits = np.bincount(np.concatenate([p[0] for p in need if p is not None]), minlength=size)
            ids = np.flatnonzero(hits == len(need))
    if among is not None:
        wanted = np.fromiter(sorted({s for s in map(index._slots.get, among) if s is not None}), dtype=np.int64)
        ids = wanted if ids is None else np.intersect1d(ids, wanted, assume_unique=True)
    dense: _Floats
    if len(found) == 1:
        dense = np.zeros(size, dtype=np.float64)
        dense[found[0][0]] = found[0][1]
    else:
        dense = cast(
            "_Floats",
            np.bincount(
                np.concatenate([p[0] for p in found]), weights=np.concatenate([p[1] for p in found]), minlength=size
            ),
        )
    if ids is not None:
        ids = ids[dense[ids] > 0]
    return LexicalScores(index, parsed, dense, ids)


def top_k(
    index: SearchIndex, slots: _Ids, scores: _Floats, k: int, *, allow: Callable[[str], bool] | None = None
) -> list[Hit]:
    """The exact top ``k`` of any scores of ``index``'s tools (``scores[i]`` for slot ``slots[i]``,
    e.g. lexical scores fused with another ranker's) by (-score, name), scores rounded to 1e-9 so
    ties are ties; only positive scores rank (a score <= 0 is no match, which is how a ranker says
    "missing"), and only tools for which ``allow(name)`` holds."""
    import numpy as np

    if k <= 0 or not len(slots):
        return []
    return _best(np.asarray(scores, dtype=np.float64), np.asarray(slots, dtype=np.int64), k, allow, index._slot_names)


def _best(
    scores: _Floats, ids: _Ids | None, k: int, allow: Callable[[str], bool] | None, table: list[str | None]
) -> list[Hit]:
    """Exact top ``k`` of ``scores`` (slot ``ids[i]`` or ``i``) by (-rounded score, name), among
    the positive scores for which ``allow(name)`` holds (see :func:`_ranked`)."""
    return [Hit(str(table[s]), v) for v, s in _ranked(scores, ids, k, allow, table)]


_TIE = 1.5e-9  # scores further apart than this never round (to _DIGITS) to the same value


def _ranked(
    scores: _Floats, ids: _Ids | None, k: int, allow: Callable[[str], bool] | None, table: list[str | None]
) -> list[tuple[float, int]]:
    """(rounded score, slot) of the exact top ``k`` of ``scores`` (slot ``ids[i]`` or ``i``) by
    (-rounded score, name), among the positive scores for which ``allow(name)`` holds. Looks at a
    few more than ``k`` of the best and widens while a tie or a refused candidate could hide a
    better one. Only what is returned or could tie with it is rounded (rounding is monotonic: the
    scores sorted by value are sorted by rounded value, equal rounded values side by side), and
    names are looked up only to break ties or to ask ``allow``."""
    import numpy as np

    m = k + 8 if allow is None else 4 * k + 8
    while True:
        part, floor = _above(scores, m)
        order = np.argsort(-scores[part], kind="stable")
        values = scores[part][order].tolist()
        slots = (part if ids is None else ids[part])[order].tolist()
        out: list[tuple[float, int]] = []
        i, n = 0, len(values)
        while i < n and len(out) < k:
            r = round(values[i], _DIGITS)
            j = i + 1
            while j < n and values[i] - values[j] <= _TIE and round(values[j], _DIGITS) == r:
                j += 1
            group = slots[i:j] if j == i + 1 else sorted(slots[i:j], key=lambda s: str(table[s]))
            for s in group:
                if allow is None or allow(str(table[s])):
                    out.append((r, s))
                    if len(out) == k:
                        break
            i = j
        if floor <= 0 or (len(out) == k and out[-1][0] > floor):
            return out
        if allow is not None and m >= 256:  # a picky filter: apply it once to every match
            matched = np.flatnonzero(scores > 0)
            names = (str(table[s]) for s in (matched if ids is None else ids[matched]).tolist())
            ok = np.fromiter(map(allow, names), dtype=bool, count=len(matched))
            keep = matched[ok]
            return _ranked(scores[keep], keep if ids is None else ids[keep], k, None, table)
        m *= 4


def _rounded(values: _Floats) -> _Floats:
    """``round(v, _DIGITS)`` of each value, vectorised and equal to Python's: numpy's rounding
    (scale, round to an integer, scale back) picks the same integer unless the scaled value lies
    within its float64 error of a half; those values, and large ones, are rounded by Python."""
    import numpy as np

    scale = 10.0**_DIGITS
    scaled = values * scale
    out: _Floats = np.rint(scaled) / scale
    risky = np.flatnonzero((np.abs(scaled - np.floor(scaled) - 0.5) < 1e-3) | ~(np.abs(values) < 1e3))
    for i in risky.tolist():
        out[i] = round(float(values[i]), _DIGITS)
    return out


def _above(scores: _Floats, m: int) -> tuple[_Ids, float]:
    """Positions of at least ``min(m, matches)`` of the best positive ``scores`` and a floor: every
    score left out rounds to at most the floor (0.0 when nothing positive is left out). Never
    partitions the zeros of non-matching tools (many equal values make a partition slow)."""
    import numpy as np

    part = None
    if len(scores) >= _SAMPLE_FROM:  # guess a threshold on a sample: one comparison pass
        sample = scores[::16]
        kth = len(sample) - min(len(sample), m // 8 + 2)
        guess = float(np.partition(sample, kth)[kth])
        if guess > 0:
            above = np.flatnonzero(scores >= guess)
            if len(above) >= m:  # everything left out scores below the guess
                if len(above) <= 4 * m:
                    return above, round(guess, _DIGITS)
                part = above
    if part is None:
        part = np.flatnonzero(scores > 0)
        if len(part) <= m:
            return part, 0.0
    best = part[np.argpartition(scores[part], len(part) - m)[len(part) - m :]]
    return best, round(float(scores[best[0]]), _DIGITS)  # the least kept: nothing left out is above it
