"""A straightforward BM25F scorer, written from the formula with no index at all: the oracle the
vectorised index is checked against (same scores within float tolerance, same order)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

from tooldir.deferred.search import FIELDS, Bm25fParams, SearchDoc, parse_query, tokenize


def fields(doc: SearchDoc) -> dict[str, list[str]]:
    return {
        "name": tokenize(doc.name),
        "description": tokenize(doc.description),
        "keywords": tokenize(" ".join(doc.keywords)),
        "param_names": tokenize(" ".join(p for p, _ in doc.params)),
        "param_descriptions": tokenize(" ".join(d for _, d in doc.params)),
    }


def scores(docs: Iterable[SearchDoc], query: str, params: Bm25fParams | None = None) -> dict[str, float]:
    """Every tool that matches a query term and all ``+required`` terms, with its BM25F score."""
    p = params or Bm25fParams()
    docs = list(docs)
    split = {d.name: fields(d) for d in docs}
    n = len(docs)
    avg = {f: max(sum(len(s[f]) for s in split.values()) / n, 1e-9) for f in FIELDS} if n else {}
    df: Counter[str] = Counter()
    for s in split.values():
        df.update({t for words in s.values() for t in words})
    parsed = parse_query(query)
    out: dict[str, float] = {}
    for name, s in split.items():
        present = {t for words in s.values() for t in words}
        if not set(parsed.required) <= present or not present & set(parsed.terms):
            continue
        total = 0.0
        for t in parsed.terms:
            x = sum(
                p.weights[f] * s[f].count(t) / (1 - p.b[f] + p.b[f] * len(s[f]) / avg[f]) for f in FIELDS if t in s[f]
            )
            if x > 0:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                total += idf * x / (p.k1 + x)
        out[name] = total
    return out


def top(
    docs: Iterable[SearchDoc], query: str, k: int, allow: Callable[[str], bool] | None = None
) -> list[tuple[str, float]]:
    """The contract: the k best by (-score, name), scores equal to 1e-9 being ties."""
    ranked = sorted(scores(docs, query).items(), key=lambda e: (-round(e[1], 9), e[0]))
    return [(n, s) for n, s in ranked if allow is None or allow(n)][:k]
