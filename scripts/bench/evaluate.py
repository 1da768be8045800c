#!/usr/bin/env python3
"""Benchmark: `vidcurate evaluate RELEASE PREDICTIONS` over N predictions (default 1,000,000) of
a generated single-choice task release, against numpy computing the same accuracy and its
standard error clustered by video from the same files, in the same run (issue 37).

The release: tasks/tasks.json and one Parquet file of N items over N / 4 videos, four options
each; the predictions: a JSONL file, one letter per item, right about 40 % of the time. The
peer reads the same Parquet and JSONL (pyarrow), maps the letters, and computes the mean and
sqrt(G / (G - 1) · Σ_g (Σ_{i∈g} (y_i − ȳ) / n)²) with numpy. Both as their own process, wall
seconds and peak RSS from /usr/bin/time, best of --repeat; the numbers must agree to 1e-9.

Usage: scripts/bench/evaluate.py [--predictions N] [--bin PATH] [--repeat K]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
READERS = os.path.join(ROOT, "data", "venv-readers", "bin", "python")

PEER = r'''
import json, sys, time
import numpy as np, pyarrow.parquet as pq, pyarrow.json as pj
t0 = time.perf_counter()
ref = pq.read_table(sys.argv[1], columns=["item_id", "video_id", "answer"])
pred = pj.read_json(sys.argv[2])
right = dict(zip(ref.column("item_id").to_pylist(), ref.column("answer").to_pylist()))
said = dict(zip(pred.column("item_id").to_pylist(), pred.column("prediction").to_pylist()))
ids = ref.column("item_id").to_pylist()
y = np.array([said.get(i) == right[i] for i in ids], dtype=float)
videos = ref.column("video_id").to_numpy(zero_copy_only=False)
n = len(y); mean = y.mean()
_, g = np.unique(videos, return_inverse=True)
e = np.bincount(g, weights=(y - mean) / n)
G = len(e)
se = float(np.sqrt(G / (G - 1) * np.sum(e * e)))
print(json.dumps({"mean": float(mean), "se": se, "n": n, "seconds": time.perf_counter() - t0}))
'''


def make(out, n):
    rng = random.Random(7)
    os.makedirs(os.path.join(out, "tasks", "sc"), exist_ok=True)
    json.dump([{"name": "sc", "stage": "sc", "title": "SC", "category": "perception", "targets": ["original_footage"],
                "format": "single_choice", "metrics": ["accuracy"], "question": "q", "options": [], "labels": [],
                "reference": "drafted", "fingerprint": "0" * 16}],
              open(os.path.join(out, "tasks", "tasks.json"), "w"))
    ids = [f"v{i // 4:07d}:sc:{i % 4}" for i in range(n)]
    answers = [rng.choice("ABCD") for _ in range(n)]
    pq.write_table(pa.table({"video_id": [f"v{i // 4:07d}" for i in range(n)], "split": ["train"] * n,
                             "item_id": ids, "options": [["w", "x", "y", "z"]] * n, "answer": answers}),
                   os.path.join(out, "tasks", "sc", "train-00000-of-00001.parquet"))
    with open(os.path.join(out, "predictions.jsonl"), "w") as f:
        for i, a in zip(ids, answers):
            p = a if rng.random() < 0.2 else rng.choice("ABCD")
            f.write(f'{{"item_id": "{i}", "prediction": "{p}"}}\n')


def timed(cmd):
    o = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], capture_output=True, text=True)
    if o.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed:\n{o.stderr}")
    wall, rss = o.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss) / 1024, o.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--predictions", type=int, default=1_000_000)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vidcurate-eval-bench-")
    make(tmp, a.predictions)
    preds = os.path.join(tmp, "predictions.jsonl")
    peer = os.path.join(tmp, "peer.py")
    open(peer, "w").write(PEER)
    ours, theirs = [], []
    for _ in range(a.repeat):
        ours.append(timed([a.bin, "evaluate", tmp, preds, "--json"]))
        theirs.append(timed([READERS, peer, os.path.join(tmp, "tasks", "sc", "train-00000-of-00001.parquet"), preds]))
    best_o, best_t = min(ours), min(theirs)
    m = json.loads(best_o[2])["tasks"][0]["metrics"]["accuracy"]
    p = json.loads(best_t[2])
    same = abs(m["mean"] - p["mean"]) < 1e-9 and abs(m["se"] - p["se"]) < 1e-9
    print(f"evaluate over {a.predictions:,} single-choice predictions, best of {a.repeat}:")
    print(f"  {'tool':28} {'seconds':>8} {'peak RSS MiB':>13}")
    print(f"  {'vidcurate evaluate':28} {best_o[0]:8.2f} {best_o[1]:13.1f}")
    print(f"  {'numpy + pyarrow':28} {best_t[0]:8.2f} {best_t[1]:13.1f}")
    print(f"  ratio numpy / vidcurate: {best_t[0] / best_o[0]:.2f} (seconds, > 1: vidcurate faster), "
          f"{best_t[1] / best_o[1]:.2f} (peak RSS)")
    print(f"  accuracy {m['mean']:.6f} ± {m['se']:.6f} vs {p['mean']:.6f} ± {p['se']:.6f}: {'equal' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
