"""Search latency at 10k tools: tooldir's BM25F index vs rank_bm25 and bm25s, same corpus and queries.

The corpus is the 5,363 real tools of the shared Seal-Tools and BFCL sets plus deterministic
variants of them up to 10,000 (a variant keeps one tool's name and parameters, adds "_v<i>", and
mixes in half of another tool's description). Queries are the sets' own queries (sampled).
Each engine tokenizes the query inside the timed region. Run: ``python3 benchmarks/bench_search.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tooldir.evaluate import read_queries, read_tools
from tooldir.search import SearchDoc, SearchIndex, split_words, tokenize

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"  # beside the checkout


def corpus(size: int) -> tuple[list[SearchDoc], list[str]]:
    docs: list[SearchDoc] = []
    queries: list[str] = []
    for name in ("sealtools", "bfcl"):
        tools = read_tools(EVAL / name / "tools.jsonl")
        docs.extend(tools)
        queries.extend(q.query for q in read_queries(EVAL / name / "queries.jsonl", {d.name for d in tools}))
    real = list(docs)
    rng = random.Random(6)
    i = 0
    while len(docs) < size:
        a, b = real[i % len(real)], rng.choice(real)
        words = b.description.split()
        docs.append(
            SearchDoc(f"{a.name}_v{i}", a.description + " " + " ".join(words[: len(words) // 2]), a.keywords, a.params)
        )
        i += 1
    return docs[:size], queries


def bag(d: SearchDoc) -> list[str]:
    return split_words(d.name) + split_words(d.description) + [w for p, _ in d.params for w in split_words(p)]


def timed(fn: Callable[[str], object], queries: list[str]) -> dict[str, float]:
    """p50/p99 of wall time and of CPU time per query (CPU time is robust on a shared, loaded machine)."""
    wall, cpu = [], []
    for q in queries:
        t, c = time.perf_counter(), time.thread_time()
        fn(q)
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    wall.sort()
    cpu.sort()
    p99 = int(0.99 * (len(queries) - 1))
    return {
        "p50_ms": statistics.median(wall),
        "p99_ms": wall[p99],
        "cpu_p50_ms": statistics.median(cpu),
        "cpu_p99_ms": cpu[p99],
    }


def built(fn: Callable[[], object]) -> tuple[object, dict[str, float]]:
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    value = fn()
    return value, {"build_s": time.perf_counter() - t, "build_cpu_s": time.process_time() - c}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument(
        "--style",
        choices=("requests", "keywords"),
        default="requests",
        help="requests: the sets' user requests (long); keywords: 3 content words of a random tool's description (what a model sends to tool_search)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    docs, all_queries = corpus(args.tools)
    rng = random.Random(1)
    if args.style == "keywords":
        queries = [" ".join(tokenize(rng.choice(docs).description)[:3]) or "file" for _ in range(args.queries)]
    else:
        queries = rng.sample(all_queries, min(args.queries, len(all_queries)))
    k = args.top_k
    results: dict[str, dict[str, float]] = {}

    index, cost = built(lambda: SearchIndex.build(docs))
    assert isinstance(index, SearchIndex)
    results["tooldir"] = {**cost, **timed(lambda q: index.search(q, top_k=k), queries)}

    from rank_bm25 import BM25Okapi

    bags = [bag(d) for d in docs]
    okapi, cost = built(lambda: BM25Okapi(bags, k1=1.2, b=0.75))

    def rank_bm25_top(q: str) -> object:
        scores = okapi.get_scores(list(dict.fromkeys(split_words(q))))  # type: ignore[attr-defined]
        top = np.argpartition(-scores, k)[:k]
        return top[np.argsort(-scores[top])]

    results["rank_bm25"] = {**cost, **timed(rank_bm25_top, queries)}

    import bm25s

    ids, vocab = _vocab_ids(bags)

    def bm25s_build() -> object:
        retriever = bm25s.BM25(k1=1.2, b=0.75)
        retriever.index(bm25s.tokenization.Tokenized(ids, vocab), show_progress=False)
        return retriever

    retriever, cost = built(bm25s_build)

    def bm25s_top(q: str) -> object:
        qids = [vocab[w] for w in dict.fromkeys(split_words(q)) if w in vocab]
        if not qids:
            return []
        scores = retriever.get_scores(qids)  # type: ignore[attr-defined]
        top = np.argpartition(-scores, k)[:k]
        return top[np.argsort(-scores[top])]

    results["bm25s get_scores+top-k"] = {**cost, **timed(bm25s_top, queries)}

    base = results["rank_bm25"]
    report = {
        "tools": len(docs),
        "queries": len(queries),
        "style": args.style,
        "top_k": k,
        "engines": {n: {key: round(v, 4) for key, v in r.items()} for n, r in results.items()},
        "tooldir_vs_rank_bm25": {
            key: round(results["tooldir"][key] / base[key], 4)
            for key in ("p50_ms", "p99_ms", "cpu_p50_ms", "cpu_p99_ms")
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{len(docs)} tools, {len(queries)} {args.style} queries, top {k}")
    print(f"{'engine':24s} {'build s':>8s} {'cpu s':>7s} {'p50 ms':>8s} {'p99 ms':>8s} {'cpu p50':>8s} {'cpu p99':>8s}")
    for name, r in results.items():
        print(
            f"{name:24s} {r['build_s']:8.3f} {r['build_cpu_s']:7.3f} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f}"
            f" {r['cpu_p50_ms']:8.3f} {r['cpu_p99_ms']:8.3f}"
        )
    ratio = report["tooldir_vs_rank_bm25"]
    print("tooldir / rank_bm25 (target <= 0.1x): " + ", ".join(f"{key} {v:.3f}x" for key, v in ratio.items()))


def _vocab_ids(bags: list[list[str]]) -> tuple[list[list[int]], dict[str, int]]:
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(w, len(vocab)) for w in b] for b in bags]
    return ids, vocab


if __name__ == "__main__":
    main()
