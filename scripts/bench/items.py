#!/usr/bin/env python3
"""Benchmark of a drafted `items` stage (draft -> refine -> judge, MVFNDB's Figure 4) against a
rate-limited model server, and of the dry run's call estimate, each against a plain-Python peer
or the calls made, in the same run.

A fake OpenAI server on 127.0.0.1 answers every chat/completions after 200 ms and answers 429
(with a Retry-After header) to any request over 600 in a sliding minute, counted over ALL
requests. Its 200 answers are the recorded `json_schema` body
(tests/fixtures/llm/openai/chat_completion_json_schema.json) carrying a valid KEP reference
(`kep_reference`: the clip's title as its element) for a draft or a refinement, and for a
judgment (`item_judgment`) always 3 out of 5 on both scales.

The judge always answering 3 is on purpose: the dry run prices the worst case of every item (1
draft + 3 refinements + 3 judgments = 7 calls under the default min_score 4, max_rounds 2), an
upper bound; here every item runs every round and is rejected as judged_below, so the worst
case is what happens, and this bench checks that the bound is met exactly when it does (calls
made / estimated = 1). With a judge that passes items the run makes fewer calls than estimated.

Corpus: N tiny clips (1 s, 96x54, testsrc2 with the clip's name drawn on it, a sine tone, as
scripts/bench/questions.py makes them) and a manifest giving each a title, made once in
data/bench/items-<N>/. The title is in the judge's prompt (which has no images), so no two
videos' judgments are the same request for the response cache.

1. Rate: `vidcurate run` over probe -> frames (2 uniform) -> one drafted `items` stage (task
   pipelines/tasks/mvfndb/kep.toml, max_images = 2), whose drafter, refiner and judge are three
   models on ONE OpenAI-compatible service of the fake server with requests_per_minute = 600:
   one limit for all three, as the server counts. The peer is what a Python data engineer
   writes: a thread pool of the stage's width (8) pacing submissions at the same limit, sending
   the very request bodies vidcurate sent (recorded by the server). Printed: requests, seconds
   from the first request to the last, requests per minute achieved by each, as a share of the
   limit (target >= 95 %), 429s served, and the ratio vidcurate / python.
2. Dry run: `vidcurate run --dry-run` on a fresh run directory, before the real run; its
   `total: N model calls` against the calls the server received (target: within 10 %).

--json prints one machine-readable line on stdout (the table then goes to stderr).

Usage: scripts/bench/items.py [--videos N] [--bin PATH] [--json]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pyarrow.dataset as ds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pacing  # noqa: E402  (beside this file)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "llm", "openai", "chat_completion_json_schema.json")
TASK = os.path.join(ROOT, "pipelines", "tasks", "mvfndb", "kep.toml")
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
LIMIT = 600
LATENCY = 0.2
WIDTH = 8  # the items stage's default max_in_flight
KEY = "sk-bench"
MODELS = {"drafter": "model-a", "refiner": "model-b", "judge": "judge-j"}


class Counts:
    """What the stand-in saw besides the rate: requests answered per model, requests that are no
    kep_reference / item_judgment chat completion, and repair requests."""
    roles = collections.Counter()
    odd = 0
    repairs = 0
    lock = threading.Lock()


def answer(v, text, path):
    """The stand-in's answer: the judge always 3; the draft and refinements two elements."""
    schema = (v.get("response_format") or {}).get("json_schema", {}).get("name", "")
    ok = path == "/v1/chat/completions" and schema in ("kep_reference", "item_judgment")
    with Counts.lock:
        Counts.odd += not ok
        Counts.repairs += "previous answer was invalid" in text
        Counts.roles[v.get("model", "?")] += 1
    if schema == "item_judgment":
        return {"factual_consistency": 3, "factual_reason": "one element is not visible in the frames",
                "logical_rationality": 3, "logical_reason": "the list does not say why each matters"}
    m = re.search(r"title: (.*?); speech:|Its title: (.*)$", text, re.M)
    title = (m.group(1) or m.group(2)) if m else "the clip"
    return {"elements": [f"a test card named {title}", "coloured bars"],
            "rationale": "Both are seen in every frame."}


