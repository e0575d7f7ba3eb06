"""How high can a 1–5 score's AUROC go on the LoCoMo labelled set? (issue 11's target: 0.85)

For every labelled turn: the lexical offline score (1–5) and weight, and the cosine to the
question under each bundled embedder (wordllama, and minilm when the ``[minilm]`` extra is
installed). Prints the AUROC (relevant = gold ≥ 4; ties count half, Mann–Whitney U / n₊n₋)
of each continuous signal and blend, and of the **best five-level cut** of each blend: four
thresholds searched over the blend's 5 %-quantiles *on this very set* (an upper bound, not a
usable scorer), i.e. the highest AUROC any integer 1–5 score that is a monotone function of
that blend can reach.

    relmem rubric build locomo ../shared/data/locomo/locomo10.json --out /tmp/locomo_labelled_v3.json
    PYTHONPATH=. python benchmarks/rubric_ceiling.py /tmp/locomo_labelled_v3.json
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt

from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.evaluation import LabelledSet
from relevance_memory.evaluation._rubric import RELEVANT_AT, example_items
from relevance_memory.scoring._embedding import load_embedder
from relevance_memory.scoring._scorer import OfflineScorer


def auroc(relevant: npt.NDArray[np.bool_], values: npt.NDArray[np.float64]) -> float:
    """Mann–Whitney AUROC with average ranks for ties."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = int(relevant.sum())
    neg = len(values) - pos
    return float((ranks[relevant].sum() - pos * (pos + 1) / 2) / (pos * neg))


def best_five_levels(relevant: npt.NDArray[np.bool_], blend: npt.NDArray[np.float64]) -> float:
    cuts = np.unique(np.quantile(blend, np.linspace(0, 1, 21)[1:-1]))
    return max(auroc(relevant, (np.digitize(blend, t) + 1).astype(np.float64))
               for t in itertools.combinations(cuts, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labelled", type=Path)
    args = parser.parse_args()
    labelled = LabelledSet.load(args.labelled)
    counter = TiktokenCounter("cl100k_base")
    embedders = {"wordllama": load_embedder("wordllama")}
    try:
        embedders["minilm"] = load_embedder("minilm")
    except Exception as exc:  # the extra is optional
        print(f"minilm skipped: {exc}")
    lexical = OfflineScorer()
    rel: list[bool] = []
    score: list[float] = []
    weight: list[float] = []
    cos: dict[str, list[float]] = {name: [] for name in embedders}
    for ex in labelled.examples:
        items, context = example_items(ex, counter)
        scores = lexical.score(ex.goal, items, context).scores
        texts = [it.text for it in items]
        sims = {}
        for name, model in embedders.items():
            assert model is not None
            sims[name] = model.embed(texts) @ model.embed([ex.goal.final])[0]
        for n, item in enumerate(items):
            gold = ex.gold.get(item.id)
            if gold is None:
                continue
            rel.append(gold >= RELEVANT_AT)
            score.append(scores[n].score)
            weight.append(scores[n].weight)
            for name in embedders:
                cos[name].append(float(sims[name][n]))
    y = np.array(rel)
    s, w = np.array(score, dtype=np.float64), np.array(weight, dtype=np.float64)
    print(f"{len(labelled.examples):,} examples, {len(y):,} labelled turns, {int(y.sum()):,} relevant")
    print("| signal | AUROC, continuous | best five-level cut |")
    print("|---|---|---|")
    print(f"| lexical score (1–5) | {auroc(y, s):.3f} | — |")
    print(f"| lexical weight | {auroc(y, w):.3f} | {best_five_levels(y, w):.3f} |")
    for name, values in cos.items():
        c = np.array(values)
        print(f"| {name} cosine | {auroc(y, c):.3f} | {best_five_levels(y, c):.3f} |")
        blend = s + 4 * c
        print(f"| lexical score + 4 × {name} cosine | {auroc(y, blend):.3f} | {best_five_levels(y, blend):.3f} |")
        blend = s + w / 5 + 4 * c
        print(f"| lexical score + weight / 5 + 4 × {name} cosine | {auroc(y, blend):.3f} | "
              f"{best_five_levels(y, blend):.3f} |")


if __name__ == "__main__":
    main()
