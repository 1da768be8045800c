#!/usr/bin/env python3
"""Benchmark: 16 uniform frames per video, vidcurate vs the ffmpeg CLI, in the same run.

For each video, the same 16 target times (centres of 16 equal segments) are extracted as JPEG by
  vidcurate  `vidcurate run` on a one-video pipeline (source -> probe -> frames), whole process
             timed: start-up, hashing, probing, seeking, decoding, JPEG, Parquet;
  ffmpeg (a) one `ffmpeg -ss T -i VIDEO -frames:v 1` per frame (accurate seek, 16 processes);
  ffmpeg (b) one pass with a `select` filter picking the 16 frame numbers (decodes everything).
Prints wall times (best of --repeat) and the ratios ffmpeg/vidcurate (> 1: vidcurate faster).
The corpus: the 1080p slides fixture plus generated 720p and 1080p H.264 clips of 1-5 min
(made once under data/bench/, with a 2 s GOP and B-frames like typical uploads).

Usage: scripts/bench/frames.py [--repeat N] [--quick]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "video", "slides_1080p_122s.mp4")
N = 16


def sh(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode not in (0,):
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-1500:]}")


def make_clip(path, size, secs, rate=30):
    if os.path.exists(path):
        return
    tmp = path + ".tmp.mp4"
    sh(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
        f"testsrc2=s={size}:r={rate}:d={secs}", "-c:v", "libx264", "-preset", "ultrafast", "-crf", "23",
        "-g", str(2 * rate), "-bf", "2", "-pix_fmt", "yuv420p", tmp])
    os.replace(tmp, path)


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=duration,avg_frame_rate", "-of", "json", path],
                         capture_output=True, text=True, check=True).stdout
    s = json.loads(out)["streams"][0]
    num, den = s["avg_frame_rate"].split("/")
    return float(s["duration"]), float(num) / float(den)


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="only the fixture and a 1-min 720p clip")
    a = ap.parse_args()
    if not os.path.exists(BIN):
        sh(["cargo", "build", "--release", "--locked"], cwd=ROOT)
    corpus_dir = os.path.join(ROOT, "data", "bench")
    os.makedirs(corpus_dir, exist_ok=True)
    clips = [("slides 1080p 122s (fixture)", FIXTURE)]
    specs = [("720p 60s", "1280x720", 60)] if a.quick else [
        ("720p 60s", "1280x720", 60), ("720p 180s", "1280x720", 180), ("1080p 60s", "1920x1080", 60),
        ("1080p 300s", "1920x1080", 300)]
    for name, size, secs in specs:
        p = os.path.join(corpus_dir, f"{size}_{secs}s.mp4")
        print(f"corpus: {name} ...", flush=True)
        make_clip(p, size, secs)
        clips.append((name, p))

    work = tempfile.mkdtemp(prefix="vidcurate-bench-")
    rows = []
    for name, path in clips:
        dur, fps = probe(path)
        targets = [dur * (i + 0.5) / N for i in range(N)]
        vdir = os.path.join(work, "v")
        shutil.rmtree(vdir, ignore_errors=True)
        os.makedirs(vdir)
        os.symlink(os.path.abspath(path), os.path.join(vdir, os.path.basename(path)))
        pipe = os.path.join(work, "p.toml")
        with open(pipe, "w") as f:
            f.write('name = "bench"\n[source]\ntype = "local"\ndir = "v"\n'
                    '[[stages]]\nid = "probe"\ntype = "probe"\n'
                    f'[[stages]]\nid = "frames"\ntype = "frames"\ncompute = {{ count = {N}, jpeg_quality = 90 }}\n')

        def ours():
            out = os.path.join(work, "run")
            shutil.rmtree(out, ignore_errors=True)
            sh([BIN, "run", pipe, "--out", out, "-q"], cwd=work)

        def per_frame():
            out = os.path.join(work, "a")
            os.makedirs(out, exist_ok=True)
            for i, t in enumerate(targets):
                sh(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-ss", f"{t:.6f}", "-i", path,
                    "-frames:v", "1", "-q:v", "3", os.path.join(out, f"{i:05d}.jpg")])

        def one_pass():
            out = os.path.join(work, "b")
            os.makedirs(out, exist_ok=True)
            import math
            nums = [math.ceil(t * fps - 1e-6) for t in targets]
            expr = "+".join(f"eq(n\\,{n})" for n in nums)
            sh(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", path, "-vf", f"select={expr}",
                "-vsync", "0", "-q:v", "3", os.path.join(out, "%05d.jpg")])

        t_ours, _ = timed(ours, a.repeat)
        t_a, _ = timed(per_frame, a.repeat)
        t_b, _ = timed(one_pass, a.repeat)
        rows.append((name, t_ours, t_a, t_b))
        print(f"{name:28} vidcurate {t_ours:6.2f}s  ffmpeg(a) {t_a:6.2f}s  ffmpeg(b) {t_b:6.2f}s  "
              f"ratio a/ours {t_a / t_ours:5.2f}x  b/ours {t_b / t_ours:5.2f}x", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    tot = [sum(r[i] for r in rows) for i in (1, 2, 3)]
    print()
    print("| video | vidcurate (s) | ffmpeg -ss per frame (s) | ffmpeg select one pass (s) | (a)/vidcurate | (b)/vidcurate |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, o, ta, tb in rows:
        print(f"| {name} | {o:.2f} | {ta:.2f} | {tb:.2f} | {ta / o:.2f}x | {tb / o:.2f}x |")
    print(f"| **all** | {tot[0]:.2f} | {tot[1]:.2f} | {tot[2]:.2f} | **{tot[1] / tot[0]:.2f}x** | **{tot[2] / tot[0]:.2f}x** |")
    print(f"\ncpu cores: {os.cpu_count()}; best of {a.repeat}; targets (a) >= 4x, (b) >= 1.7x")


if __name__ == "__main__":
    main()
