"""An offline semantic ranker fused with BM25F (issues 15 and 26). Optional: ``pip install "tooldir[semantic]"``.

The embedder is the static token-embedding model that ships *inside* the ``wordllama`` wheel
(``wordllama/weights/l2_supercat_256.safetensors`` and its tokenizer file): a text's vector is the
mean of its tokens' vectors, all :data:`DIM` (256) dimensions. The two files are opened directly
(safetensors + tokenizers) and the ``wordllama`` package itself is never imported: its ``__init__``
configures the root logger and its loader falls back to a network download and to ``~/.cache``.
Nothing here reads HOME or the network.

Every tool is embedded once as ONE vector of the whole text a model would read about it
(:func:`tool_text`: name split into words, description, keywords, parameter names and
descriptions, enum values). Vectors are cached (L2-normalised) by the SHA-256 of that text and
the cache is handed from one index to the next (:meth:`HybridRanker.follow`), so an edit
re-embeds one tool, not the catalog; the rows of the tools whose document did not change (the
same object in the updated index) are copied from the last catalog built, without even hashing
their text again. A query costs one embedding per part (below) and, when a tool no term matches
may come in on meaning, two bounding passes in the catalog's principal axes (a rotation fitted
on the catalog keeps every cosine; the first 64 rotated dimensions of every row, then 64 more
for the few rows left, bound each cosine from above) so that only the tools that may reach the
threshold are multiplied in full; everything after it is vectorised over the candidates, and
the result equals the full product's to the bit (tests/unit/search/test_semantic.py).

Fusion (:meth:`HybridRanker.rank`), per query: the BM25F scores of the lexical candidates are
divided by the query's best one (the lexical part is capped at 1 whatever a description holds:
a description stuffed with popular words cannot outscore the best honest match by more than
the lexical weight), cosines are min-max normalised over the candidates, and the fused score is
``alpha * lexical + (1 - alpha) * semantic``.

Query parts (:func:`query_parts`): a query is cut at sentence ends and at ", and / then / also /
but / so"; the parts of at least :data:`MIN_PART_WORDS` words are kept. With two parts or more
the semantic side is ``FULL_WEIGHT * minmax(cos(full query)) + (1 - FULL_WEIGHT) *
minmax(max over parts of cos(part))``, each part's best lexical and semantic candidates join the
pool, and the top k covers the parts: the best tool of each part (by that part's own fusion,
its BM25F scores and its cosines) is ranked before any other, its score raised by 1 (every fused
score is at most 1, so the order stays ``(-score, name)``).

``alpha``, the pool and the miss threshold were chosen by ``benchmarks/calibrate_fusion.py`` on
the training splits of ``../shared/eval`` only (``benchmarks/calibrate_fusion.json`` holds what
it chose and the data it chose it on). A tool that no query term matches is returned only when
the query holds a word the model knows whole (random strings do not: they are split into
meaningless pieces) and the tool's cosine reaches :data:`MIN_COSINE`, which 99% of random
three-word salads of the model's vocabulary never reach on the calibration catalogs: a nonsense
query still misses. ``+required`` terms keep their meaning (only lexical candidates, which hold
every required term, are eligible, and a query with a required term is not cut into parts) and
the order stays ``(-score, name)``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .search import (
    STOP_WORDS,
    Hit,
    LexicalScores,
    ParsedQuery,
    SearchDoc,
    SearchIndex,
    lexical_scores,
    parse_query,
    split_words,
)

__all__ = [
    "ALPHA",
    "MIN_COSINE",
    "POOL",
    "SEMANTIC_ENV",
    "HybridRanker",
    "SemanticUnavailable",
    "StaticEmbedder",
    "load_embedder",
    "query_parts",
    "semantic_status",
    "tool_text",
]

SEMANTIC_ENV = "TOOLDIR_SEMANTIC"  # "off": BM25F only; "hybrid": this ranker; "ensemble"; unset: the best installed
SEMANTIC_OFF = frozenset({"0", "off", "no", "false", "bm25f"})
SEMANTIC_ON = frozenset({"", "1", "on", "yes", "true", "hybrid", "ensemble"})
SEMANTIC_BEST = frozenset({"", "1", "on", "yes", "true", "ensemble"})  # the ensemble when [semantic-plus] is there
MODEL_PACKAGE = "wordllama"
WEIGHTS = ("weights", "l2_supercat_256.safetensors")
TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
TENSOR_KEY = "embedding.weight"
DIM = 256  # every dimension of the model (issue 26: the truncated 128 lost more than it saved)

# Chosen by benchmarks/calibrate_fusion.py on training splits only (its choice and data:
# benchmarks/calibrate_fusion.json; tests/unit/search/test_semantic.py checks they agree).
ALPHA = 0.5  # weight of the lexical part
MIN_COSINE = 0.65  # a tool no query term matches needs at least this cosine
POOL = 50  # candidates taken from each side before fusion
FULL_WEIGHT = 0.3  # with query parts: weight of the whole query's cosine beside the best part's
MIN_PART_WORDS = 3  # a query part shorter than this is not a part of its own
MAX_PARTS = 6  # parts beyond these are not embedded apart (the whole query still counts)
EMBED_BATCH = 128  # texts embedded together
MAX_CACHED_WORDS = 200_000  # distinct words whose token ids are kept (then the cache starts over)
MAX_TEXT_CHARS = 4096  # what is embedded of one tool (a mean over more tokens says nothing new)

Matrix = npt.NDArray[np.float32]


class SemanticUnavailable(RuntimeError):
    """The optional model is not installed, disabled, or unreadable (the search stays BM25F)."""


# ------------------------------------------------------------------------------------------------
# The embedder


class StaticEmbedder:
    """Mean of token vectors: ``embed(texts)`` gives one raw (unnormalised) float32 row per text.

    Texts are cut into words first (:func:`words`: digits and English stop words dropped, since
    a static model's mean over ``0.2907590418481535`` or ``the`` only blurs the topic), each
    distinct word is tokenized once (cached) and a text's vector is the mean of its words'
    tokens. Word by word is also what keeps tokenizing fast: the model's tokenizer has no
    pre-tokenizer, so a whole text would be one BPE word, quadratic in its length."""

    name = f"wordllama-l2_supercat-256[:{DIM}]"

    def __init__(self, table: npt.NDArray[Any], tokenizer: Any) -> None:
        self._table = np.ascontiguousarray(table, dtype=np.float32)  # (vocab, dim)
        self._tokenizer = tokenizer
        self._ids: dict[str, tuple[int, ...]] = {}
        vocab = tokenizer.get_vocab()
        self._whole = {t[1:]: i for t, i in vocab.items() if t.startswith("\u2581") and 0 <= i < len(self._table)}
        self.dim = int(self._table.shape[1])

    def _learn(self, ws: Iterable[str]) -> None:
        """Put the token ids of every new word of ``ws`` in the cache."""
        cache = self._ids
        new = []
        for w in dict.fromkeys(w for w in ws if w not in cache):
            whole = self._whole.get(w)  # most words are one token of the vocabulary: no BPE needed
            if whole is not None:
                cache[w] = (whole,)
            else:
                new.append(w)
        if new:
            if len(cache) + len(new) > MAX_CACHED_WORDS:
                cache.clear()
            top = self._table.shape[0] - 1
            for w, enc in zip(new, self._tokenizer.encode_batch(new, add_special_tokens=False), strict=True):
                cache[w] = tuple(min(max(i, 0), top) for i in enc.ids)

    def _ids_of(self, w: str) -> tuple[int, ...]:
        ids = self._ids.get(w)
        if ids is None:  # only after the cache was cleared mid-text
            self._learn((w,))
            ids = self._ids[w]
        return ids

    def knows_any(self, text: str) -> bool:
        """Whether ``text`` holds a word that is one whole token of the model's vocabulary."""
        return any(w in self._whole for w in words(text))

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for at in range(0, len(texts), EMBED_BATCH):  # batches keep the gathered token rows small
            out[at : at + EMBED_BATCH] = self._embed_batch(texts[at : at + EMBED_BATCH])
        return out

    def _embed_batch(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        per_text = [words(t) for t in texts]
        self._learn(w for ws in per_text for w in ws)
        ids_of = self._ids_of
        flat: list[int] = []
        lengths = []
        for ws in per_text:
            before = len(flat)
            for w in ws:
                flat += ids_of(w)
            lengths.append(len(flat) - before)
        if not flat:
            return out
        counts = np.asarray(lengths, dtype=np.int64)
        nonempty = counts > 0
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[nonempty]
        rows = self._table[np.asarray(flat, dtype=np.intp)]
        out[nonempty] = np.add.reduceat(rows, starts, axis=0) / counts[nonempty, None]
        return out

    def embed_one(self, text: str) -> npt.NDArray[np.float32]:
        return self.query(text)[0]

    def query(self, text: str) -> tuple[npt.NDArray[np.float32], bool]:
        """:meth:`embed_one` and :meth:`knows_any` of ``text``, cutting it into words once."""
        ws = words(text)
        whole = self._whole
        known = any(w in whole for w in ws)
        self._learn(ws)
        flat = [i for w in ws for i in self._ids_of(w)]
        if not flat:
            return np.zeros(self.dim, dtype=np.float32), known
        return self._table[flat].mean(axis=0), known


_EMBED_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def words(text: str) -> list[str]:
    """What of ``text`` is embedded: runs of letters (identifiers split on camelCase and
    snake_case), lower-cased, English stop words dropped."""
    return [w for raw in _EMBED_WORD.findall(text) for w in _words_of(raw)]


@functools.lru_cache(maxsize=1 << 16)
def _words_of(raw: str) -> tuple[str, ...]:
    split = (raw,) if raw.islower() else split_words(raw)
    return tuple(w for w in map(str.lower, split) if w not in STOP_WORDS)


def model_dir() -> Path:
    """The installed ``wordllama`` package folder, found without importing (running) it."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError) as exc:
        raise SemanticUnavailable(f"{MODEL_PACKAGE} cannot be located: {exc}") from None
    if spec is None or not spec.submodule_search_locations:
        raise SemanticUnavailable(f'{MODEL_PACKAGE} is not installed (pip install "tooldir[semantic]")')
    return Path(next(iter(spec.submodule_search_locations)))


_LOCK = threading.Lock()
_LOADED: dict[Path, StaticEmbedder] = {}


def load_embedder(directory: Path | None = None) -> StaticEmbedder:
    """Load the shipped model from local files only (cached per folder). Raises SemanticUnavailable."""
    base = directory if directory is not None else model_dir()
    with _LOCK:
        cached = _LOADED.get(base)
        if cached is not None:
            return cached
        weights, tokenizer_file = base.joinpath(*WEIGHTS), base.joinpath(*TOKENIZER)
        try:
            from safetensors import safe_open
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise SemanticUnavailable(f"a dependency of the semantic ranker is missing: {exc}") from None
        try:
            with safe_open(str(weights), framework="np", device="cpu") as f:
                table = f.get_tensor(TENSOR_KEY)[:, :DIM]
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # any unreadable model file means: no semantic ranker
            raise SemanticUnavailable(f"cannot load the model from {base}: {type(exc).__name__}: {exc}") from None
        if getattr(table, "ndim", 0) != 2 or table.shape[0] < 2 or table.shape[1] < 2:
            raise SemanticUnavailable(f"{weights}: {TENSOR_KEY} is not a (vocabulary, dimension) matrix")
        tokenizer.no_padding()
        tokenizer.no_truncation()
        embedder = StaticEmbedder(table, tokenizer)
        _LOADED[base] = embedder
        return embedder


def semantic_status(environ: Mapping[str, str] | None = None, *, load: bool = True) -> tuple[bool, str]:
    """(usable, why): whether the hybrid ranker will run, and the reason if not.
    :data:`SEMANTIC_ENV` chooses: ``off`` (or ``bm25f``) is BM25F alone, ``hybrid`` or unset is
    this ranker when installed; any other value is BM25F alone, with the reason. With
    ``load=False`` only checks that the model files are there (cheap: nothing is read)."""
    env = os.environ if environ is None else environ
    choice = env.get(SEMANTIC_ENV, "").strip().lower()
    if choice in SEMANTIC_OFF:
        return False, f"disabled by {SEMANTIC_ENV}={env[SEMANTIC_ENV]}"
    if choice not in SEMANTIC_ON:  # a typo must not pass for a choice
        return False, f"{SEMANTIC_ENV}={env[SEMANTIC_ENV]!r} is not one of off, hybrid, ensemble: BM25F alone"
    try:
        if load:
            load_embedder()
        else:
            base = model_dir()
            for parts in (WEIGHTS, TOKENIZER):
                if not base.joinpath(*parts).is_file():
                    raise SemanticUnavailable(f"{base.joinpath(*parts)} is missing")
    except SemanticUnavailable as exc:
        return False, str(exc)
    return True, "ok"


# ------------------------------------------------------------------------------------------------
# What is embedded


def tool_text(doc: SearchDoc) -> str:
    """All the text a model would read about a tool, as plain words, embedded as one vector:
    the name split into words, the description, keywords, parameter names with their
    descriptions and enum values."""
    parts = [" ".join(split_words(doc.name)), doc.description]
    if doc.keywords:
        parts.append(", ".join(doc.keywords))
    parts += [" ".join(split_words(p)) + (f": {d}" if d else "") for p, d in doc.params]
    if doc.enums:
        parts.append(", ".join(doc.enums))
    return "\n".join(p for p in parts if p)[:MAX_TEXT_CHARS]


_PART_SPLIT = re.compile(r"(?<=[.!?;])\s+|,\s*(?:and\s+then|and|then|also|but|so)\b\s*", re.IGNORECASE)


def query_parts(text: str) -> list[str]:
    """The parts of a query that may each ask for a tool: cut at sentence ends and at ", and",
    ", then", ", also", ", but", ", so"; only parts of at least :data:`MIN_PART_WORDS` words
    count. Fewer than two such parts: ``[]`` (the query is one intent)."""
    parts = [p.strip() for p in _PART_SPLIT.split(text)]
    kept = [p for p in parts if len(p.split()) >= MIN_PART_WORDS]
    return kept[:MAX_PARTS] if len(kept) >= 2 else []


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def query_text(parsed: ParsedQuery) -> str:
    return " ".join(w[1:] if w.startswith("+") and len(w) > 1 else w for w in parsed.text.split())


def _unit(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32] | None:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0.0 else None


def _minmax(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``values`` min-max normalised to [0, 1]; all ones when they are (nearly) equal."""
    hi, lo = float(values.max()), float(values.min())
    span = hi - lo
    return (values - lo) / span if span > 1e-9 else np.ones(len(values), dtype=np.float64)


def _share(
    rows: npt.NDArray[np.intp], at: npt.NDArray[np.intp], scores: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``scores`` (of the rows ``at``, all among ``rows``) divided by their best, aligned with
    ``rows`` (0 for the other rows)."""
    out = np.zeros(len(rows), dtype=np.float64)
    best = float(scores.max()) if len(scores) else 0.0
    if best > 0:
        out[np.searchsorted(rows, at)] = scores / best
    return out


def _normalised(rows: Matrix) -> Matrix:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return rows


def _principal_axes(raw: Matrix) -> npt.NDArray[np.float64]:
    """An orthogonal (dim, dim) rotation whose first axes carry most of the catalog's rows'
    weight (the eigenvectors of their second moment, fitted on a sample, largest first): after
    it, the first dimensions of a row bound its cosine with any query far more tightly than
    the model's own first dimensions do (their weight is spread over all 256)."""
    dim = raw.shape[1]
    if len(raw) < 2:
        return np.eye(dim, dtype=np.float64)
    sample = raw[:: max(1, len(raw) // PCA_SAMPLE)].astype(np.float64)
    _, vectors = np.linalg.eigh(sample.T @ sample)
    return np.ascontiguousarray(vectors[:, ::-1])


def _rotated(
    padded: Matrix, rotation: npt.NDArray[np.float64], n: int
) -> tuple[Matrix, Matrix, Matrix, npt.NDArray[np.float64]]:
    """The bounding passes' data: the rotated rows' first HEAD dimensions as blocks, the next MID
    dimensions, and the norms of what is left after each (from |row| = 1 or 0, in float64,
    rounded up by a margin far above the float32 rounding of the rotated dimensions)."""
    h, m = _split(padded.shape[1])
    turned = padded @ rotation[:, : h + m].astype(np.float32)  # (padded rows, h + m)
    head = np.ascontiguousarray(turned[:, :h]).reshape(-1, BLOCK, h)
    mid = np.ascontiguousarray(turned[:n, h:])
    whole = np.einsum("ij,ij->i", padded[:n], padded[:n], dtype=np.float64)
    first = np.einsum("ij,ij->i", turned[:n, :h], turned[:n, :h], dtype=np.float64)
    second = np.einsum("ij,ij->i", mid, mid, dtype=np.float64)
    margin = 1e-6 * (whole > 0)  # in the square: covers its float32 error even when the rest is ~0
    tail_head = np.sqrt(np.maximum(whole - first, 0.0) + margin).astype(np.float32)
    tail_mid = np.sqrt(np.maximum(whole - first - second, 0.0) + margin)
    return head, mid, tail_head, tail_mid


def _split(dim: int) -> tuple[int, int]:
    """The dimensions of the first and of the second bounding pass for vectors of ``dim``."""
    h = min(HEAD, dim)
    return h, min(MID, dim - h)


# ------------------------------------------------------------------------------------------------
# The ranker


BLOCK = 64  # rows per matrix-vector product: small enough that BLAS stays on one thread
HEAD = 64  # rotated dimensions of the first pass that bounds every tool's cosine
MID = 64  # rotated dimensions the second pass adds, for the rows the first one could not rule out
PCA_SAMPLE = 2048  # catalog rows the rotation is fitted on (any orthogonal rotation is exact; this one is tight)
PRUNE_FROM = 1024  # a smaller catalog is multiplied in full (the bounds would cost more than they save)
BOUND_SLACK = 1e-4  # float32 rounding of the bounds and of the rotation, many times over: no tool is lost


@dataclass(frozen=True, slots=True)
class _Catalog:
    names: tuple[str, ...]
    position: Mapping[str, int]
    matrix: Matrix  # (tools, dim), L2-normalised rows
    blocks: npt.NDArray[np.float32]  # the same rows, zero-padded, as (ceil(tools / BLOCK), BLOCK, dim)
    docs: tuple[SearchDoc | None, ...]  # what each row was embedded from (an unchanged tool keeps its object)
    keys: tuple[bytes, ...]  # the digest of each row's text (the vector cache's key)
    slot_rows: npt.NDArray[np.intp]  # the row of each slot of the ranker's index (-1: an empty slot)
    rotation: npt.NDArray[np.float64]  # (dim, dim) orthogonal: the catalog's principal axes, largest first
    head: npt.NDArray[np.float32]  # rotated rows' first HEAD dimensions, as (blocks, BLOCK, HEAD): the first pass
    mid: npt.NDArray[np.float32]  # rotated rows' next MID dimensions, (tools, MID): the second pass
    tail_head: npt.NDArray[np.float32]  # per row, the norm of the rotated dimensions after HEAD (rounded up)
    tail_mid: npt.NDArray[np.float64]  # per row, the norm of the rotated dimensions after HEAD + MID (rounded up)


class HybridRanker:
    """BM25F fused with cosine similarity (``mode="hybrid"``), or the embedding alone
    (``mode="embedding"``, for evaluation). Implements :class:`tooldir.deferred.search.Ranker`."""

    def __init__(
        self,
        embedder: StaticEmbedder | Callable[[], StaticEmbedder],
        *,
        alpha: float = ALPHA,
        min_cosine: float = MIN_COSINE,
        pool: int = POOL,
        mode: str = "hybrid",
        parts: bool = True,
        cover: bool = True,
        _index: SearchIndex | None = None,
        _cache: dict[bytes, npt.NDArray[np.float32]] | None = None,
        _previous: _Catalog | None = None,
    ) -> None:
        if mode not in {"hybrid", "embedding"}:
            raise ValueError(f"unknown ranker mode {mode!r}")
        self._embedder = embedder
        self.alpha = alpha
        self.parts = parts  # cut a query into parts (query_parts) for the semantic side
        self.cover = cover  # with parts: each part's best tool first
        self.min_cosine = min_cosine
        self.pool = pool
        self.prune = True  # rule tools out by bounds before the product (False: the full product, for tests)
        self.mode = mode
        self.name = "hybrid" if mode == "hybrid" else "embedding"
        self._index = _index
        self._cache: dict[bytes, npt.NDArray[np.float32]] = {} if _cache is None else _cache
        self._catalog: _Catalog | None = None
        self._previous = _previous  # the last catalog built before this one: its unchanged rows are reused
        self._lock = threading.Lock()
        self.embedded = 0  # tools embedded by this ranker (not taken from the cache)
        self.failure: str | None = None  # why the model could not be used (then: BM25F order)

    def follow(self, index: SearchIndex) -> HybridRanker:
        """The ranker of ``index``: same model and settings, this one's vectors reused."""
        return HybridRanker(
            self._embedder,
            alpha=self.alpha,
            min_cosine=self.min_cosine,
            pool=self.pool,
            mode=self.mode,
            parts=self.parts,
            cover=self.cover,
            _index=index,
            _cache=self._cache,
            _previous=self._catalog or self._previous,
        )

    def tuned(self, **settings: Any) -> HybridRanker:
        """The same ranker over the same catalog (shared, not rebuilt) with other settings
        (``alpha``, ``min_cosine``, ``pool``, ``parts``, ``cover``): for calibration."""
        other = self.as_mode(self.mode)
        for key, value in settings.items():
            if key not in {"alpha", "min_cosine", "pool", "parts", "cover"}:
                raise ValueError(f"unknown ranker setting {key!r}")
            setattr(other, key, value)
        return other

    def as_mode(self, mode: str) -> HybridRanker:
        """The same ranker over the same catalog (shared, not rebuilt) in another ``mode``."""
        other = HybridRanker(
            self._embedder,
            alpha=self.alpha,
            min_cosine=self.min_cosine,
            pool=self.pool,
            mode=mode,
            parts=self.parts,
            cover=self.cover,
            _index=self._index,
            _cache=self._cache,
        )
        other._catalog = self.catalog()
        return other

    @property
    def embedder(self) -> StaticEmbedder:
        """The model (loaded on first use; raises SemanticUnavailable)."""
        if not isinstance(self._embedder, StaticEmbedder):
            self._embedder = self._embedder()
        return self._embedder

    # -- the catalog matrix (built on first use) -------------------------------------------------

    def catalog(self) -> _Catalog:
        with self._lock:
            if self._catalog is None:
                self._catalog = self._build()
            return self._catalog

    def _build(self) -> _Catalog:
        index = self._index
        names = index.names() if index is not None else ()
        docs = tuple(index.doc(n) if index is not None else None for n in names)
        dim = self.embedder.dim
        padded = np.zeros((-(-len(names) // BLOCK) * BLOCK, dim), dtype=np.float32)
        raw = padded[: len(names)]  # the catalog's rows (and the cache's vectors) are views of one array
        keys: list[bytes] = [b""] * len(names)
        texts: dict[int, str] = {}
        prev = self._previous
        if prev is not None:  # an update: the rows of the tools whose document is the same object are kept
            old_docs, old_at = prev.docs, prev.position
            same = [
                (i, j)
                for i, (n, d) in enumerate(zip(names, docs, strict=True))
                if (j := old_at.get(n)) is not None and d is not None and old_docs[j] is d
            ]
            if same:
                mine, theirs = (np.fromiter(c, dtype=np.intp, count=len(same)) for c in zip(*same, strict=True))
                raw[mine] = prev.matrix[theirs]
                for i, j in same:
                    keys[i] = prev.keys[j]
            kept = {i for i, _ in same}
        else:
            kept = set()
        for i, (n, doc) in enumerate(zip(names, docs, strict=True)):
            if i not in kept:
                texts[i] = tool_text(doc) if doc is not None else " ".join(split_words(n))
                keys[i] = _key(texts[i])
        old = self._cache
        todo = [i for i in texts if keys[i] not in old]
        fresh = _normalised(self.embedder.embed([texts[i] for i in todo]))
        new = {keys[i]: fresh[j] for j, i in enumerate(todo)}
        for i in texts:
            raw[i] = new.get(keys[i], old.get(keys[i]))
        self.embedded = len(todo)
        self._cache = {k: raw[i] for i, k in enumerate(keys)}  # only what this catalog holds
        self._previous = None  # follow() hands this catalog on instead
        blocks = padded.reshape(-1, BLOCK, dim)
        rotation = prev.rotation if prev is not None and len(kept) * 2 >= len(names) else _principal_axes(raw)
        head, mid, tail_head, tail_mid = _rotated(padded, rotation, len(names))
        position = {n: i for i, n in enumerate(names)}
        table = index.slot_names() if index is not None else ()
        slot_rows = np.fromiter(
            (-1 if n is None else position.get(n, -1) for n in table), dtype=np.intp, count=len(table)
        )
        return _Catalog(
            names,
            position,
            raw,
            blocks,
            docs,
            tuple(keys),
            slot_rows,
            rotation,
            head,
            mid,
            tail_head,
            tail_mid,
        )

    def cosines(self, text: str) -> npt.NDArray[np.float32]:
        """Cosine of ``text`` with every tool, in ``index.names()`` order."""
        cat = self.catalog()
        q = self.embedder.embed_one(text)
        norm = float(np.linalg.norm(q))
        return self._all_cosines(cat, q / norm if norm > 0.0 else None)

    # -- ranking ---------------------------------------------------------------------------------

    def rank(
        self,
        parsed: ParsedQuery,
        lexical: LexicalScores | Sequence[Hit],
        top_k: int,
        allow: Callable[[str], bool] | None = None,
    ) -> list[Hit]:
        """Fuse the best ``pool`` lexical candidates (``lexical``: the query's BM25F scores, or
        those best candidates as hits, all holding every required term) with cosine similarity,
        with the query's parts when it has several (module docstring). Returns at most ``top_k``
        hits by (-score, name).

        Vectorised: a bounded pass over the catalog when a tool no term matches may come in on
        meaning (else only the candidates' rows, padded to the product's block so the cosines
        are the same to the bit), a threshold pass instead of a sort of the catalog, and the
        fusion over the candidates' arrays."""
        if top_k <= 0 or not parsed.terms:
            return []
        try:
            cat = self.catalog()
        except SemanticUnavailable as exc:  # the model went missing after startup: stay lexical
            self.failure = str(exc)
            if isinstance(lexical, LexicalScores):
                return lexical.top(top_k, allow=allow)
            return list(lexical[:top_k])
        if self.mode == "embedding":  # cosine alone over every allowed tool: no threshold, no terms
            return self._embedding_only(cat, parsed, top_k, allow)
        pool = max(top_k, self.pool)
        lex_rows, lex_scores = self._lexical_pool(cat, lexical, pool, allow)
        text = query_text(parsed)
        q, known = self.embedder.query(text)
        unit = _unit(q)
        # a required term is a filter on the whole query: such a query is not cut into parts
        parts = query_parts(text) if self.parts and not parsed.required else []
        part_units: list[tuple[npt.NDArray[np.float32] | None, bool]] = []
        part_lex: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]] = []
        for part in parts:
            pq, part_known = self.embedder.query(part)
            part_units.append((_unit(pq), part_known))
            part_lex.append(self._part_lexical(cat, part, pool, allow))
        pools = [lex_rows, *(r for r, _ in part_lex)]
        if not parsed.required and known:
            # a tool no query term matches comes in on meaning alone, only if the query holds a
            # word the model knows whole (random strings are split into meaningless pieces) and
            # only above the threshold; a required term rules out every tool BM25F did not find
            units = [u for u, ok in [(unit, True), *part_units] if ok and u is not None]
            for reach, reach_cos in self._reachable_of(cat, units):  # the whole query and its parts
                pools.append(self._semantic_pool(cat, reach, reach_cos, allow))
        rows = np.unique(np.concatenate(pools)) if len(pools) > 1 else np.unique(lex_rows)
        if not len(rows):
            return []
        a = self.alpha
        lx = _share(rows, lex_rows, lex_scores)
        at_rows = self._cosines_at_many(cat, rows, [unit, *(u for u, _ in part_units)])  # one gather
        sem = _minmax(at_rows[0].astype(np.float64))
        if parts:
            per_part = np.stack([c.astype(np.float64) for c in at_rows[1:]])
            sem = FULL_WEIGHT * sem + (1 - FULL_WEIGHT) * _minmax(per_part.max(axis=0))
        fused = a * lx + (1 - a) * sem
        if parts and self.cover:
            # each part's best tool (by the part's own fusion) before any other: +1 (fused <= 1);
            # only a tool that matches a term of the part or reaches the threshold on its meaning
            bonus = np.zeros(len(rows), dtype=np.float64)
            for (_, part_known), (p_rows, p_scores), part_cos in zip(part_units, part_lex, per_part, strict=True):
                p_lx = _share(rows, p_rows, p_scores)
                mine = a * p_lx + (1 - a) * _minmax(part_cos)
                evidence = (p_lx > 0) | ((part_cos >= self.min_cosine) & part_known)
                if evidence.any():
                    at = np.flatnonzero(evidence)
                    bonus[at[np.lexsort((rows[at], -mine[at]))[0]]] = 1.0
            fused += bonus
        order = np.lexsort((rows, -fused))[:top_k]  # rows are in name order: (-score, name)
        names = cat.names
        return [Hit(names[r], round(f, 6)) for r, f in zip(rows[order].tolist(), fused[order].tolist(), strict=True)]

    def _part_lexical(
        self, cat: _Catalog, part: str, pool: int, allow: Callable[[str], bool] | None
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        """Catalog rows and BM25F scores of the best ``pool`` lexical candidates of one part."""
        index = self._index
        parsed = parse_query(part)
        if index is None or not parsed.terms:
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)
        return self._lexical_pool(cat, lexical_scores(index, parsed), pool, allow)

    def _lexical_pool(
        self,
        cat: _Catalog,
        lexical: LexicalScores | Sequence[Hit],
        pool: int,
        allow: Callable[[str], bool] | None,
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        """Catalog rows and BM25F scores of the best ``pool`` lexical candidates."""
        if isinstance(lexical, LexicalScores) and allow is None and lexical.index is self._index:
            slots, scores = lexical.best_ordered(pool, cat.slot_rows)  # slot -> row: no name looked up
            return cat.slot_rows[slots], scores
        if isinstance(lexical, LexicalScores):
            slots, scores = lexical.best(pool, allow=allow)
            names: Iterable[str] = lexical.names_of(slots.tolist())
            values: Iterable[float] = scores.tolist()
        else:
            names, values = [h.name for h in lexical], [h.score for h in lexical]
        position = cat.position
        pairs = [(position[n], v) for n, v in zip(names, values, strict=True) if n in position]
        return (
            np.fromiter((r for r, _ in pairs), dtype=np.intp, count=len(pairs)),
            np.fromiter((v for _, v in pairs), dtype=np.float64, count=len(pairs)),
        )

    def _all_cosines(self, cat: _Catalog, unit: npt.NDArray[np.float32] | None) -> npt.NDArray[np.float32]:
        if unit is None or not cat.names:
            return np.zeros(len(cat.names), dtype=np.float32)
        # stacked small products: one multithreaded BLAS call at 10k rows costs more in thread
        # wake-ups (and far more on a loaded machine) than it saves
        return (cat.blocks @ unit).reshape(-1)[: len(cat.names)]

    def _cosines_at(
        self, cat: _Catalog, rows: npt.NDArray[np.intp], unit: npt.NDArray[np.float32] | None
    ) -> npt.NDArray[np.float32]:
        """The cosines of ``rows`` alone, equal to the bit to :meth:`_all_cosines`' (BLAS gives
        another rounding for a number of rows that is not a multiple of its kernel's: the rows
        are padded to the same blocks)."""
        if unit is None or not len(rows):
            return np.zeros(len(rows), dtype=np.float32)
        dim = cat.matrix.shape[1]
        padded = np.zeros((-(-len(rows) // BLOCK) * BLOCK, dim), dtype=np.float32)
        padded[: len(rows)] = cat.matrix[rows]
        return (padded.reshape(-1, BLOCK, dim) @ unit).reshape(-1)[: len(rows)]

    def _cosines_at_many(
        self, cat: _Catalog, rows: npt.NDArray[np.intp], units: Sequence[npt.NDArray[np.float32] | None]
    ) -> list[npt.NDArray[np.float32]]:
        """:meth:`_cosines_at` of each of ``units`` (the same bits), gathering the rows once."""
        if not len(rows):
            return [np.zeros(0, dtype=np.float32) for _ in units]
        dim = cat.matrix.shape[1]
        padded = np.zeros((-(-len(rows) // BLOCK) * BLOCK, dim), dtype=np.float32)
        padded[: len(rows)] = cat.matrix[rows]
        blocks = padded.reshape(-1, BLOCK, dim)
        return [
            np.zeros(len(rows), dtype=np.float32) if u is None else (blocks @ u).reshape(-1)[: len(rows)] for u in units
        ]

    def _reachable_of(
        self, cat: _Catalog, units: Sequence[npt.NDArray[np.float32]]
    ) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]]:
        """Per unit vector of ``units``: (rows, exact cosines) of every tool whose cosine may reach
        the threshold (a superset, ascending; the cosines are :meth:`_cosines_at`'s, equal to the
        bit to the full product's). Two bounding passes in the catalog's rotated coordinates
        (:func:`_principal_axes`: a rotation keeps every cosine) rule the other tools out without
        reading their vectors: the first over HEAD dimensions of every row, for all units at once
        (``head . q_head + |row rest| * |q rest|``, Cauchy-Schwarz on the rest), the second adds
        MID dimensions for the rows the first kept. A small catalog, a low threshold or a generic
        query that reaches much of the catalog costs the full product instead (:meth:`_plain_reach`)."""
        n = len(cat.names)
        if not units or not n:
            return []
        if not self.prune or n < PRUNE_FROM:
            return [self._plain_reach(cat, u) for u in units]
        floor = self.min_cosine - BOUND_SLACK
        h, m = cat.head.shape[2], cat.mid.shape[1]
        stacked = np.stack(units, axis=1)  # (dim, k)
        turned = cat.rotation[:, : h + m].T @ stacked.astype(np.float64)  # (h + m, k), float64
        whole = np.einsum("ij,ij->j", stacked, stacked, dtype=np.float64)
        q_head, q_mid = turned[:h], turned[h:]
        left_head = whole - np.einsum("ij,ij->j", q_head, q_head)
        left_mid = left_head - np.einsum("ij,ij->j", q_mid, q_mid)
        rest_head = np.sqrt(np.maximum(left_head, 0.0) + 1e-6)
        rest_mid = np.sqrt(np.maximum(left_mid, 0.0) + 1e-6)
        k = len(units)
        first = np.ascontiguousarray((cat.head @ q_head.astype(np.float32)).reshape(-1, k)[:n].T)  # (k, n)
        reach = first + rest_head.astype(np.float32)[:, None] * cat.tail_head[None, :]  # float32: in the slack
        rows = np.flatnonzero(reach[0] >= floor if k == 1 else (reach >= floor).any(axis=0))
        if len(rows) > n // 2:  # the second pass would read more than the full product
            return [self._plain_reach(cat, u) for u in units]
        first = first[:, rows].T
        second = first + (cat.mid[rows] @ q_mid.astype(np.float32)) + cat.tail_mid[rows, None] * rest_mid
        out = []
        for j, u in enumerate(units):
            kept = rows[second[:, j] >= floor]
            out.append((kept, self._cosines_at(cat, kept, u)))
        return out

    def _plain_reach(
        self, cat: _Catalog, unit: npt.NDArray[np.float32]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """:meth:`_reachable_of` of one unit by the full product (the reference the bounds must equal)."""
        cos = self._all_cosines(cat, unit)
        rows = np.flatnonzero(cos >= np.float32(self.min_cosine - BOUND_SLACK))
        return rows, cos[rows]

    def _semantic_pool(
        self,
        cat: _Catalog,
        rows: npt.NDArray[np.intp],
        cos: npt.NDArray[np.float32],
        allow: Callable[[str], bool] | None,
    ) -> npt.NDArray[np.intp]:
        """Of ``rows`` (ascending, with their cosines ``cos``), the best ``pool`` allowed tools by
        (-cosine, name) whose cosine reaches the threshold (compared in float64, as a Python
        float would be)."""
        keep = cos >= np.float64(self.min_cosine)
        above, values = rows[keep], cos[keep]
        take = self.pool if allow is None else 4 * self.pool
        while True:
            at = np.arange(len(above))
            if len(above) > take:  # every tool tied with the take-th best comes along
                kth = np.partition(values, len(above) - take)[len(above) - take]
                at = np.flatnonzero(values >= kth)
            part = above[at[np.lexsort((above[at], -values[at]))]]
            if allow is None:
                return part[: self.pool]
            names = cat.names
            ok = [r for r in part.tolist() if allow(names[r])][: self.pool]
            if len(ok) == self.pool or len(part) == len(above):
                return np.asarray(ok, dtype=np.intp)
            take *= 4

    def _embedding_only(
        self, cat: _Catalog, parsed: ParsedQuery, top_k: int, allow: Callable[[str], bool] | None
    ) -> list[Hit]:
        cos = self.cosines(query_text(parsed))
        names = cat.names
        ranked = sorted(
            (i for i in np.argsort(-cos, kind="stable")[: top_k if allow is None else len(names)]),
            key=lambda i: (-float(cos[i]), names[i]),
        )
        out = [Hit(names[i], round(float(cos[i]), 6)) for i in ranked if allow is None or allow(names[i])]
        return out[:top_k]
