#!/usr/bin/env python3
"""Benchmarks of the judging layer, each against a plain-Python peer in the same run.

1. Rate: a fake OpenAI server on 127.0.0.1 answers every chat/completions after 200 ms and
   answers 429 to any request over 600 in a sliding minute. vidcurate's relevance stage runs N
   videos with requests_per_minute = 600; the peer is what a Python data engineer writes: a
   thread pool of the same width pacing submissions at the same limit. Printed: requests per
   minute achieved by each, as a share of the limit (target >= 95 %), 429s seen, and the ratio.
2. Rethreshold: a run directory with R stored relevance rows (default 100,000, written with
   pyarrow in the stage's exact schema); `vidcurate rethreshold RUN --set relevance.min_score=8`
   (target < 1 s) against pyarrow reading the same shards and filtering score >= 8.

Usage: scripts/bench/judge.py [--videos N] [--rows R] [--bin PATH]
"""
import argparse
import collections
import concurrent.futures
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "llm", "openai", "chat_completion_text.json")
LIMIT = 600
LATENCY = 0.2


class Fake(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    arrivals = collections.deque()
    log = []
    throttled = 0
    lock = threading.Lock()
    body = None

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        now = time.monotonic()
        with Fake.lock:
            while Fake.arrivals and now - Fake.arrivals[0] > 60:
                Fake.arrivals.popleft()
            over = len(Fake.arrivals) >= LIMIT
            if over:
                Fake.throttled += 1
            else:
                Fake.arrivals.append(now)
                Fake.log.append(now)
        time.sleep(LATENCY)
        if over:
            out, status = b'{"error":{"message":"Rate limit reached. Please try again in 100ms.","type":"requests","code":"rate_limit_exceeded"}}', 429
        else:
            out, status = Fake.body, 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


def rate(log):
    if len(log) < 2:
        return 0.0
    return (len(log) - 1) / (log[-1] - log[0]) * 60


def reset():
    with Fake.lock:
        Fake.arrivals.clear()
        Fake.log = []
        Fake.throttled = 0


def bench_rate(n, port, tmp):
    with open(os.path.join(tmp, "m.csv"), "w") as f:
        f.write("id,path,title,description\n")
        for i in range(n):
            f.write(f"v{i:05d},https://example.invalid/{i}.mp4,Clip number {i},desc\n")
    with open(os.path.join(tmp, "p.toml"), "w") as f:
        f.write(f"""name = "bench"
[services.openai]
base_url = "http://127.0.0.1:{port}/v1/"
api_key_env = "BENCH_KEY"
requests_per_minute = {LIMIT}
[source]
type = "local"
manifest = "m.csv"
urls = true
[[stages]]
id = "relevance"
type = "relevance"
max_in_flight = 32
compute = {{ service = "openai", model = "gpt-4o", event = "a protest turning violent" }}
""")
    reset()
    env = dict(os.environ, BENCH_KEY="sk-bench", RUST_LOG="warn")
    t0 = time.perf_counter()
    out = subprocess.run([BIN, "run", os.path.join(tmp, "p.toml"), "--out", os.path.join(tmp, "run"), "-q"],
                         env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 3):
        raise SystemExit(out.stderr)
    ours, ours_429 = rate(Fake.log), Fake.throttled

    # The peer: 32 threads, submissions paced at the limit.
    reset()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"

    def call(i):
        body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": f"Clip number {i}"}]}).encode()
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30).read()
        except Exception:
            pass

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        start = time.monotonic()
        futs = []
        for i in range(n):
            wait = start + i * 60 / LIMIT - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            futs.append(pool.submit(call, i))
        for f in futs:
            f.result()
    peer, peer_429 = rate(Fake.log), Fake.throttled
    print(f"rate, {n} calls, 200 ms latency, limit {LIMIT}/min:")
    print(f"  vidcurate {ours:7.1f}/min = {ours / LIMIT:6.1%} of the limit, {ours_429} x 429, whole run {wall:.1f} s")
    print(f"  python    {peer:7.1f}/min = {peer / LIMIT:6.1%} of the limit, {peer_429} x 429")
    print(f"  ratio vidcurate / python: {ours / peer:.3f}   (target: vidcurate >= 95 % of the limit)")


