"""An independent scoring of a questions release, for tests/release.rs.

Loads the `questions` config with Hugging Face `datasets.load_dataset(DIR, "questions")`, reads the
predictions CSV (item_id, prediction, rotation) and scores it with numpy, by another route than
vidcurate's: answers are read with regular expressions for the shapes the test writes, and the
clustered standard errors come from the cluster-robust sandwich of a least-squares fit (y on level
dummies: each level's mean is a coefficient, the macro average their mean; y on a constant for
the micro average), with the small-sample factor G / (G - 1).

Usage: check_questions.py RELEASE PREDICTIONS.csv [SPLIT]. With SPLIT (a split `datasets` reads
from the card, e.g. test) only that split's items are scored, and predictions for items of the
other splits are counted as `other_predictions`; without it, or with `all`, every item. Prints
JSON.
"""
import csv
import json
import re
import sys

import numpy as np
from datasets import load_dataset

release, preds_path = sys.argv[1], sys.argv[2]
chosen = sys.argv[3] if len(sys.argv) > 3 else "all"
ds = load_dataset(release, "questions")
items, split_of = {}, {}
for split in ds:
    for r in ds[split]:
        assert r["split"] == split, (r["item_id"], r["split"], split)
        split_of[r["item_id"]] = split
        if chosen in ("all", split):
            items[r["item_id"]] = r
levels = []
for r in items.values():
    if r["level"] not in levels:
        levels.append(r["level"])
levels.sort()


def letter_of(text, options):
    """The shapes tests/release.rs writes, and nothing else."""
    t = text.strip()
    for i, o in enumerate(options):
        if t == o:
            return i
    for pat in [r"^\(?([A-Da-d])\)?\.?$", r"^Answer: ([a-dA-D])$", r"^The answer is ([A-D]) because",
                r"^答案：([A-D])$"]:
        m = re.match(pat, t)
        if m:
            return ord(m.group(1).upper()) - ord("A")
    return None


answers = {}  # (item, rotation) -> right
unparsed = set()
other = 0
with open(preds_path, newline="") as f:
    for row in csv.DictReader(f):
        if row["item_id"] not in items:
            assert row["item_id"] in split_of, row
            other += 1
            continue
        it = items[row["item_id"]]
        r = int(row["rotation"])
        n = len(it["options"])
        shown = [it["options"][(i + r) % n] for i in range(n)]
        s = letter_of(row["prediction"], shown)
        correct = ord(it["answer"]) - ord("A")
        answers[(row["item_id"], r)] = s is not None and (s + r) % n == correct
        if s is None and r == 0:
            unparsed.add(row["item_id"])

ids = sorted(items)
videos = sorted({items[i]["video_id"] for i in ids})


def sandwich(y, X, groups):
    """Coefficients and their cluster-robust covariance (CR1 with G / (G - 1) only)."""
    XtX_inv = np.linalg.inv(X.T @ X)
    beta = XtX_inv @ X.T @ y
    u = y - X @ beta
    meat = np.zeros((X.shape[1], X.shape[1]))
    gs = sorted(set(groups))
    for g in gs:
        m = np.array([x == g for x in groups])
        s = X[m].T @ u[m]
        meat += np.outer(s, s)
    G = len(gs)
    if G < 2:
        # One video: no spread between clusters to estimate (vidcurate reports 0).
        return beta, np.zeros_like(meat)
    return beta, XtX_inv @ meat @ XtX_inv * G / (G - 1)


def scores(right, ids=ids):
    levels = sorted({items[i]["level"] for i in ids})
    y = np.array([1.0 if right[i] else 0.0 for i in ids])
    groups = [items[i]["video_id"] for i in ids]
    X = np.array([[1.0 if items[i]["level"] == l else 0.0 for l in levels] for i in ids])
    beta, V = sandwich(y, X, groups)
    c = np.full(len(levels), 1.0 / len(levels))
    one, V1 = sandwich(y, np.ones((len(ids), 1)), groups)
    out = {"levels": {}, "macro_avg": float(c @ beta), "macro_se": float(np.sqrt(c @ V @ c)),
           "micro": {"accuracy": float(one[0]), "se": float(np.sqrt(V1[0, 0])), "n": len(ids)}}
    for k, l in enumerate(levels):
        sel = [i for i in ids if items[i]["level"] == l]
        yl = np.array([1.0 if right[i] else 0.0 for i in sel])
        b, Vl = sandwich(yl, np.ones((len(sel), 1)), [items[i]["video_id"] for i in sel])
        assert abs(b[0] - beta[k]) < 1e-12
        out["levels"][l] = {"accuracy": float(b[0]), "se": float(np.sqrt(Vl[0, 0])), "n": len(sel)}
    return out


plain = {i: answers.get((i, 0), False) for i in ids}
circular = {i: all(answers.get((i, r), False) for r in range(len(items[i]["options"]))) for i in ids}
blind = [items[i]["blind_correct"] / items[i]["blind_samples"] for i in ids if items[i]["blind_samples"]]
print(json.dumps({
    "all": scores(plain),
    "circular": scores(circular),
    "by_language": {g: scores(plain, [i for i in ids if items[i]["language"] == g])
                    for g in sorted({items[i]["language"] for i in ids})},
    "chance": float(np.mean([1.0 / len(items[i]["options"]) for i in ids])),
    "blind": float(np.mean(blind)) if blind else None,
    "unparsed": len(unparsed),
    "other_predictions": other,
    "items": len(ids),
    "release_items": len(split_of),
    "videos": len(videos),
    "columns": sorted(ds[next(iter(ds))].column_names),
    "splits": {s: ds[s].num_rows for s in ds},
}))
