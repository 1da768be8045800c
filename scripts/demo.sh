#!/usr/bin/env bash
# Quick start, command 1: installs what the demo needs and is missing (scripts/setup.sh --demo:
# not the test suite's tools), builds vidcurate, makes the synthetic demo corpus and runs
# pipelines/demo.toml end to end, offline. Safe to run again: a second run reuses everything
# already done.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/rust_version.sh
. scripts/lib/rust_version.sh
require_rust demo || exit 1
./scripts/setup.sh --demo
cargo build --release --locked
python3 scripts/make_demo_corpus.py data/demo
# The demo's ids are fixed (demo000...): a regenerated corpus needs a fresh run directory.
if [ data/demo/.corpus-stamp -nt data/runs/demo/manifest.json ]; then
  rm -rf data/runs/demo
fi
set +e
./target/release/vidcurate run pipelines/demo.toml "$@"
rc=$?
set -e
# Exit 3 means "done, some videos rejected": the corpus holds one broken upload on purpose.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
  exit "$rc"
fi
./target/release/vidcurate analyze data/runs/demo --by label
# The benchmark step: a video-level split stratified by label, and the release folder
# (Hugging Face datasets layout with a dataset card) others load with load_dataset().
./target/release/vidcurate split data/runs/demo --stratify label
./target/release/vidcurate release data/runs/demo --out data/releases/demo
python3 - <<'PY'
import pyarrow.dataset as ds
run = "data/runs/demo"
for t in ["source", "relevance", "probe", "frames", "ocr_regions", "ocr_videos", "shots", "prescreen", "rejects"]:
    tb = ds.dataset(f"{run}/{t}", format="parquet").to_table()
    cols = ", ".join(tb.schema.names)
    print(f"{t:11} {tb.num_rows:5} rows  columns: {cols[:110]}{'...' if len(cols) > 110 else ''}")
rej = ds.dataset(f"{run}/rejects", format="parquet").to_table().to_pylist()
for r in rej:
    print(f"rejected {r['video_id']} at {r['stage']}: {r['reason']}")
titles = {r["video_id"]: r["title"] for r in ds.dataset(f"{run}/source", format="parquet").to_table(columns=["video_id", "title"]).to_pylist()}
for r in sorted(ds.dataset(f"{run}/relevance", format="parquet").to_table().to_pylist(), key=lambda r: r["score"]):
    if r["score"] < 9:
        print(f"relevance {r['score']:2}: {titles[r['video_id']]!r} (filtered)")
for r in ds.dataset(f"{run}/prescreen", format="parquet").to_table().to_pylist():
    if r["failed_criteria"]:
        ev = "; ".join(r[f"{c}_evidence"] for c in ["logo", "location", "time_date", "sns", "jump_cuts", "subtitles"] if r[c] == "fail")
        print(f"prescreen {r['video_id']}: certain failures {r['failed_criteria']} ({ev})")
import collections
regions = ds.dataset(f"{run}/ocr_regions", format="parquet").to_table().to_pylist()
for label in ["fake", "real"]:
    rs = [r for r in regions if r["label"] == label and r["creator_added"]]
    if not rs:
        continue
    colours = collections.Counter(r["text_color"] for r in rs).most_common(3)
    long_share = sum(r["aspect_ratio"] > 15 for r in rs) / len(rs)
    print(f"{label}: {len(rs)} creator-added regions; colours {colours}; aspect > 15: {100 * long_share:.0f} %")
PY
# The question benchmark, offline: pipelines/harmvideo-questions.toml over 12 generated clips
# against a local STAND-IN server (recorded response bodies, not a model), then its release with
# the `questions` config and the scores of two stand-in answerers (scripts/questions_demo.py).
python3 scripts/questions_demo.py --videos 12 --bin ./target/release/vidcurate \
  --keep data/runs/demo-questions --release data/releases/demo-questions
# The MVFNDB benchmark items, offline: pipelines/mvfndb-benchmark.toml over 12 generated clips
# (OCR, shots, four derived tasks and six drafted ones) against a local STAND-IN server playing
# model A, model B and the judge (recorded response bodies, not models), then its item table
# per task, then its release (one config per task) scored for a STAND-IN answerer in Table 1's
# shape and FDR's prompt variants in Table 4's shape (scripts/mvfndb_demo.py).
python3 scripts/mvfndb_demo.py --videos 12 --bin ./target/release/vidcurate --keep data/runs/demo-mvfndb \
  --release data/releases/demo-mvfndb
echo "demo: done; the run directory is data/runs/demo (layout: README.md); report: data/runs/demo/analysis/label/report.html; release: data/releases/demo (card: data/releases/demo/README.md); questions: data/releases/demo-questions (load_dataset(DIR, \"questions\")); items: data/runs/demo-mvfndb (vidcurate items data/runs/demo-mvfndb); tasks: data/releases/demo-mvfndb (load_dataset(DIR, \"kep\"))"
