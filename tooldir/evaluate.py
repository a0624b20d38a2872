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
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .search import SearchDoc, SearchIndex, doc_from_schema, split_words

KS = (1, 5, 10)


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    query: str
    relevant: tuple[str, ...]


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
        out.append(LabelledQuery(query, tuple(dict.fromkeys(str(r) for r in relevant))))
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
    n: int
    tools: int
    metrics: dict[str, float]
    baseline: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "tools": self.tools, "metrics": self.metrics, "baseline": self.baseline}


def evaluate(
    docs: Sequence[SearchDoc], queries: Sequence[LabelledQuery], *, on_query: Callable[[], None] | None = None
) -> EvalReport:
    """Score tooldir's search and the plain BM25 baseline on ``queries``; ``on_query`` (if given) is
    called after each of the ``2 * len(queries)`` searches (progress)."""
    depth = max(KS)  # every metric looks at most this deep
    index = SearchIndex.build(docs)
    baseline = PlainBM25(docs)
    tick = on_query or (lambda: None)

    def ours(query: str) -> list[str]:
        names = [h.name for h in index.search(query, top_k=depth)]
        tick()
        return names

    def theirs(query: str) -> list[str]:
        names = baseline.search(query, depth)
        tick()
        return names

    return EvalReport(
        n=len(queries),
        tools=len(docs),
        metrics=score_rankings(queries, [ours(q.query) for q in queries]),
        baseline=score_rankings(queries, [theirs(q.query) for q in queries]),
    )


def evaluate_files(tools: str | Path, queries: str | Path) -> EvalReport:
    docs = read_tools(tools)
    return evaluate(docs, read_queries(queries, {d.name for d in docs}))
