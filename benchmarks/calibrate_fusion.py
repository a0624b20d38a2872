"""Choose the hybrid ranker's fusion weight and miss threshold on TRAINING splits only.

Seal-Tools: its ``dev`` split. BFCL has no split field: a query is in training when the first
byte of SHA-256 of its ``id`` is even (:func:`tooldir.evaluate.split_of`), about half.
Test splits are never read here. Run: ``python3 benchmarks/calibrate_fusion.py [--json]``.

For each (parameter weight, alpha) on a grid it prints nDCG@10 and recall@5 of the hybrid on
each training set and of BM25F alone; the chosen pair maximises the *smallest* gain over BM25F
among the two sets and the two metrics (maximin: what helps everywhere, not what helps one set
most); ties go to the larger alpha (more BM25F), then the smaller weight. The miss
threshold is the 99th percentile of the best cosine that word salads (three random whole-word
tokens of the model's vocabulary) reach with any tool of either catalog, rounded up to 0.05; the
script also prints how many of the training queries' gold tools that no query term matches fall
below it (what the threshold costs), and checks that random letter strings never pass the
known-word gate.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import string
from pathlib import Path

import numpy as np

from tooldir.evaluate import read_queries, read_tools, score_rankings, split_of
from tooldir.search import SearchIndex, parse_query
from tooldir.semantic import POOL, HybridRanker, load_embedder

EVAL = next(
    (p / "shared" / "eval" for p in Path(__file__).resolve().parents if (p / "shared" / "eval").is_dir()),
    Path(__file__).resolve().parents[2] / "shared" / "eval",
)  # beside the checkout (or a worktree folder's parent)
GRID = [round(0.6 + 0.05 * i, 2) for i in range(9)]
WEIGHTS = (0.0, 0.25, 0.5, 1.0)
METRICS = ("nDCG@10", "recall@5")


def salad(rng: random.Random, vocabulary: list[str], n: int) -> list[str]:
    return [" ".join(rng.choice(vocabulary) for _ in range(3)) for _ in range(n)]


def nonsense(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 9))) for _ in range(3)]
        out.append(" ".join(words))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    embedder = load_embedder()
    vocabulary = sorted(w for w in embedder._whole if w.isalpha() and w.islower() and len(w) >= 4)
    rng = random.Random(15)
    salads = salad(rng, vocabulary, 500)
    gated = [embedder.knows_any(text) for text in nonsense(rng, 300)]
    table: dict[str, dict[str, dict[str, float]]] = {}
    salad_best: dict[float, list[float]] = {w: [] for w in WEIGHTS}
    gold_unmatched: dict[float, list[float]] = {w: [] for w in WEIGHTS}
    for name in ("sealtools", "bfcl"):
        docs = read_tools(EVAL / name / "tools.jsonl")
        queries = [
            q for q in read_queries(EVAL / name / "queries.jsonl", {d.name for d in docs}) if split_of(q) == "train"
        ]
        base = SearchIndex.build(docs)
        table[name] = {}
        parsed = [parse_query(q.query) for q in queries]
        lexical = [base.lexical(p, top_k=POOL) for p in parsed]
        m = score_rankings(queries, [[h.name for h in lx[:10]] for lx in lexical])
        table[name]["bm25f"] = {"nDCG@10": m["nDCG@10"], "recall@5": m["recall@5"], "n": len(queries)}
        for w in WEIGHTS:
            first = HybridRanker(embedder, param_weight=w).follow(base)
            for alpha in GRID:
                ranker = first if alpha == first.alpha else first.with_alpha(alpha)
                ranked = [[h.name for h in ranker.rank(p, lx, 10)] for p, lx in zip(parsed, lexical, strict=True)]
                m = score_rankings(queries, ranked)
                table[name][f"{w}/{alpha}"] = {"nDCG@10": m["nDCG@10"], "recall@5": m["recall@5"]}
            pos = first.catalog().position
            for q, lx in zip(queries, lexical, strict=True):
                cos = first.cosines(q.query)
                found = {h.name for h in lx}
                gold_unmatched[w].extend(float(cos[pos[r]]) for r in q.relevant if r not in found)
            salad_best[w].extend(float(np.max(first.cosines(text))) for text in salads)
    keys = [f"{w}/{a}" for w in WEIGHTS for a in GRID]
    gain = {c: min(table[s][c][k] - table[s]["bm25f"][k] for s in table for k in METRICS) for c in keys}
    best = max(keys, key=lambda c: (round(gain[c], 4), -float(c.split("/")[1]), -float(c.split("/")[0])))
    weight, alpha = (float(x) for x in best.split("/"))
    p99 = float(np.percentile(salad_best[weight], 99))
    threshold = math.ceil(p99 * 20) / 20
    lost = sum(c < threshold for c in gold_unmatched[weight]) / max(len(gold_unmatched[weight]), 1)
    report = {
        "grid": table,
        "smallest_gain": {c: round(v, 4) for c, v in gain.items()},
        "param_weight": weight,
        "alpha": alpha,
        "salad_best_cosine_p99": round(p99, 4),
        "salad_best_cosine_max": round(max(salad_best[weight]), 4),
        "letter_strings_passing_the_known_word_gate": round(sum(gated) / len(gated), 4),
        "min_cosine": threshold,
        "gold_without_lexical_match": len(gold_unmatched[weight]),
        "share_of_those_below_threshold": round(lost, 4),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    head = " ".join(f"{s + ' nDCG@10':>18s} {s + ' R@5':>14s}" for s in table)
    print(f"{'weight/alpha':>12s} {head}  smallest gain")
    for c in ["bm25f", *keys]:
        cells = " ".join(f"{table[s][c]['nDCG@10']:18.4f} {table[s][c]['recall@5']:14.4f}" for s in table)
        print(f"{c:>12s} {cells}  {'' if c == 'bm25f' else f'{gain[c]:+.4f}'}")
    print(f"chosen param_weight {weight}, alpha {alpha} (largest smallest gain over BM25F on the training splits)")
    print(f"random letter strings holding a known word (so past the gate): {sum(gated) / len(gated):.1%}")
    print(
        f"word salads' best cosine: p99 {p99:.3f}, max {max(salad_best[weight]):.3f} -> min_cosine {threshold:.2f}; "
        f"{lost:.1%} of {len(gold_unmatched[weight])} gold tools without a lexical match fall below it"
    )


if __name__ == "__main__":
    main()
