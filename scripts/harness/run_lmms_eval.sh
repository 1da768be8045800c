#!/usr/bin/env bash
# Runs an exported vidcurate task in lmms-eval 0.7.3 with a replay model and prints lmms-eval's
# scores next to `vidcurate evaluate`'s on the same answers.
#
#   scripts/harness/run_lmms_eval.sh RELEASE PREDICTIONS [VIDCURATE_BIN]
#
# RELEASE was made with `vidcurate release RUN --out RELEASE --harness lmms-eval`; PREDICTIONS is
# the file `vidcurate evaluate` reads (CSV or JSONL: item_id, rotation, prediction). The model is
# `vidcurate_replay` (scripts/harness/vidcurate_lmms, loaded through lmms-eval's
# LMMS_EVAL_PLUGINS): it answers each document with the prediction for its item and rotation.
#
# The first run installs lmms-eval 0.7.3 and torch (CPU wheels when PyTorch's index answers) into
# data/venv-lmms (several GB); it is not part of .ci/run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
if [ $# -lt 2 ]; then
    sed -n '2,13p' "$0"
    exit 2
fi
RELEASE="$(cd "$1" && pwd)"
PREDS="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
BIN="${3:-$ROOT/target/debug/vidcurate}"
VENV="$ROOT/data/venv-lmms"
TASKS="$RELEASE/harness/lmms_eval"
if [ ! -d "$TASKS" ]; then
    echo "$TASKS: missing; release with --harness lmms-eval" >&2
    exit 2
fi
if [ ! -x "$VENV/bin/lmms-eval" ] && [ ! -x "$VENV/bin/lmms_eval" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    # CPU wheels where PyTorch's index is reachable (the CUDA ones are several GB more and the
    # replay model needs no GPU); otherwise PyPI's torch, which runs on the CPU as well.
    "$VENV/bin/pip" install -q torch torchvision --index-url https://download.pytorch.org/whl/cpu \
        || echo "download.pytorch.org unreachable: torch from PyPI (with its CUDA libraries)" >&2
    # filelock 4 moved filelock._api, which lmms-eval 0.7.3's evaluator imports.
    "$VENV/bin/pip" install -q "lmms-eval==0.7.3" "filelock<4"
fi
# GROUP=<name>_tasks picks the benchmark tasks of a release that also has questions.
GROUP="${GROUP:-$(grep -l '^group:' "$TASKS"/*.yaml | head -1 | xargs sed -n 's/^group: //p')}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
echo "\$ lmms_eval --model vidcurate_replay --include_path $TASKS --tasks $GROUP"
# From the release folder: the task's data files are relative to it.
(cd "$RELEASE" && \
    LMMS_EVAL_PLUGINS=vidcurate_lmms PYTHONPATH="$ROOT/scripts/harness" \
    HF_HUB_OFFLINE=1 HF_DATASETS_CACHE="$OUT/hf" CUDA_VISIBLE_DEVICES="" \
    "$VENV/bin/python" -m lmms_eval --model vidcurate_replay \
        --model_args "predictions=$PREDS" \
        --include_path "$TASKS" --tasks "$GROUP" --batch_size 1 \
        --output_path "$OUT/results" --verbosity WARNING)
"$BIN" evaluate "$RELEASE" "$PREDS" --json > "$OUT/evaluate.json"
"$VENV/bin/python" "$ROOT/scripts/harness/compare.py" "$OUT/results" "$OUT/evaluate.json" "$GROUP"
