#!/usr/bin/env python3
"""Benchmark: the cost of the metrics endpoint. The same run with and without `--metrics`, the
endpoint scraped every --every seconds (Prometheus' default is 15 s; 0.2 s is 75 times that), in
the same invocation, alternating which goes first, best of --repeat each; prints the wall times
and the ratio (on/off: 1.00 means no cost).

Corpus: scripts/make_demo_corpus.py's demo profile (made once into data/bench/metrics/). The
pipeline: pipelines/demo.toml's stages on that corpus (relevance, probe, frames, OCR, shots,
pre-screen), each run into a fresh run directory, so each does the same work.

  scripts/bench/metrics.py [--bin target/release/vidcurate] [--repeat 3] [--every 0.2]
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_until(port: int, every: float, stop: threading.Event, got: list):
    """GETs /metrics every `every` s until `stop`; counts the answers."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()
                got[0] += 1
        except OSError:
            pass
        stop.wait(every)


def one_run(binary: Path, pipeline: Path, work: Path, metrics: bool, every: float) -> tuple[float, int]:
    out = work / ("on" if metrics else "off")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(binary), "run", str(pipeline), "--out", str(out), "-q"]
    stop, got, scraper = threading.Event(), [0], None
    if metrics:
        port = free_port()
        # --metrics-hold 0: the run ends when its work does, as without the endpoint.
        cmd += ["--metrics", f"127.0.0.1:{port}", "--metrics-hold", "0"]
        scraper = threading.Thread(target=scrape_until, args=(port, every, stop, got))
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if scraper:
        scraper.start()
    _, err = p.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    if scraper:
        scraper.join()
    if p.returncode not in (0, 3):
        sys.exit(f"run failed ({p.returncode}): {err[-2000:]}")
    return wall, got[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=REPO / "target/release/vidcurate")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--every", type=float, default=0.2)
    a = ap.parse_args()
    if not a.bin.exists():
        sys.exit(f"{a.bin}: build it first (cargo build --release), or pass --bin")
    corpus = REPO / "data/bench/metrics"
    if not (corpus / "manifest.csv").exists():
        subprocess.run([sys.executable, str(REPO / "scripts/make_demo_corpus.py"), str(corpus)], check=True)
    work = Path(tempfile.mkdtemp(prefix="vidcurate-bench-metrics-"))
    # The demo's relative paths are the pipelines/ folder's: made absolute for the copy.
    text = (REPO / "pipelines/demo.toml").read_text()
    text = text.replace('"../data/demo/', f'"{corpus}/').replace('"../', f'"{REPO}/')
    pipeline = work / "demo.toml"
    pipeline.write_text(text)
    best = {False: float("inf"), True: float("inf")}
    scrapes = 0
    for i in range(a.repeat):
        for metrics in ([False, True] if i % 2 == 0 else [True, False]):
            wall, n = one_run(a.bin, pipeline, work, metrics, a.every)
            best[metrics] = min(best[metrics], wall)
            scrapes += n
            print(f"round {i + 1}: metrics {'on ' if metrics else 'off'} {wall:7.2f} s" + (f" ({n} scrapes)" if metrics else ""), file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"cpu: {cpu} ({os.cpu_count()} threads)")
    print(f"without --metrics: {best[False]:.2f} s   with (scraped every {a.every} s, {scrapes} scrapes): {best[True]:.2f} s")
    print(f"ratio with/without: {best[True] / best[False]:.3f}")


if __name__ == "__main__":
    main()
