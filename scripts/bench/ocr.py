#!/usr/bin/env python3
"""Benchmark: OCR of the same frames by vidcurate and by RapidOCR 1.4.4 (same models, det + cls +
rec, same ONNX Runtime version and thread count), in the same run.

Frames: the slides fixture at 1 fps (1080p, full of text) and frames of generated overlay clips
(720p/1080p, the ocr-truth corpus). Each tool is one process that loads the models and reads every
frame; wall time includes model loading. vidcurate runs twice: every frame from scratch
(`--reuse off`) and reading the frames in order reusing what earlier ones found (`--reuse on`, as
the ocr stage does by default). Prints images/s, the ratios, how often reuse fired, and the share
of RapidOCR's regions whose text vidcurate reads identically on the same image. The >= 98 %
target is parity, for `--det-profile rapidocr`: the default detects 1080p frames smaller and
reads some of their lines differently (docs/src/benchmarks/ocr.md).

Then the same share on a set of non-frame images made by scripts/bench/make_images.py (photos,
scans, word crops, RGBA/grey+alpha text on transparent, palette PNG/GIF, 1-bit, CMYK, EXIF-rotated),
per kind and in all; 16-bit greyscale files are listed apart (RapidOCR hands their raw values to
the models and reads nothing).

Then the real-image set (`make_images.py --real`: 1280x720 camera JPEGs of real photos with
small low-contrast signs, English book pages stored as 8-bit palette PNG under a `.jpg` name,
1167x54 mixed Chinese/English strips), per kind and in all.

Usage: scripts/bench/ocr.py [--slides-frames N] [--threads T] [--sets frames,images,real] [--bin PATH]
                           [--engine auto|openvino|onnxruntime]
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
RAPID_PY = os.path.join(ROOT, "data", "venv-rapidocr", "bin", "python")
SLIDES = os.path.join(ROOT, "tests", "fixtures", "video", "slides_1080p_122s.mp4")

RAPID = r"""
import json, sys, time
from rapidocr_onnxruntime import RapidOCR
threads = int(sys.argv[1])
eng = RapidOCR(intra_op_num_threads=threads, inter_op_num_threads=1)
for f in sys.argv[2:]:
    res, _ = eng(f)
    print(json.dumps([r[1] for r in (res or [])]), flush=True)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slides-frames", type=int, default=60)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--sets", default="frames,images,real", help="which image sets to read")
    ap.add_argument("--bin", default=BIN, help="the vidcurate binary (default: the release build)")
    ap.add_argument("--engine", default="auto", choices=["auto", "openvino", "onnxruntime"],
                    help="vidcurate's OCR engine (auto: OpenVINO where it loads)")
    ap.add_argument("--det-profile", default="capped", choices=["capped", "rapidocr", "paddleocr"],
                    help="vidcurate's detection size (capped: the default; rapidocr: RapidOCR parity)")
    a = ap.parse_args()
    sets = set(a.sets.split(","))
    if a.bin == BIN and not os.path.exists(BIN):
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    if not os.path.exists(RAPID_PY):
        sys.exit("RapidOCR reference missing: run scripts/setup.sh")
    work = tempfile.mkdtemp(prefix="vidcurate-ocr-bench-")
    if "frames" in sets:
        frames(a, work)
    if "images" in sets:
        per_kind(a, os.path.join(work, "images"), [], "non-frame images", apart={"i16"})
    if "real" in sets:
        per_kind(a, os.path.join(work, "real"), ["--real"], "real images")
    shutil.rmtree(work, ignore_errors=True)


def frames(a, work):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", SLIDES, "-vf", "fps=1", "-frames:v",
                    str(a.slides_frames), "-q:v", "2", os.path.join(work, "slides_%04d.jpg")], check=True)
    truth = os.path.join(ROOT, "data", "bench", "truth")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_corpus.py"), truth, "--profile",
                    "ocr-truth", "--clips", "8", "--seconds", "3"], check=True, stdout=subprocess.DEVNULL)
    for v in sorted(glob.glob(os.path.join(truth, "videos", "*.mp4"))):
        name = os.path.splitext(os.path.basename(v))[0]
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", v, "-vf", "fps=1", "-q:v", "2",
                        os.path.join(work, f"{name}_%02d.jpg")], check=True)
    files = sorted(glob.glob(os.path.join(work, "*.jpg")))

    runs = {}
    for reuse in ("off", "on"):
        t0 = time.perf_counter()
        r = subprocess.run([a.bin, "ocr", "--engine", a.engine, "--det-profile", a.det_profile, "--threads", str(a.threads), "--reuse", reuse, *files],
                           capture_output=True, text=True, check=True)
        runs[reuse] = (time.perf_counter() - t0, r)
    t0 = time.perf_counter()
    theirs = subprocess.run([RAPID_PY, "-c", RAPID, str(a.threads), *files], capture_output=True, text=True, check=True)
    t_rapid = time.perf_counter() - t0

    n = len(files)
    print(f"images: {n} ({a.slides_frames} slides frames at 1 fps, {n - a.slides_frames} overlay frames); threads: {a.threads}")
    print(f"RapidOCR              : {t_rapid:6.2f} s  {n / t_rapid:5.2f} images/s")
    for reuse, (t_ours, ours) in runs.items():
        same, total = identical(ours.stdout, theirs.stdout)
        print(f"vidcurate, reuse {reuse:<4} : {t_ours:6.2f} s  {n / t_ours:5.2f} images/s   "
              f"ratio {t_rapid / t_ours:.2f}x   identical text: {same}/{total} RapidOCR regions = "
              f"{100 * same / max(1, total):.1f} %   (target >= 98 %)")
        for line in ours.stderr.splitlines():
            if line.startswith("reuse:"):
                print("    " + line)