def reset(state):
    state.reset()
    with Counts.lock:
        Counts.odd = Counts.repairs = 0
        Counts.roles = collections.Counter()


def clips(n, out):
    """N clips of 1 s in data/bench/items-<N>/ and a manifest.csv giving each a title."""
    d = os.path.join(ROOT, "data", "bench", f"items-{n}")
    os.makedirs(d, exist_ok=True)

    def make(i):
        name = f"k{i:05d}"
        mp4 = os.path.join(d, f"{name}.mp4")
        if not os.path.exists(mp4):
            tmp = os.path.join(d, f".{name}.tmp.mp4")
            subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y",
                            "-f", "lavfi", "-i", "testsrc2=s=96x54:r=25:d=1", "-f", "lavfi", "-i", "sine=d=1",
                            "-vf", f"drawtext=fontfile={FONT}:text={name}:fontsize=14:fontcolor=white:"
                                   "box=1:boxcolor=black:x=2:y=2",
                            "-c:v", "libx264", "-preset", "ultrafast", "-g", "50", "-pix_fmt", "yuv420p",
                            "-c:a", "aac", "-shortest", tmp], check=True)
            os.replace(tmp, mp4)

    t0 = time.perf_counter()
    missing = sum(not os.path.exists(os.path.join(d, f"k{i:05d}.mp4")) for i in range(n))
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(make, range(n)))
    if missing:
        print(f"made {missing} clips in {d} in {time.perf_counter() - t0:.1f} s", file=out)
    manifest = os.path.join(d, "manifest.csv")
    with open(manifest, "w") as f:
        f.write("path,id,title\n" + "".join(f"k{i:05d}.mp4,k{i:05d},Test card k{i:05d}\n" for i in range(n)))
    return manifest


def write_pipeline(tmp, manifest, port):
    p = os.path.join(tmp, "p.toml")
    models = ", ".join(f'{role} = {{ service = "models", model = "{m}" }}' for role, m in MODELS.items())
    with open(p, "w") as f:
        f.write(f"""name = "bench-items"
[services.models]
base_url = "http://127.0.0.1:{port}/v1/"
api_key_env = "VIDCURATE_BENCH_KEY"
requests_per_minute = {LIMIT}

[source]
type = "local"
manifest = {json.dumps(manifest)}

[[stages]]
id = "probe"
type = "probe"

[[stages]]
id = "frames"
type = "frames"
compute = {{ mode = "uniform", count = 2 }}

[[stages]]
id = "kep"
type = "items"
compute = {{ task = {json.dumps(TASK)}, {models}, max_images = 2 }}
""")
    return p


def dry_run(binary, p, out, env):
    """`run --dry-run`'s `total: N model calls`, and its kep line."""
    o = subprocess.run([binary, "run", p, "--out", out, "--dry-run"], env=env, capture_output=True, text=True)
    if o.returncode != 0:
        raise SystemExit(f"dry run failed ({o.returncode}):\n{o.stdout}\n{o.stderr}")
    text = o.stdout + o.stderr
    m = re.search(r"total: ([\d,]+) model calls", text)
    if m is None:
        raise SystemExit(f"no `total: N model calls` in the dry run:\n{text}")
    line = next((l.strip() for l in text.splitlines() if l.split()[:1] == ["kep"]), "")
    return int(m.group(1).replace(",", "")), line


