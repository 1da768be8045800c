#!/usr/bin/env python3
"""Benchmark of the questions stage against a rate-limited model server, and of the dry run's
call estimate, each against a plain-Python peer or the calls made, in the same run.

A fake OpenAI server on 127.0.0.1 answers every chat/completions after 200 ms and answers 429
(with a Retry-After header) to any request over 600 in a sliding minute. Its 200 answers are the
recorded `json_schema` body (tests/fixtures/llm/openai/chat_completion_json_schema.json) carrying
three valid items, one per HarmVideoBench level (as tests/questions.rs builds them), so the stage
makes exactly one call per video.

Corpus: N tiny clips (1 s, 96x54, testsrc2 with the clip's name drawn on it, a sine tone, and a
json3 caption file beside each, so the transcript stage needs no speech service), made once in
data/bench/questions-<N>/.

1. Rate: `vidcurate run` over probe -> frames (4 uniform) -> transcript (captions) -> questions
   (gpt-4o-mini, max_images = 4, requests_per_minute = 600). The peer is what a Python data
   engineer writes: a thread pool of the stage's width (8) pacing submissions at the same limit,
   sending the very request bodies vidcurate sent (recorded by the server). Printed: requests,
   seconds from the first request to the last, requests per minute achieved by each, as a share
   of the limit (target >= 95 %), 429s served, and the ratio vidcurate / python.
2. Dry run: `vidcurate run --dry-run` on a fresh run directory, before the real run; its
   questions line's estimated calls against the calls the server received (target: within 10 %).

--json prints one machine-readable line on stdout (the table then goes to stderr).

Usage: scripts/bench/questions.py [--videos N] [--bin PATH] [--json]
"""
import argparse
import concurrent.futures
import json
import os
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
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
LIMIT = 600
LATENCY = 0.2
WIDTH = 8  # the questions stage's default max_in_flight
KEY = "sk-bench"


def item(level, question, options, note=""):
    """One item as tests/questions.rs's `item` builds it: answer A, evidence frames 0 and 1."""
    return {"level": level, "question": question, "options": options, "answer": "A",
            "evidence": {"frames": [0, 1], "start_secs": 0.1, "end_secs": 0.9, "transcript": "speaks here"},
            "rationale": "Shown in the first frames.", "context_note": note}


ITEMS = {"items": [
    item("observable_evidence", "What is shown on screen throughout the clip?",
         ["Coloured test bars", "A crowd in a street", "A person at a desk", "A map of a country"]),
    item("clip_internal_meaning", "What does the clip, taken as a whole, present itself as?",
         ["A signal for testing screens", "A news report on a riot", "An advertisement for a drink",
          "A lecture on road safety"]),
    item("beyond_clip_reasoning", "Why would broadcasters have aired such a picture between programmes?",
         ["To let viewers tune their sets", "To announce a national emergency", "To mark a religious holiday",
          "To advertise a football match"],
         "Test cards were broadcast so viewers could adjust their receivers."),
]}


class Counts:
    """What the stand-in saw besides the rate: requests that are no question_items chat
    completion, and repair requests."""
    odd = 0
    repairs = 0
    lock = threading.Lock()


def answer(v, text, path):
    try:
        ok = path == "/v1/chat/completions" and v["response_format"]["json_schema"]["name"] == "question_items"
    except (KeyError, TypeError):
        ok = False
    with Counts.lock:
        Counts.odd += not ok
        Counts.repairs += "Your previous answer was" in text or "had these problems" in text
    return ITEMS


def reset(state):
    state.reset()
    with Counts.lock:
        Counts.odd = Counts.repairs = 0


def clips(n, out):
    """N clips of 1 s in data/bench/questions-<N>/, each with its name drawn and captions beside it."""
    d = os.path.join(ROOT, "data", "bench", f"questions-{n}")
    os.makedirs(d, exist_ok=True)

    def make(i):
        name = f"q{i:05d}"
        mp4, cap = os.path.join(d, f"{name}.mp4"), os.path.join(d, f"{name}.en.json3")
        if not os.path.exists(mp4):
            tmp = os.path.join(d, f".{name}.tmp.mp4")
            subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y",
                            "-f", "lavfi", "-i", "testsrc2=s=96x54:r=25:d=1", "-f", "lavfi", "-i", "sine=d=1",
                            "-vf", f"drawtext=fontfile={FONT}:text={name}:fontsize=14:fontcolor=white:"
                                   "box=1:boxcolor=black:x=2:y=2",
                            "-c:v", "libx264", "-preset", "ultrafast", "-g", "50", "-pix_fmt", "yuv420p",
                            "-c:a", "aac", "-shortest", tmp], check=True)
            os.replace(tmp, mp4)
        if not os.path.exists(cap):
            with open(cap, "w") as f:
                json.dump({"events": [{"tStartMs": 100, "dDurationMs": 800,
                                       "segs": [{"utf8": f"{name} speaks here"}]}]}, f)

    t0 = time.perf_counter()
    missing = sum(not os.path.exists(os.path.join(d, f"q{i:05d}.mp4")) for i in range(n))
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(make, range(n)))
    if missing:
        print(f"made {missing} clips in {d} in {time.perf_counter() - t0:.1f} s", file=out)
    return d


