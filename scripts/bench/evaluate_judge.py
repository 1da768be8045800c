#!/usr/bin/env python3
"""Benchmark: `vidcurate evaluate RELEASE PREDICTIONS --judge FILE` judging N predictions
(default 10,000; one 0-5 ratings call each, an open-text task) against a stand-in OpenAI server
that counts a sliding minute and answers 429 past the limit, and the Python peer (a thread pool
pacing the very request bodies vidcurate sent at the same limit; scripts/bench/pacing.py), in the
same run. Also `evaluate --dry-run` before: its calls against the calls made.

The release is generated here (tasks/tasks.json and one parquet of N items over N / 4 videos);
the judge's cache is a fresh temporary file, so every judgment is a call.

Usage: scripts/bench/evaluate_judge.py [--predictions N] [--bin PATH] [--json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import pacing
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "llm", "openai", "chat_completion_json_schema.json")
LIMIT = 3000
LATENCY = 0.2
KEY = "sk-bench"


def release(out, n):
    os.makedirs(os.path.join(out, "tasks", "neu"), exist_ok=True)
    info = [{"name": "neu", "stage": "neu", "title": "NEU", "category": "understanding",
             "targets": ["original_footage"], "format": "open_text", "metrics": ["completeness"],
             "question": "q", "options": [], "labels": [], "reference": "drafted", "fingerprint": "0" * 16}]
    json.dump(info, open(os.path.join(out, "tasks", "tasks.json"), "w"))
    rows = [{"video_id": f"v{i // 4:05d}", "split": "train", "item_id": f"v{i // 4:05d}:neu:{i % 4}",
             "answer_text": f"the theme of video {i // 4} part {i % 4}"} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), os.path.join(out, "tasks", "neu", "train-00000-of-00001.parquet"))
    with open(os.path.join(out, "predictions.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps({"item_id": r["item_id"], "prediction": f"a model's theme {r['item_id']}"}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--predictions", type=int, default=10_000)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout (the table goes to stderr)")
    a = ap.parse_args()
    out = sys.stderr if a.json else sys.stdout
    template = json.load(open(FIXTURE))
    server, state = pacing.limited_server(LIMIT, LATENCY, template,
                                          lambda v, text, path: {"completeness": 3, "reason": "covers most"})
    port = server.server_address[1]
    tmp = tempfile.mkdtemp(prefix="vidcurate-judge-bench-")
    rel = os.path.join(tmp, "release")
    release(rel, a.predictions)
    judge = os.path.join(tmp, "judge.toml")
    with open(judge, "w") as f:
        f.write(f'[services.judge]\nbase_url = "http://127.0.0.1:{port}/v1/"\napi_key_env = "VIDCURATE_BENCH_KEY"\n'
                f'requests_per_minute = {LIMIT}\nusd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0\n\n'
                '[judge]\nservice = "judge"\nmodel = "judge-j"\n')
    env = dict(os.environ, VIDCURATE_BENCH_KEY=KEY, RUST_LOG="warn")
    args = [a.bin, "evaluate", rel, os.path.join(rel, "predictions.jsonl"), "--judge", judge,
            "--judge-cache", os.path.join(tmp, "cache.sqlite")]
    d = subprocess.run(args + ["--dry-run"], env=env, capture_output=True, text=True, check=True).stdout
    # "judge MODEL on SERVICE: N calls, ..." (after the line naming the split scored).
    line = next(l for l in d.splitlines() if l.startswith("judge "))
    estimated = int(line.split(": ")[1].split(" ")[0])
    state.reset()
    t0 = time.perf_counter()
    o = subprocess.run(args + ["--json"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if o.returncode != 0:
        raise SystemExit(f"vidcurate evaluate failed ({o.returncode}):\n{o.stderr}")
    with state.lock:
        ours_log, ours_429, bodies = list(state.log), state.throttled, list(state.bodies)
    made = len(ours_log) + ours_429
    mean = json.loads(o.stdout)["tasks"][0]["metrics"]["completeness"]["mean"]
    state.reset()
    pacing.paced_peer(f"http://127.0.0.1:{port}/v1/chat/completions", KEY, bodies, 16, LIMIT)
    with state.lock:
        peer_log, peer_429 = list(state.log), state.throttled
    print(f"evaluate --judge: {a.predictions} predictions (one ratings call each), {int(LATENCY * 1000)} ms latency, "
          f"limit {LIMIT}/min:", file=out)
    ratio = pacing.print_rates(out, LIMIT, ours_log, ours_429, peer_log, peer_429)
    err = abs(estimated - made) / made if made else float("inf")
    print(f"  vidcurate whole evaluate {wall:.1f} s; mean completeness {mean:.3f} (every answer rated 3)", file=out)
    print(f"dry run: estimated {estimated} calls, made {made}, error {err:.1%}   (target: within 10 %)", file=out)
    ours = pacing.rate(ours_log)
    res = {"predictions": a.predictions, "limit_per_min": LIMIT, "latency_ms": int(LATENCY * 1000),
           "vidcurate": {**pacing.tool_result(ours_log, ours_429, LIMIT), "wall_seconds": round(wall, 2)},
           "python": pacing.tool_result(peer_log, peer_429, LIMIT), "ratio": ratio,
           "dry_run": {"estimated_calls": estimated, "calls_made": made, "error": round(err, 4)},
           "ok": ours / LIMIT >= 0.95 and ours_429 == 0 and err <= 0.10 and abs(mean - 3) < 1e-9}
    if a.json:
        print(json.dumps(res))
    server.shutdown()


if __name__ == "__main__":
    main()