def bench(binary, n, port, state, tmp, out):
    manifest = clips(n, out)
    p = write_pipeline(tmp, manifest, port)
    env = dict(os.environ, VIDCURATE_BENCH_KEY=KEY, RUST_LOG="warn")

    reset(state)
    estimated, dry_line = dry_run(binary, p, os.path.join(tmp, "dry"), env)
    dry_calls = len(state.log) + state.throttled

    reset(state)
    run = os.path.join(tmp, "run")
    t0 = time.perf_counter()
    o = subprocess.run([binary, "run", p, "--out", run, "-q"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if o.returncode not in (0, 3):
        raise SystemExit(f"vidcurate run failed ({o.returncode}):\n{o.stderr}")
    with state.lock:
        ours_log, ours_429, bodies = list(state.log), state.throttled, list(state.bodies)
    odd, repairs, roles = Counts.odd, Counts.repairs, dict(Counts.roles)
    made = len(ours_log) + ours_429
    rows = ds.dataset(os.path.join(run, "kep")).to_table(columns=["kept", "reject_codes"]).to_pylist()
    reasons = collections.Counter(",".join(r["reject_codes"] or []) or "kept" for r in rows)

    # The peer: a thread pool of the stage's width, submissions paced at the limit, the same bodies.
    reset(state)
    pacing.paced_peer(f"http://127.0.0.1:{port}/v1/chat/completions", KEY, bodies, WIDTH, LIMIT)
    with state.lock:
        peer_log, peer_429 = list(state.log), state.throttled

    ours, peer = pacing.rate(ours_log), pacing.rate(peer_log)
    err = abs(estimated - made) / made if made else float("inf")
    res = {
        "videos": n, "limit_per_min": LIMIT, "latency_ms": int(LATENCY * 1000),
        "vidcurate": {**pacing.tool_result(ours_log, ours_429, LIMIT), "run_seconds": round(wall, 2),
                      "exit": o.returncode, "repairs": repairs, "other_requests": odd,
                      "by_model": {role: roles.get(m, 0) for role, m in MODELS.items()},
                      "items": len(rows), "items_by_outcome": dict(reasons)},
        "python": {**pacing.tool_result(peer_log, peer_429, LIMIT), "width": WIDTH},
        "ratio": round(ours / peer, 4) if peer else None,
        "dry_run": {"estimated_calls": estimated, "calls_made": made, "made_over_estimated": round(made / estimated, 4)
                    if estimated else None, "error": round(err, 4), "calls_during_dry_run": dry_calls, "line": dry_line},
    }
    res["ok"] = ours / LIMIT >= 0.95 and ours_429 == 0 and err <= 0.10

    print(f"items stage (kep: draft -> refine -> judge, judge always 3), {n} videos, 200 ms latency, "
          f"limit {LIMIT}/min over all requests:", file=out)
    pacing.print_rates(out, LIMIT, ours_log, ours_429, peer_log, peer_429)
    by = ", ".join(f"{role} ({m}) {roles.get(m, 0)}" for role, m in MODELS.items())
    print(f"  vidcurate whole run {wall:.1f} s (exit {o.returncode}); calls by model: {by}; repair requests "
          f"{repairs}; other requests {odd}", file=out)
    print(f"  items {len(rows)}: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())), file=out)
    print(f"dry run: estimated {estimated} calls (the worst case, an upper bound), made {made}, made / estimated "
          f"{made / estimated if estimated else float('nan'):.3f}, error {err:.1%}   (target: within 10 %)"
          + (f"; the dry run itself called the server {dry_calls} times" if dry_calls else ""), file=out)
    if dry_line:
        print(f"  dry run's line: {dry_line}", file=out)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=300)
    ap.add_argument("--bin", default=BIN, help="the vidcurate binary (default: ROOT/target/release/vidcurate)")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout (the table goes to stderr)")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    if not os.path.exists(a.bin):
        if a.bin != BIN:
            raise SystemExit(f"no binary at {a.bin}")
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    with open(FIXTURE) as f:
        server, state = pacing.limited_server(LIMIT, LATENCY, json.load(f), answer)
    tmp = tempfile.mkdtemp(prefix="vidcurate-items-bench-")
    try:
        res = bench(a.bin, a.videos, server.server_address[1], state, tmp, sys.stderr if a.json else sys.stdout)
        if a.json:
            print(json.dumps(res))
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