def write_pipeline(tmp, videos, port):
    p = os.path.join(tmp, "p.toml")
    with open(p, "w") as f:
        f.write(f"""name = "bench-questions"
[services.openai]
base_url = "http://127.0.0.1:{port}/v1/"
api_key_env = "VIDCURATE_BENCH_KEY"
requests_per_minute = {LIMIT}

[services.asr]
base_url = "http://127.0.0.1:9/v1/"
api_key_env = "VIDCURATE_BENCH_KEY"

[source]
type = "local"
dir = "{videos}"

[[stages]]
id = "probe"
type = "probe"

[[stages]]
id = "frames"
type = "frames"
compute = {{ mode = "uniform", count = 4 }}

[[stages]]
id = "transcript"
type = "transcript"
compute = {{ service = "asr", model = "whisper-1" }}

[[stages]]
id = "questions"
type = "questions"
compute = {{ service = "openai", model = "gpt-4o-mini", max_images = 4 }}
""")
    return p


def dry_run(binary, p, out, env):
    """The questions line of `run --dry-run`: its estimated calls (columns as tests/dryrun.rs reads
    them: stage, type, videos, free, calls, ...)."""
    o = subprocess.run([binary, "run", p, "--out", out, "--dry-run"], env=env, capture_output=True, text=True)
    if o.returncode != 0:
        raise SystemExit(f"dry run failed ({o.returncode}):\n{o.stdout}\n{o.stderr}")
    line = next((l for l in o.stdout.splitlines() if l.split()[:1] == ["questions"]), None)
    if line is None:
        raise SystemExit(f"no questions line in the dry run:\n{o.stdout}")
    return float(line.split()[4]), line.strip()


def bench(binary, n, port, state, tmp, out):
    videos = clips(n, out)
    p = write_pipeline(tmp, videos, port)
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
    odd, repairs = Counts.odd, Counts.repairs
    made = len(ours_log) + ours_429
    rows = ds.dataset(os.path.join(run, "questions")).to_table(columns=["kept"]).column("kept").to_pylist()

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
                      "items": len(rows), "items_kept": sum(bool(k) for k in rows)},
        "python": {**pacing.tool_result(peer_log, peer_429, LIMIT), "width": WIDTH},
        "ratio": round(ours / peer, 4) if peer else None,
        "dry_run": {"estimated_calls": estimated, "calls_made": made, "error": round(err, 4),
                    "calls_during_dry_run": dry_calls, "line": dry_line},
    }
    res["ok"] = ours / LIMIT >= 0.95 and ours_429 == 0 and err <= 0.10

    print(f"questions stage, {n} videos, 200 ms latency, limit {LIMIT}/min:", file=out)
    pacing.print_rates(out, LIMIT, ours_log, ours_429, peer_log, peer_429)
    print(f"  vidcurate whole run {wall:.1f} s (exit {o.returncode}); items {res['vidcurate']['items']}, kept "
          f"{res['vidcurate']['items_kept']}; repair requests {repairs}; other requests {odd}", file=out)
    print(f"dry run: questions estimated {estimated:g} calls, made {made}, error {err:.1%}   (target: within 10 %)"
          + (f"; the dry run itself called the server {dry_calls} times" if dry_calls else ""), file=out)
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
    server, state = pacing.limited_server(LIMIT, LATENCY, json.load(open(FIXTURE)), answer)
    tmp = tempfile.mkdtemp(prefix="vidcurate-questions-bench-")
    try:
        res = bench(a.bin, a.videos, server.server_address[1], state, tmp, sys.stderr if a.json else sys.stdout)
        if a.json:
            print(json.dumps(res))
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
