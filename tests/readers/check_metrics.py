"""scikit-learn's view of a vidcurate evaluation: the same metrics from the same release labels
and predictions, as JSON shaped like `vidcurate evaluate --json`'s `metrics` (variant -> group ->
metric). Usage: check_metrics.py RELEASE_DIR PREDICTIONS.csv POSITIVE BY_COLUMN [SPLIT]: with SPLIT
only the videos whose `split` column is SPLIT are scored (predictions for others are skipped).
"""
import collections
import csv
import glob
import json
import sys

import pyarrow.parquet as pq
from sklearn.metrics import (accuracy_score, balanced_accuracy_score, f1_score,
                             matthews_corrcoef, recall_score)

rel, preds, positive, by = sys.argv[1:5]
split = sys.argv[5] if len(sys.argv) > 5 else "all"
truth, released = {}, set()
for f in sorted(glob.glob(f"{rel}/data/*.parquet")):
    for r in pq.read_table(f, columns=["video_id", "label", by, "split"]).to_pylist():
        released.add(r["video_id"])
        if split in ("all", r["split"]):
            truth[r["video_id"]] = (r["label"], r[by])
cells = collections.defaultdict(lambda: collections.defaultdict(lambda: ([], [])))
with open(preds) as f:
    for r in csv.DictReader(f):
        if r["video_id"] not in truth:
            assert r["video_id"] in released, r
            continue
        label, group = truth[r["video_id"]]
        for g in ("all", group):
            t, p = cells[r.get("variant") or "original"][g]
            t.append(int(label == positive))
            p.append(int(r["prediction"] == positive))
out = {}
for v, groups in cells.items():
    out[v] = {}
    for g, (t, p) in groups.items():
        out[v][g] = {
            "n": len(t),
            "f1": f1_score(t, p, zero_division=0),
            "accuracy": accuracy_score(t, p),
            "specificity": recall_score(t, p, pos_label=0, zero_division=0),
            "balanced_accuracy": balanced_accuracy_score(t, p),
            "mcc": matthews_corrcoef(t, p),
            "no_skill_f1": f1_score(t, [1] * len(t), zero_division=0),
        }
print(json.dumps(out))
