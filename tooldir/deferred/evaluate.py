"""Retrieval evaluation of tool search on a labelled set, beside a plain BM25 baseline.

Input (DESIGN §8): a tools file with lines ``{"name", "description", "input_schema"}`` and a
queries file with lines ``{"query", "relevant": [names]}``. Both rankers run in the same process
on the same data. Metrics (binary relevance), averaged over queries:

- ``recall@k``: share of a query's relevant tools found in the top k;
- ``complete-recall@k``: 1 when *every* relevant tool is in the top k, else 0;
- ``nDCG@k``: discounted cumulative gain over the ideal ordering;
- ``MRR@10``: reciprocal rank of the first relevant tool within the top 10.

The baseline is plain BM25 (k1=1.2, b=0.75) over one bag of words per tool: the name split on
camelCase/snake_case, the description and the parameter names; no stemming, no stop words.

Rankers scored side by side (:func:`evaluate`): every one available: ``hybrid`` with the
``[semantic]`` extra (unless ``TOOLDIR_SEMANTIC`` disables it), ``bm25f`` alone, ``plain_bm25``,
and with the extra the ``embedding`` alone. The active one (the headline ``metrics``) is the best
installed, or the one asked for (``ranker="bm25f"`` / ``"hybrid"``; ``tooldir eval --ranker``). Every figure is also given per split: ``train``/``test`` (:func:`split_of`)
and the file's own split labels.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError
from .search import Ranker, SearchDoc, SearchIndex, doc_from_schema, parse_query, split_words

KS = (1, 5, 10)


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    query: str
    relevant: tuple[str, ...]
    id: str = ""
    split: str = ""  # as labelled in the file ("dev", "test_in_domain", ...), or ""


TRAIN_SPLITS = frozenset({"train", "dev"})


def split_of(query: LabelledQuery) -> str:
    """``"train"`` or ``"test"``. A query labelled with a split keeps it (``dev``/``train`` are
    training); an unlabelled one (BFCL) is training when the first byte of SHA-256 of its id
    (or, without one, its text) is even: a fixed, content-keyed half."""
    if query.split:
        return "train" if query.split in TRAIN_SPLITS else "test"
    key = (query.id or query.query).encode("utf-8", "surrogatepass")
    return "train" if hashlib.sha256(key).digest()[0] % 2 == 0 else "test"


RANKERS = ("bm25f", "hybrid", "ensemble")  # what ``tooldir eval --ranker`` accepts


class EvalDataError(ConfigError):
    """An evaluation file is unreadable or malformed (exit code 2)."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line

    def diagnostics(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


def _read_jsonl(path: str | Path) -> Iterable[tuple[int, dict[str, Any]]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalDataError(f"cannot read: {exc}", path=str(path)) from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise EvalDataError(f"not valid JSON ({exc})", path=str(path), line=number) from None
        if not isinstance(value, dict):
            raise EvalDataError("expected a JSON object per line", path=str(path), line=number)
        yield number, value


def read_tools(path: str | Path) -> list[SearchDoc]:
    docs: list[SearchDoc] = []
    seen: set[str] = set()
    for number, row in _read_jsonl(path):
        name, desc = row.get("name"), row.get("description", "")
        if not isinstance(name, str) or not name:
            raise EvalDataError("'name' must be a non-empty string", path=str(path), line=number)
        if not isinstance(desc, str):
            raise EvalDataError("'description' must be a string", path=str(path), line=number)
        if name in seen:
            raise EvalDataError(f"duplicate tool name {name!r}", path=str(path), line=number)
        seen.add(name)
        keywords = row.get("keywords", [])
        docs.append(doc_from_schema(name, desc, row.get("input_schema"), [k for k in keywords if isinstance(k, str)]))
    if not docs:
        raise EvalDataError("no tools", path=str(path))
    return docs


def read_queries(path: str | Path, known: set[str]) -> list[LabelledQuery]:
    out: list[LabelledQuery] = []
    for number, row in _read_jsonl(path):
        query, relevant = row.get("query"), row.get("relevant")
        if not isinstance(query, str) or not isinstance(relevant, list) or not relevant:
            raise EvalDataError(
                "each line needs 'query' (string) and 'relevant' (non-empty list)", path=str(path), line=number
            )
        unknown = [r for r in relevant if r not in known]
        if unknown:
            raise EvalDataError(f"relevant tool(s) not in the tools file: {unknown[:3]}", path=str(path), line=number)
        qid, split = row.get("id", ""), row.get("split", "")
        out.append(
            LabelledQuery(
                query,
                tuple(dict.fromkeys(str(r) for r in relevant)),
                qid if isinstance(qid, str) else str(qid),
                split if isinstance(split, str) else "",
            )
        )
    if not out:
        raise EvalDataError("no queries", path=str(path))
    return out


# ------------------------------------------------------------------------------------------------
# Baseline


class PlainBM25:
    """Plain BM25 over name (split) + description + parameter names, one bag of words."""

    def __init__(self, docs: Sequence[SearchDoc], k1: float = 1.2, b: float = 0.75) -> None:
        self.names = [d.name for d in docs]
        bags = [
            split_words(d.name) + split_words(d.description) + [w for p, _ in d.params for w in split_words(p)]
            for d in docs
        ]
        n = len(bags)
        avg = sum(len(bag) for bag in bags) / n or 1.0
        tfs: list[dict[str, int]] = []
        df: dict[str, int] = {}
        for bag in bags:
            tf: dict[str, int] = {}
            for w in bag:
                tf[w] = tf.get(w, 0) + 1
            tfs.append(tf)
            for w in tf:
                df[w] = df.get(w, 0) + 1
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for i, (tf, bag) in enumerate(zip(tfs, bags, strict=True)):
            norm = k1 * (1 - b + b * len(bag) / avg)
            for w, c in tf.items():
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                self.postings.setdefault(w, []).append((i, idf * c * (k1 + 1) / (c + norm)))

    def search(self, query: str, top_k: int) -> list[str]:
        acc: dict[int, float] = {}
        for w in set(split_words(query)):
            for i, s in self.postings.get(w, ()):
                acc[i] = acc.get(i, 0.0) + s
        ranked = heapq.nsmallest(top_k, acc.items(), key=lambda e: (-e[1], self.names[e[0]]))
        return [self.names[i] for i, _ in ranked]


# ------------------------------------------------------------------------------------------------
# Metrics


def score_rankings(queries: Sequence[LabelledQuery], rankings: Sequence[Sequence[str]]) -> dict[str, float]:
    totals: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        totals[key] = totals.get(key, 0.0) + value

    for q, ranked in zip(queries, rankings, strict=True):
        rel = set(q.relevant)
        for k in KS:
            found = len(rel.intersection(ranked[:k]))
            add(f"recall@{k}", found / len(rel))
            if k > 1:
                add(f"complete-recall@{k}", 1.0 if found == len(rel) else 0.0)
                dcg = sum(1 / math.log2(r + 2) for r, name in enumerate(ranked[:k]) if name in rel)
                ideal = sum(1 / math.log2(r + 2) for r in range(min(len(rel), k)))
                add(f"nDCG@{k}", dcg / ideal)
        add("MRR@10", next((1 / (r + 1) for r, name in enumerate(ranked[:10]) if name in rel), 0.0))
    n = len(queries)
    order = [f"recall@{k}" for k in KS] + ["nDCG@5", "nDCG@10", "complete-recall@5", "complete-recall@10", "MRR@10"]
    return {key: round(totals[key] / n, 4) for key in order}


@dataclass(frozen=True, slots=True)
class EvalReport:
    """``metrics`` are the active ranker's (``ranker``: ``"hybrid"`` with the semantic extra,
    else ``"bm25f"``), ``baseline`` plain BM25's; ``rankers`` holds every ranker that ran
    (``hybrid``, ``bm25f``, ``plain_bm25``, and ``embedding`` alone with the extra) and
    ``splits`` the same per ``train``/``test`` split (:func:`split_of`) and per split label of
    the file when it has several."""

    n: int
    tools: int
    metrics: dict[str, float]
    baseline: dict[str, float]
    ranker: str = "bm25f"
    rankers: dict[str, dict[str, float]] = field(default_factory=dict)
    splits: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str = ""  # why the semantic ranker did not run, if it did not

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "n": self.n,
            "tools": self.tools,
            "ranker": self.ranker,
            "metrics": self.metrics,
            "baseline": self.baseline,
            "rankers": self.rankers,
            "splits": self.splits,
        }
        if self.note:
            data["semantic"] = self.note
        return data


Progress = Callable[[int, int], None]  # (queries done, total)


def evaluate(
    docs: Sequence[SearchDoc],
    queries: Sequence[LabelledQuery],
    *,
    ranker: Ranker | Literal["default", "hybrid", "ensemble", "bm25f"] | None = "default",
    progress: Progress | None = None,
) -> EvalReport:
    """Score every ranker available on ``queries``. The active one (the report's ``metrics``):
    ``"default"`` is the best one installed (:func:`tooldir.deferred.ensemble.default_ranker`: the
    hybrid with the extra, unless ``TOOLDIR_SEMANTIC`` says otherwise), ``"hybrid"`` the hybrid
    (:class:`~tooldir.errors.ConfigError`, exit code 2, when it cannot run), ``"bm25f"`` or None plain BM25F. Every
    ranker that can run is scored beside it."""
    from .ensemble import default_ranker
    from .semantic import SEMANTIC_ENV, HybridRanker, load_embedder, semantic_status

    depth = max(KS)  # every metric looks at most this deep
    note = ""
    choice = ranker if isinstance(ranker, str) else None
    if choice == "hybrid":
        usable, why = semantic_status({}, load=True)
        if not usable:
            raise ConfigError(f"the hybrid ranker cannot run: {why}")
        ranker = HybridRanker(load_embedder)
    elif choice == "ensemble":
        from .ensemble import ensemble_status

        usable, why = semantic_status({}, load=True)
        if usable:
            usable, why = ensemble_status(load=True)
        if not usable:
            raise ConfigError(f"the ensemble ranker cannot run: {why}")
        ranker = default_ranker({SEMANTIC_ENV: "ensemble"})
    elif choice in {"default", "bm25f"}:
        # "bm25f" is the active one, the hybrid (if installed and not disabled) still scored beside it
        ranker = default_ranker()
        if ranker is None:
            note = semantic_status(load=False)[1]
    elif choice is not None:
        raise ConfigError(f"unknown ranker {choice!r}: choose bm25f, hybrid or ensemble")
    if isinstance(ranker, str):  # every name was handled above
        raise ConfigError(f"unknown ranker {ranker!r}")
    others: dict[str, Any] = {}  # every other semantic ranker that can run, scored beside the active one
    if ranker is not None and getattr(ranker, "name", "") in {"hybrid", "ensemble"}:
        from .ensemble import EnsembleRanker, ensemble_status

        if isinstance(ranker, EnsembleRanker):
            ranker.background = False  # an evaluation scores the ensemble itself, not its fallback
            if ranker.fallback is not None:
                others["hybrid"] = ranker.fallback
        elif ensemble_status(load=False)[0] and choice != "hybrid":
            plus = default_ranker({SEMANTIC_ENV: "ensemble"})
            if isinstance(plus, EnsembleRanker):
                plus.background = False
                others["ensemble"] = plus
    index = SearchIndex.build(docs, ranker=ranker)
    lexical = SearchIndex.build(docs) if index.ranker is not None else index
    baseline = PlainBM25(docs)
    engines: dict[str, Callable[[str], list[str]]] = {}
    if index.ranker is not None:
        engines[index.ranker.name] = lambda q: [h.name for h in index.search(q, top_k=depth)]
    for other_name, other in list(others.items()):
        other_index = SearchIndex.build(docs, ranker=other)
        engines[other_name] = functools.partial(_names, other_index, depth)
        if isinstance(other_index.ranker, HybridRanker):
            others["hybrid_index"] = other_index.ranker
    engines["bm25f"] = lambda q: [h.name for h in lexical.search(q, top_k=depth)]
    engines["plain_bm25"] = lambda q: baseline.search(q, depth)
    hybrid_live = index.ranker if isinstance(index.ranker, HybridRanker) else others.get("hybrid_index")
    if isinstance(hybrid_live, HybridRanker):
        alone = hybrid_live.as_mode("embedding")
        engines["embedding"] = lambda q: [h.name for h in alone.rank(parse_query(q), (), depth)]
    total = len(queries) * len(engines)
    rankings: dict[str, list[list[str]]] = {}
    done = 0
    for name, engine in engines.items():
        rankings[name] = []
        for q in queries:
            rankings[name].append(engine(q.query))
            done += 1
            if progress is not None and (done % 50 == 0 or done == total):
                progress(done, total)
    active = index.ranker.name if index.ranker is not None and choice != "bm25f" else "bm25f"
    rankers = {name: score_rankings(queries, r) for name, r in rankings.items()}
    splits: dict[str, dict[str, Any]] = {}
    labels = sorted({q.split for q in queries if q.split} - {"train", "test"})
    groups: list[tuple[str, Callable[[LabelledQuery], bool]]] = [
        ("train", lambda q: split_of(q) == "train"),
        ("test", lambda q: split_of(q) == "test"),
    ]
    if (
        len({q.split for q in queries}) > 1
    ):  # the file's own splits too (Seal-Tools: dev, test_in_domain, test_out_domain)
        groups += [(label, functools.partial(_labelled, label)) for label in labels]
    for split, member in groups:
        picked = [i for i, q in enumerate(queries) if member(q)]
        if picked and len(picked) < len(queries):
            sub = [queries[i] for i in picked]
            splits[split] = {
                "n": len(sub),
                "rankers": {name: score_rankings(sub, [r[i] for i in picked]) for name, r in rankings.items()},
            }
    return EvalReport(
        n=len(queries),
        tools=len(docs),
        metrics=rankers[active],
        baseline=rankers["plain_bm25"],
        ranker=active,
        rankers=rankers,
        splits=splits,
        note=note,
    )


def _names(index: SearchIndex, depth: int, query: str) -> list[str]:
    return [h.name for h in index.search(query, top_k=depth)]


def _labelled(label: str, query: LabelledQuery) -> bool:
    return query.split == label


def evaluate_files(
    tools: str | Path,
    queries: str | Path,
    *,
    ranker: Literal["default", "hybrid", "ensemble", "bm25f"] = "default",
    progress: Progress | None = None,
) -> EvalReport:
    docs = read_tools(tools)
    return evaluate(docs, read_queries(queries, {d.name for d in docs}), ranker=ranker, progress=progress)
