#!/usr/bin/env python3
"""Runs at scale: a run directory on S3 against a local folder, and memory against run size.

Part 1 runs the demo pipeline (pipelines/demo.toml on data/demo, fully offline) into a local
folder and into a local S3 server (moto, from scripts/setup.sh) in the same session, alternating,
best of --repeat, and prints the time of each and the ratio (S3 speed as a share of local speed).

Part 2 measures peak RSS of a resume that extends a run: for each size N it makes a run of N
videos through a cheap pipeline (a local manifest whose N rows point at a few tiny generated
clips under distinct ids, and the probe stage), then reruns it with 1 % more rows and records the
rerun's peak RSS (ru_maxrss of the child). It prints one line per size and the ratio to the
smallest.

  python3 scripts/bench/cluster.py                  # both parts, sizes 1000 10000 100000
  python3 scripts/bench/cluster.py --sizes 1000 10000 --skip-s3
  python3 scripts/bench/cluster.py --json out.json

Needs: ./scripts/demo.sh once (the release binary and data/demo), ./scripts/setup.sh (moto).
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# VIDCURATE_BIN runs another build (e.g. target/debug/vidcurate while a release build is cold).
BIN = Path(os.environ.get("VIDCURATE_BIN", ROOT / "target/release/vidcurate"))
MOTO = ROOT / "data/venv-tools/bin/moto_server"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_moto():
    port = free_port()
    proc = subprocess.Popen([str(MOTO), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except Exception:
            time.sleep(0.1)
    return proc, url


def make_bucket(endpoint, name):
    req = urllib.request.Request(f"{endpoint}/{name}", method="PUT")
    urllib.request.urlopen(req, timeout=10)


def s3_env(endpoint):
    env = dict(os.environ)
    env.update({
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
    })
    return env


def timed_run(args, env=None):
    """Wall time of one vidcurate invocation."""
    t0 = time.perf_counter()
    p = subprocess.run([str(BIN)] + args, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    secs = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        sys.exit(f"vidcurate {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return secs


def peak_rss_of(args, env=None):
    """Wall time and peak RSS (MiB) of exactly one invocation. ru_maxrss of RUSAGE_CHILDREN is
    the largest of all children ever waited for, so each run is waited for by a fresh Python."""
    code = ("import resource,subprocess,sys;"
            "p=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.PIPE);"
            "sys.stderr.buffer.write(p.stderr[-2000:]);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, str(BIN)] + args, env=env,
                       capture_output=True, text=True)
    secs = time.perf_counter() - t0
    rss_kib, rc = p.stdout.split()
    if int(rc) not in (0, 3):
        sys.exit(f"vidcurate {' '.join(args)} failed ({rc}):\n{p.stderr}")
    return secs, int(rss_kib) / 1024


def part_s3(repeat):
    if not (ROOT / "data/demo/manifest.csv").exists():
        sys.exit("run ./scripts/demo.sh first (it makes data/demo and the release binary)")
    proc, endpoint = start_moto()
    try:
        local_times, s3_times = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(repeat):
                out = Path(tmp) / f"local{i}"
                secs = timed_run(["run", "pipelines/demo.toml", "--out", str(out), "-q"])
                local_times.append(secs)
                bucket = f"bench{i}"
                make_bucket(endpoint, bucket)
                work = Path(tmp) / f"work{i}"
                secs = timed_run(["run", "pipelines/demo.toml", "--out", f"s3://{bucket}/demo",
                                     "--work-dir", str(work), "-q"], env=s3_env(endpoint))
                s3_times.append(secs)
                print(f"  round {i + 1}: local {local_times[-1]:.1f} s, s3 {s3_times[-1]:.1f} s",
                      flush=True)
    finally:
        proc.terminate()
    best_local, best_s3 = min(local_times), min(s3_times)
    ratio = best_local / best_s3
    print(f"demo pipeline: local folder {best_local:.1f} s, local S3 (moto) {best_s3:.1f} s: "
          f"S3 runs at {ratio:.2f} of local speed (best of {repeat})")
    return {"local_secs": best_local, "s3_secs": best_s3, "s3_over_local_speed": ratio}


def tiny_clips(d, n=4):
    paths = []
    for i in range(n):
        p = d / f"tiny{i}.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc=size=64x36:rate=5:duration={0.4 + 0.2 * i}",
                        "-pix_fmt", "yuv420p", str(p)], check=True)
        paths.append(p)
    return paths


def manifest(path, n, clips):
    with open(path, "w") as f:
        f.write("path,id\n")
        for i in range(n):
            f.write(f"{clips[i % len(clips)]},v{i:07d}\n")


def part_rss(sizes):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        clips = tiny_clips(tmp)
        for n in sizes:
            d = tmp / f"n{n}"
            d.mkdir()
            (d / "p.toml").write_text(
                'name = "rss"\n[source]\ntype = "local"\nmanifest = "m.csv"\n'
                '[[stages]]\nid = "probe"\ntype = "probe"\n')
            manifest(d / "m.csv", n, clips)
            t_make, rss_make = peak_rss_of(["run", str(d / "p.toml"), "--out", str(d / "run"), "-q"])
            manifest(d / "m.csv", n + max(n // 100, 1), clips)
            t_ext, rss_ext = peak_rss_of(["run", str(d / "p.toml"), "--out", str(d / "run"), "-q"])
            rows.append({"videos": n, "make_secs": t_make, "make_rss_mib": rss_make,
                         "resume_secs": t_ext, "resume_rss_mib": rss_ext})
            print(f"  {n:>7} videos: first run {t_make:.1f} s, peak {rss_make:.0f} MiB; "
                  f"resume + 1 %: {t_ext:.1f} s, peak {rss_ext:.0f} MiB", flush=True)
            shutil.rmtree(d)
    base = rows[0]["resume_rss_mib"]
    print(f"{'videos':>8} {'resume peak RSS':>16} {'vs smallest':>12}")
    for r in rows:
        r["ratio"] = r["resume_rss_mib"] / base
        print(f"{r['videos']:>8} {r['resume_rss_mib']:>12.0f} MiB {r['ratio']:>11.2f}x")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-s3", action="store_true")
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.chdir(ROOT)
    if not BIN.exists():
        sys.exit(f"{BIN} missing: cargo build --release")
    result = {}
    if not a.skip_s3:
        print("part 1: demo pipeline, local folder vs local S3 server", flush=True)
        result["s3"] = part_s3(a.repeat)
    if not a.skip_rss:
        print("part 2: peak RSS of a resume that extends a run (local manifest + probe)", flush=True)
        result["rss"] = part_rss(a.sizes)
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
