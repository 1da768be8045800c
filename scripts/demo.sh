#!/usr/bin/env bash
# Quick start, command 1: installs what is missing, builds vidcurate, makes the synthetic demo
# corpus and runs pipelines/demo.toml end to end, offline. Safe to run again: a second run
# reuses everything already done.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
command -v cargo >/dev/null || { echo "demo: cargo not found: install Rust (rustup) first" >&2; exit 1; }
cargo build --release --locked
python3 scripts/make_demo_corpus.py data/demo
set +e
./target/release/vidcurate run pipelines/demo.toml "$@"
rc=$?
set -e
# Exit 3 means "done, some videos rejected": the corpus holds one broken upload on purpose.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
  exit "$rc"
fi
python3 - <<'PY'
import pyarrow.dataset as ds
run = "data/runs/demo"
for t in ["source", "probe", "frames", "rejects"]:
    tb = ds.dataset(f"{run}/{t}", format="parquet").to_table()
    print(f"{t:8} {tb.num_rows:5} rows  columns: {', '.join(tb.schema.names)}")
rej = ds.dataset(f"{run}/rejects", format="parquet").to_table().to_pylist()
for r in rej:
    print(f"rejected {r['video_id']} at {r['stage']}: {r['reason']}")
PY
echo "demo: done; the run directory is data/runs/demo (layout: README.md)"