def bench_rethreshold(rows, tmp):
    run = os.path.join(tmp, "rt")
    os.makedirs(os.path.join(run, "source"))
    os.makedirs(os.path.join(run, "relevance"))
    fp = "benchfingerprint"
    pipeline = ('name = "rt"\n[source]\ntype = "local"\nmanifest = "m.csv"\nurls = true\n'
                '[[stages]]\nid = "relevance"\ntype = "relevance"\n'
                'compute = { service = "local", event = "x", positive = ["a"], negative = ["b"] }\n'
                'select = { min_score = 9 }\n')
    manifest = {"tool": "vidcurate", "tool_version": "bench", "pipeline_name": "rt", "pipeline_file": "p.toml",
                "pipeline_toml": pipeline, "source": {},
                "stages": [{"id": "source", "type": "local", "fingerprint": "source-v2", "compute": None, "table": "source/"},
                           {"id": "relevance", "type": "relevance", "fingerprint": fp, "compute": {}, "table": "relevance/"}],
                "invocations": []}
    with open(os.path.join(run, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    rng = np.random.default_rng(7)
    shard = 10_000
    for part, start in enumerate(range(0, rows, shard)):
        n = min(shard, rows - start)
        ids = [f"v{start + i:07d}" for i in range(n)]
        meta = {"vidcurate.videos": json.dumps(ids), "vidcurate.stage": "source", "vidcurate.fingerprint": "source-v2"}
        src = pa.table({"video_id": pa.array(ids), "stage_fingerprint": pa.array(["source-v2"] * n)})
        pq.write_table(src.replace_schema_metadata(meta), os.path.join(run, "source", f"part-{part:05d}.parquet"))
        sim = rng.random(n).astype(np.float32)
        rel = pa.table({
            "video_id": pa.array(ids),
            "score": pa.array(rng.integers(1, 11, n).astype(np.uint8)),
            "raw": pa.array(["9"] * n, type=pa.large_string()),
            "provider": pa.array(["openai"] * n, type=pa.large_string()),
            "model": pa.array(["gpt-4o"] * n, type=pa.large_string()),
            "attempts": pa.array(np.ones(n, dtype=np.uint32)),
            "pos_sim": pa.array(sim),
            "neg_sim": pa.array(sim),
            "stage_fingerprint": pa.array([fp] * n),
        })
        meta = {"vidcurate.videos": json.dumps(ids), "vidcurate.stage": "relevance", "vidcurate.fingerprint": fp}
        pq.write_table(rel.replace_schema_metadata(meta), os.path.join(run, "relevance", f"part-{part:05d}.parquet"))
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        out = subprocess.run([BIN, "rethreshold", run, "--set", "relevance.min_score=8"], capture_output=True, text=True)
        dt = time.perf_counter() - t0
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        best = dt if best is None else min(best, dt)
    after = [l for l in out.stdout.splitlines() if l.startswith("relevance")][-1].split()[-1]
    t0 = time.perf_counter()
    kept = ds.dataset(os.path.join(run, "relevance")).to_table(columns=["video_id", "score"]).filter(
        pa.compute.greater_equal(pa.compute.field("score"), 8)).num_rows
    py = time.perf_counter() - t0
    print(f"rethreshold over {rows:,} stored rows: vidcurate {best:.3f} s (best of 3, whole process, kept {after}); "
          f"pyarrow read + filter {py:.3f} s (kept {kept}); ratio {py / best:.2f}   (target < 1 s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=900)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--bin", help="the vidcurate binary (default: the release build, built when missing)")
    a = ap.parse_args()
    global BIN
    if a.bin:
        BIN = os.path.abspath(a.bin)
    elif not os.path.exists(BIN):
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    body = json.load(open(FIXTURE))
    body["choices"][0]["message"]["content"] = "9"
    Fake.body = json.dumps(body).encode()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="vidcurate-judge-bench-")
    try:
        bench_rate(a.videos, server.server_address[1], tmp)
        bench_rethreshold(a.rows, tmp)
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