def per_kind(a, images, make_args, title, apart=()):
    """Identical share on a set made by make_images.py, per kind (the name before the last `_`)
    and in all, kinds in `apart` left out of the total."""
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench", "make_images.py"), images, *make_args],
                   check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(images, "*")))
    ours = subprocess.run([a.bin, "ocr", "--engine", a.engine, "--det-profile", a.det_profile, "--threads", str(a.threads), *files], capture_output=True, text=True)
    theirs = subprocess.run([RAPID_PY, "-c", RAPID, str(a.threads), *files], capture_output=True, text=True,
                            check=True)
    ours_by = {json.loads(l)["source"]: l for l in ours.stdout.splitlines()}
    kinds = {}
    for f, t in zip(files, theirs.stdout.splitlines()):
        kind = os.path.basename(f).rsplit("_", 1)[0]
        s, n = identical(ours_by.get(f, '{"regions": []}'), t)
        ours_n = len(json.loads(ours_by.get(f, '{"regions": []}'))["regions"])
        k = kinds.setdefault(kind, [0, 0, 0, 0])
        k[0] += s
        k[1] += n
        k[2] += ours_n
        k[3] += 1
    same = sum(v[0] for k, v in kinds.items() if k not in apart)
    total = sum(v[1] for k, v in kinds.items() if k not in apart)
    print(f"{title}, per kind (identical / RapidOCR regions; regions vidcurate read):")
    for k, (s_, n_, o_, files_) in sorted(kinds.items()):
        share = f"{100 * s_ / n_:5.1f} %" if n_ else "    -  "
        print(f"  {k:12} {files_:3} files  {s_:3}/{n_:<3} {share}  ours {o_}")
    note = f"; {', '.join(sorted(apart))} apart" if apart else ""
    print(f"{title}: {len(files)}; identical text: {same}/{total} RapidOCR regions = "
          f"{100 * same / max(1, total):.1f} %   (target >= 98 %{note})")
    truth_file = images.rstrip("/") + ".truth.json"
    if os.path.exists(truth_file):
        with open(truth_file) as f:
            truth = json.load(f)
        theirs_by = {f: l for f, l in zip(files, theirs.stdout.splitlines())}
        read = {"vidcurate": lambda f: [r["text"] for r in json.loads(ours_by.get(f, '{"regions": []}'))["regions"]],
                "RapidOCR": lambda f: json.loads(theirs_by.get(f, "[]"))}
        for tool, texts in read.items():
            found, n = word_recall(truth, images, texts)
            print(f"  scene words found ({tool}): {found}/{n} = {100 * found / max(1, n):.1f} % of the signs' words")


def word_recall(truth, folder, texts):
    """Drawn words found among a tool's readings of the same image: each word of each sign is
    matched at most once against the words the tool read (punctuation and case ignored)."""
    norm = lambda w: "".join(c for c in w.lower() if c.isalnum())
    found = total = 0
    for name, signs in truth.items():
        pool = [norm(w) for t in texts(os.path.join(folder, name)) for w in t.split()]
        for sign in signs:
            for w in sign.split():
                total += 1
                if norm(w) in pool:
                    found += 1
                    pool.remove(norm(w))
    return found, total


def identical(ours_lines, theirs_lines):
    """RapidOCR regions whose text vidcurate reads identically on the same image (as a multiset)."""
    ours_t = [[r["text"] for r in json.loads(l)["regions"]] for l in ours_lines.splitlines()]
    theirs_t = [json.loads(l) for l in theirs_lines.splitlines()]
    total = same = 0
    for o, t in zip(ours_t, theirs_t):
        pool = list(o)
        for x in t:
            total += 1
            if x in pool:
                same += 1
                pool.remove(x)
    return same, total


if __name__ == "__main__":
    main()
