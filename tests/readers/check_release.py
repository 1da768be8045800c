"""Reads a vidcurate release folder with the tools its users load it with, and prints what each
saw as one JSON object (the Rust test compares it with the run):

  datasets.load_dataset(DIR): rows per split, feature types, the first frame's image size,
    and the perturbations config;
  pyarrow.dataset, DuckDB and Polars: rows per split of data/*.parquet.

Runs offline (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE) with a cache under the given temp folder.
Usage: check_release.py RELEASE_DIR CACHE_DIR
"""
import json
import os
import sys

rel, cache = sys.argv[1], sys.argv[2]
os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=cache,
                  HF_DATASETS_CACHE=os.path.join(cache, "datasets"))

import datasets  # noqa: E402
import duckdb  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402

out = {}
ds = datasets.load_dataset(rel)
out["splits"] = {name: split.num_rows for name, split in ds.items()}
first = next(iter(ds.values()))
out["features"] = {name: str(f) for name, f in first.features.items()}
row = first[0]
frames = row.get("frames") or []
if frames and not isinstance(frames[0], str):
    out["first_frame_size"] = list(frames[0].size)
    out["frames_per_video"] = [len(r) for r in first["frames"]]
elif frames:
    out["first_frame_file"] = os.path.exists(os.path.join(rel, frames[0]))
    out["frames_per_video"] = [len(r) for r in first["frames"]]
out["ocr_text"] = {r["video_id"]: r.get("ocr_text") for s in ds.values() for r in s}
p = datasets.load_dataset(rel, "perturbations")
out["perturbations"] = {name: split.num_rows for name, split in p.items()}
out["variants"] = sorted(set(p[next(iter(p))]["variant"]))

files = os.path.join(rel, "data", "*.parquet")
t = pads.dataset(os.path.join(rel, "data"), format="parquet").to_table(columns=["split"])
out["pyarrow"] = {s: t.column("split").to_pylist().count(s) for s in set(t.column("split").to_pylist())}
out["duckdb"] = dict(duckdb.sql(f"SELECT split, count(*) FROM '{files}' GROUP BY split").fetchall())
out["polars"] = dict(pl.read_parquet(files).group_by("split").len().iter_rows())
print(json.dumps(out))
