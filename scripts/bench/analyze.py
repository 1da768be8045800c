#!/usr/bin/env python3
"""Benchmark: `vidcurate analyze` over a synthetic run of N text regions (default 1,000,000).

Writes a run directory with a manifest and an `ocr_regions` table shaped like the ocr stage's
(two labels, hue/saturation/value histograms, layout columns), in shards of 100,000 rows, then
times `vidcurate analyze RUN --by label` and prints seconds and rows/s. Target: < 10 s on 2 cores.

Usage: scripts/bench/analyze.py [--rows N]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")


def hist_column(rng, n, bins, peak):
    counts = rng.poisson(2.0, size=(n, bins)).astype(np.uint32)
    counts[np.arange(n), peak] += rng.integers(50, 500, size=n).astype(np.uint32)
    offsets = np.arange(0, (n + 1) * bins, bins, dtype=np.int64)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(counts.ravel(), type=pa.uint32()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    a = ap.parse_args()
    if not os.path.exists(BIN):
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    run = tempfile.mkdtemp(prefix="vidcurate-analyze-bench-")
    os.makedirs(os.path.join(run, "ocr_regions"))
    with open(os.path.join(run, "manifest.json"), "w") as f:
        json.dump({"stages": [{"id": "ocr_regions", "type": "ocr"}]}, f)
    rng = np.random.default_rng(1)
    shard = 100_000
    for part, start in enumerate(range(0, a.rows, shard)):
        n = min(shard, a.rows - start)
        fake = rng.random(n) < 0.5
        hue_peak = np.where(fake, 0, 5)
        cols = {
            "video_id": pa.array([f"v{(start + i) // 50:07d}" for i in range(n)]),
            "label": pa.array(np.where(fake, "fake", "real")),
            "frame_index": pa.array(rng.integers(0, 16, n).astype(np.uint32)),
            "grid_row": pa.array(np.where(fake, rng.integers(0, 5, n), 4).astype(np.uint32)),
            "grid_col": pa.array(rng.integers(0, 6, n).astype(np.uint32)),
            "text_h": pa.array(np.where(fake, rng.uniform(0, 5, n), rng.uniform(25, 30, n)).astype(np.float32)),
            "text_s": pa.array(rng.uniform(0.5, 1, n).astype(np.float32)),
            "text_v": pa.array(rng.uniform(0.5, 1, n).astype(np.float32)),
            "area_frac": pa.array(rng.uniform(1e-4, 0.1, n).astype(np.float32)),
            "aspect_ratio": pa.array(np.where(fake, rng.uniform(1, 14, n), rng.uniform(16, 40, n)).astype(np.float32)),
            "hue_hist": hist_column(rng, n, 72, hue_peak),
            "sat_hist": hist_column(rng, n, 20, np.full(n, 15)),
            "val_hist": hist_column(rng, n, 20, np.full(n, 18)),
            "creator_added": pa.array(np.ones(n, dtype=bool)),
        }
        pq.write_table(pa.table(cols), os.path.join(run, "ocr_regions", f"part-{part:05d}.parquet"))
    t0 = time.perf_counter()
    out = subprocess.run([BIN, "analyze", run, "--by", "label"], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    print(out.stdout.strip().splitlines()[0])
    print(f"analyze over {a.rows:,} regions: {dt:.2f} s, {a.rows / dt:,.0f} rows/s   (target < 10 s on 2 cores)")
    shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    main()
