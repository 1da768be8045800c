#!/usr/bin/env python3
"""Benchmark: end to end, a folder of videos to OCR regions with stroke colour and layout in
Parquet, vidcurate vs the Python a data engineer would write, in the same run.

Corpus: scripts/make_demo_corpus.py --profile ocr-truth (720p and 1080p clips with known overlay
text, colour and ink box; made once: 40 clips of 12 s in data/bench/e2e/, other sizes (--quick: 8
clips) in data/bench/e2e-<clips>x<seconds>/).
  vidcurate  `vidcurate run` on a fresh run directory: local manifest -> probe -> frames (16
             uniform, JPEG q90) -> ocr (stage `ocr_regions`, RapidOCR 1.4.4's defaults), the whole
             process timed (start-up, models, decoding, JPEG, OCR, colour, layout, creator-added
             verdicts, Parquet).
  peer       one Python process over all videos, one after the other: PyAV decodes the same 16
             target times (t_i = D*(i+1/2)/16: seek to the keyframe before, decode forward to the
             first frame at or after t_i; PyAV's default slice threading, --peer-threaded-decode
             for frame threads), RapidOCR 1.4.4 (onnxruntime 1.31.1, intra_op_num_threads
             = --threads) reads each frame as decoded (no JPEG round trip), then per region an Otsu
             split of the box's grey levels into stroke and background (the class that does not
             hold the box's rim, else the smaller one), the strokes' mean HSV (circular mean hue),
             layout (centre, size, aspect ratio, 5 x 6 grid cell), all written with pyarrow to
             Parquet. The whole process timed, model loading included.
vidcurate runs with --profile, and its best run's table (wall and CPU seconds per stage and step:
decode, resize, detection, recognition, colour (its Lab conversion and clustering), Parquet, digests, ...) is printed after the result.
Both are scored against ground_truth.jsonl as scripts/eval_ocr_truth.py scores a run (its norm()
and sim()): for every static overlay and every sampled frame it is visible on, the region with the
most similar text is its match; text recall = share of those pairs read exactly (case and
non-alphanumerics ignored); hue ok = share of coloured overlays (saturation > 0.3) read exactly
whose stroke hue is within 3 deg (circular); centre ok = box centre within 2 % of the ink box's.
The two take turns, --repeat times, the first to go alternating (vidcurate first in odd rounds),
and the best of each is compared; the CPU model (and AVX-512 or not) is printed with the result,
since the ratio moves with it. Prints wall seconds (best of --repeat), frames/s, the ratio peer/vidcurate (> 1: vidcurate
faster), and the scores, then the overlays one tool reads (or colours) right and the other not;
--json prints one machine-readable line on stdout (the table then goes to stderr).

The peer runs in data/venv-rapidocr (scripts/setup.sh makes it); PyAV and pyarrow are added to it
when missing (av 19.0.2, or 18.1.0 on Python < 3.12, which 19.x does not support); --peer-python
names another interpreter. Each side writes into a fresh folder under data/bench/e2e-work/ (made
anew by every invocation: nothing is resumed), vidcurate from a copy of the binary. The CPU time
other processes used during each run is measured (/proc/stat): a build or test run on the machine
makes the numbers worthless, and the script says so; --wait-idle waits for a quiet machine first.
--ocr-compute adds keys to the ocr stage's compute table (e.g. reuse=off); by default none (the
stage's own defaults).

Usage: scripts/bench/e2e.py [--quick] [--clips N] [--seconds S] [--repeat N] [--threads T]
                            [--skip-peer] [--ocr-compute 'key=value,...' | '{"key": ...}']
                            [--peer-threaded-decode] [--wait-idle SECS] [--bin PATH] [--peer-python PY]
                            [--json]
"""
import argparse
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
VENV_PY = os.path.join(ROOT, "data", "venv-rapidocr", "bin", "python")
PYARROW_PIN = "26.0.1"
COUNT = 16
GRID_ROWS, GRID_COLS = 5, 6

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from eval_ocr_truth import norm, sim, visible  # noqa: E402  (the scorer's rules, shared)
import pyarrow.dataset as pads  # noqa: E402

# The peer: what a data engineer would write with PyAV, RapidOCR, OpenCV and pyarrow.
PEER = r'''
import csv, json, math, os, sys, time
import av
import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rapidocr_onnxruntime import RapidOCR

manifest, out_dir, count, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
thread_type = sys.argv[5]  # "default": PyAV's (slice threads); "AUTO": frame threads too
ROWS = ["top", "upper", "middle", "lower", "bottom"]
COLS = ["far-left", "left", "center-left", "center-right", "right", "far-right"]
engine = RapidOCR(intra_op_num_threads=threads)


def grab_frames(path):
    """(target_secs, timestamp_secs, BGR array) of `count` uniform targets."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        if thread_type != "default":
            stream.thread_type = thread_type
        tb = float(stream.time_base)
        start = stream.start_time or 0
        if stream.duration:
            duration = stream.duration * tb
        else:
            duration = container.duration / av.time_base
        out = []
        for i in range(count):
            t = duration * (i + 0.5) / count
            target = start + math.ceil(t / tb - 1e-6)
            container.seek(target, stream=stream, backward=True, any_frame=False)
            got = None
            for frame in container.decode(stream):
                got = frame
                if frame.pts is not None and frame.pts >= target:
                    break
            if got is None:
                raise RuntimeError(f"{path}: no frame at {t:.3f} s")
            out.append((t, (got.pts - start) * tb, got.to_ndarray(format="bgr24")))
        return out


def stroke_colour(img, quad):
    """Mean HSV of the stroke pixels in the box (Otsu on grey levels)."""
    h, w = img.shape[:2]
    xs, ys = [p[0] for p in quad], [p[1] for p in quad]
    x0, x1 = max(0, int(math.floor(min(xs)))), min(w, int(math.ceil(max(xs))))
    y0, y1 = max(0, int(math.floor(min(ys)))), min(h, int(math.ceil(max(ys))))
    if x1 - x0 < 2 or y1 - y0 < 2:
        return None, None, None, 0
    crop = img[y0:y1, x0:x1]
    grey = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY)
    _, mask = cv2.threshold(grey, 0, 1, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    mask = mask.astype(bool)
    rim = np.concatenate([mask[0], mask[-1], mask[:, 0], mask[:, -1]])
    bright_rim = rim.mean()
    if abs(bright_rim - 0.5) > 0.1:
        stroke = ~mask if bright_rim > 0.5 else mask  # the class that is not the rim's
    else:
        stroke = mask if mask.mean() < 0.5 else ~mask  # the smaller class
    if not stroke.any():
        return None, None, None, 0
    hsv = cv2.cvtColor(crop.astype(np.float32) / 255.0, cv2.COLOR_BGR2HSV)[stroke]
    hue = np.radians(hsv[:, 0])
    mean_h = math.degrees(math.atan2(np.sin(hue).mean(), np.cos(hue).mean())) % 360.0
    return float(mean_h), float(hsv[:, 1].mean()), float(hsv[:, 2].mean()), int(stroke.sum())


def layout(quad, w, h):
    d = lambda a, b: math.hypot(a[0] - b[0], a[1] - b[1])
    bw = (d(quad[0], quad[1]) + d(quad[3], quad[2])) / 2
    bh = (d(quad[0], quad[3]) + d(quad[1], quad[2])) / 2
    cx = sum(p[0] for p in quad) / 4 / w
    cy = sum(p[1] for p in quad) / 4 / h
    row, col = min(int(cy * len(ROWS)), len(ROWS) - 1), min(int(cx * len(COLS)), len(COLS) - 1)
    return dict(center_x=cx, center_y=cy, width=bw / w, height=bh / h,
                aspect_ratio=max(bw, bh) / max(1.0, min(bw, bh)), grid_row=row, grid_col=col,
                grid_cell=f"{ROWS[row]} {COLS[col]}")


base = os.path.dirname(os.path.abspath(manifest))
regions, frames = [], []
with open(manifest, newline="") as f:
    videos = list(csv.DictReader(f))
spent = dict(decode=0.0, ocr=0.0, colour_layout=0.0, parquet=0.0)  # where the time went
for v in videos:
    t0 = time.perf_counter()
    grabbed = grab_frames(os.path.join(base, v["path"]))
    spent["decode"] += time.perf_counter() - t0
    for idx, (target, ts, img) in enumerate(grabbed):
        h, w = img.shape[:2]
        frames.append(dict(video_id=v["id"], frame_index=idx, target_secs=target, timestamp_secs=ts,
                           width=w, height=h))
        t0 = time.perf_counter()
        result, _ = engine(img)
        t1 = time.perf_counter()
        for quad, text, score in result or []:
            th, ts_, tv, n = stroke_colour(img, quad)
            regions.append(dict(video_id=v["id"], frame_index=idx, timestamp_secs=ts, text=text,
                                score=float(score), quad=[float(c) for p in quad for c in p],
                                frame_width=w, frame_height=h, **layout(quad, w, h),
                                text_h=th, text_s=ts_, text_v=tv, stroke_pixels=n))
        spent["ocr"] += t1 - t0
        spent["colour_layout"] += time.perf_counter() - t1
t0 = time.perf_counter()
os.makedirs(out_dir, exist_ok=True)
pq.write_table(pa.Table.from_pylist(regions), os.path.join(out_dir, "regions.parquet"))
pq.write_table(pa.Table.from_pylist(frames), os.path.join(out_dir, "frames.parquet"))
spent["parquet"] = time.perf_counter() - t0
print(f"{len(videos)} videos, {len(frames)} frames, {len(regions)} regions", file=sys.stderr)
print("spent " + json.dumps({k: round(x, 2) for k, x in spent.items()}), file=sys.stderr)
'''


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def corpus(clips, secs):
    name = "e2e" if (clips, secs) == (40, 12.0) else f"e2e-{clips}x{secs:g}"
    out = os.path.join(ROOT, "data", "bench", name)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_corpus.py"), out, "--profile",
                        "ocr-truth", "--clips", str(clips), "--seconds", str(secs)],
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("corpus generation failed")
    log(r.stdout.strip())
    return out


def peer_env(python):
    """Makes sure the peer's interpreter has RapidOCR, PyAV and pyarrow; returns the PyAV version."""
    if not os.path.exists(python):
        sys.exit(f"{python} missing: run scripts/setup.sh (it makes the RapidOCR venv)")
    check = "import sys, rapidocr_onnxruntime; print(sys.version_info[:2] >= (3, 12))"
    r = subprocess.run([python, "-c", check], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{python} has no rapidocr_onnxruntime: run scripts/setup.sh\n{r.stderr[-800:]}")
    av_pin = "19.0.2" if r.stdout.strip() == "True" else "18.1.0"
    have = subprocess.run([python, "-c", "import av, pyarrow; print(av.__version__, pyarrow.__version__)"],
                          capture_output=True, text=True).stdout.split()
    if have != [av_pin, PYARROW_PIN]:
        log(f"peer: installing av=={av_pin} pyarrow=={PYARROW_PIN} for {python}")
        subprocess.run([python, "-m", "pip", "install", "-q", f"av=={av_pin}", f"pyarrow=={PYARROW_PIN}"],
                       check=True)
    return av_pin


def parse_compute(spec):
    """`k=v,k2=v2` or a JSON object -> dict (values: true/false, numbers, else strings)."""
    if not spec:
        return {}
    if spec.lstrip().startswith("{"):
        return json.loads(spec)
    out = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep:
            sys.exit(f"--ocr-compute: expected key=value, got {part!r}")
        v = v.strip()
        if v in ("true", "false"):
            val = v == "true"
        else:
            try:
                val = int(v)
            except ValueError:
                try:
                    val = float(v)
                except ValueError:
                    val = v.strip("'\"")
        out[k.strip()] = val
    return out


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    sys.exit(f"--ocr-compute: cannot write {v!r} as TOML")


def pipeline(manifest, threads, ocr_compute):
    ocr = {**{"use_cls": True, "text_score": 0.5, "grid_rows": GRID_ROWS, "grid_cols": GRID_COLS}, **ocr_compute}
    return f'''# Written by scripts/bench/e2e.py
name = "bench_e2e"

[source]
type = "local"
manifest = {json.dumps(manifest)}

[runtime]
# The decode/OCR pool (one OCR session set per thread); records between two stages (a few kB).
cpu_threads = {threads}
channel_capacity = 8
stall_secs = 600

[[stages]]
id = "probe"
type = "probe"

[[stages]]
id = "frames"
type = "frames"
max_in_flight = 2
compute = {{ mode = "uniform", count = {COUNT}, jpeg_quality = 90 }}

[[stages]]
id = "ocr_regions"
type = "ocr"
max_in_flight = 2             # the next video's frames start while the last of one finishes
timeout_secs = 3600
compute = {toml_value(ocr)}
'''


def cpu_model():
    """The CPU's model name and whether it has AVX-512 (the speed of ONNX Runtime's kernels, and
    so the ratio, depends on it)."""
    name, flags = "unknown CPU", ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    return f"{name} ({'AVX-512' if 'avx512f' in flags else 'no AVX-512'})"


def busy_cpu_secs():
    """CPU seconds all processes of the machine have used (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def wait_idle(max_wait, quiet_secs=10.0):
    """Waits (at most max_wait s) until the machine has been idle (< 0.1 core busy) for quiet_secs."""
    if max_wait <= 0 or busy_cpu_secs() is None:
        return
    t_end, quiet = time.monotonic() + max_wait, 0.0
    told = False
    while quiet < quiet_secs and time.monotonic() < t_end:
        b0 = busy_cpu_secs()
        time.sleep(1.0)
        quiet = quiet + 1.0 if busy_cpu_secs() - b0 < 0.1 else 0.0
        if quiet == 0.0 and not told:
            log("    waiting for other processes to leave the CPU idle ...")
            told = True
    if quiet < quiet_secs:
        log(f"    still busy after {max_wait:.0f} s: timing anyway")


def timed(cmd, log_path, ok=(0,)):
    """Wall seconds of `cmd`, its exit code, and the CPU seconds other processes used meanwhile
    (another build or test run on the machine makes the timing worthless)."""
    b0, r0 = busy_cpu_secs(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log_path, "w") as logf:
        r = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT)
    wall = time.perf_counter() - t0
    b1, r1 = busy_cpu_secs(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in ok:
        tail = open(log_path).read()[-2000:]
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{tail}")
    ours = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    foreign = None if b0 is None else max(0.0, (b1 - b0) - ours)
    return wall, r.returncode, ours, foreign


def read_table(path):
    return pads.dataset(path, format="parquet").to_table().to_pylist()


def score(regions, frames, truth):
    """eval_ocr_truth.py's rules for text, hue and centre, on any table with its columns."""
    n_text = ok_text = n_hue = ok_hue = n_center = ok_center = 0
    pairs = {}
    for t, f, cands in visible(regions, frames, truth):
        if t["moving"]:
            continue
        best = max(cands, key=lambda r: sim(r["text"], t["text"]), default=None)
        exact = best is not None and norm(best["text"]) == norm(t["text"])
        n_text += 1
        ok_text += exact
        hue_ok = None
        if exact and "center_x" in t:
            n_center += 1
            ok_center += (abs(best["center_x"] - t["center_x"]) <= 0.02
                          and abs(best["center_y"] - t["center_y"]) <= 0.02)
        if exact and t["saturation"] > 0.3:
            n_hue += 1
            if best["text_h"] is not None:
                d = abs(best["text_h"] - t["hue_deg"]) % 360
                hue_ok = min(d, 360 - d) <= 3.0
            else:
                hue_ok = False
            ok_hue += hue_ok
        pairs[(t["video_id"], t["overlay"], f["frame_index"])] = dict(
            text=t["text"], hue_deg=t["hue_deg"], read=best["text"] if best else None, exact=exact,
            hue=best["text_h"] if best and exact else None, hue_ok=hue_ok, regions=len(cands))
    return dict(pairs=n_text, text_recall=ok_text / max(1, n_text), hue_n=n_hue, hue_ok=ok_hue / max(1, n_hue),
                center_n=n_center, center_ok=ok_center / max(1, n_center), regions=len(regions)), pairs


def disagreements(ours, theirs, limit=8):
    """(overlay, frame) pairs one tool reads exactly, or gets the hue of, and the other does not,
    grouped by overlay."""
    kinds = (("read exactly by the peer only", lambda o, p: p["exact"] and not o["exact"], "read"),
             ("read exactly by vidcurate only", lambda o, p: o["exact"] and not p["exact"], "read"),
             ("hue within 3 deg for the peer only", lambda o, p: p["hue_ok"] and o["hue_ok"] is False, "hue"),
             ("hue within 3 deg for vidcurate only", lambda o, p: o["hue_ok"] and p["hue_ok"] is False, "hue"))
    show = {"read": lambda x: repr(x["read"]), "hue": lambda x: "-" if x["hue"] is None else f"{x['hue']:.1f}"}
    out = []
    for title, differs, field in kinds:
        groups = collections.defaultdict(list)
        for k in sorted(ours):
            if k in theirs and differs(ours[k], theirs[k]):
                groups[k[:2]].append(k)
        if not groups:
            continue
        out.append(f"{title}: {sum(map(len, groups.values()))} (overlay, frame) pairs of {len(groups)} overlays")
        for (vid, ov), keys in list(groups.items())[:limit]:
            o, p = ours[keys[0]], theirs[keys[0]]
            truth = repr(o["text"]) + (f" hue {o['hue_deg']:.1f}" if field == "hue" else "")
            out.append(f"  {vid} overlay {ov} {truth}, frames {','.join(str(k[2]) for k in keys)}; "
                       f"frame {keys[0][2]}: vidcurate {show[field](o)}, peer {show[field](p)}")
        if len(groups) > limit:
            out.append(f"  ... and {len(groups) - limit} more overlays")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--quick", action="store_true", help="8 clips (same seconds)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each side; the best wall time counts (the scores are the last run's)")
    ap.add_argument("--threads", type=int, default=2, help="vidcurate cpu_threads and the peer's intra_op_num_threads")
    ap.add_argument("--skip-peer", action="store_true", help="time vidcurate only")
    ap.add_argument("--ocr-compute", default="", help="extra keys for the ocr stage's compute table: "
                    "'key=value,...' or a JSON object (e.g. reuse=off)")
    ap.add_argument("--bin", default=BIN, help="the vidcurate binary (copied into the work folder first)")
    ap.add_argument("--peer-python", default=VENV_PY, help="interpreter for the peer (RapidOCR 1.4.4 installed)")
    ap.add_argument("--peer-threaded-decode", action="store_true",
                    help="the peer sets stream.thread_type = 'AUTO' (frame threads; PyAV's default is slice threads)")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECS",
                    help="before each timed run, wait up to SECS for other processes to leave the CPU idle")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout (the table goes to stderr)")
    a = ap.parse_args()
    clips = 8 if a.quick else a.clips
    ocr_compute = parse_compute(a.ocr_compute)
    if a.bin == BIN and not os.path.exists(BIN):
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)

    cdir = corpus(clips, a.seconds)
    manifest = os.path.join(cdir, "manifest.csv")
    truth = [json.loads(l) for l in open(os.path.join(cdir, "ground_truth.jsonl"))]
    av_version = None if a.skip_peer else peer_env(a.peer_python)

    work = os.path.join(ROOT, "data", "bench", "e2e-work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # A copy of the binary: a `cargo build` during the benchmark must not change it between runs.
    binary = os.path.join(work, "vidcurate")
    shutil.copy2(a.bin, binary)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    git = lambda *args: subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout
    built = dict(head=git("rev-parse", "--short", "HEAD").strip(),
                 src_changed=[l[3:] for l in git("status", "--porcelain", "--", "src", "Cargo.toml").splitlines()],
                 binary_mtime=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(a.bin))))
    pipe = os.path.join(work, "pipeline.toml")
    with open(pipe, "w") as f:
        f.write(pipeline(manifest, a.threads, ocr_compute))
    peer_py = os.path.join(work, "peer.py")
    with open(peer_py, "w") as f:
        f.write(PEER)

    runs = {"vidcurate": [], "peer": []}
    exit_codes = []

    def record(name, wall, cpu, foreign, spent=None, profile=None):
        runs[name].append(dict(wall=wall, cpu=cpu, foreign=foreign, spent=spent, profile=profile))
        other = "" if foreign is None else f", other processes {foreign:.1f} CPU s"
        log(f"    {wall:.2f} s wall, {cpu:.1f} CPU s{other}")
        if foreign is not None and foreign > 0.05 * wall:
            log(f"    WARNING: other processes used {foreign:.1f} CPU s during this run: the timing is not clean")

    def ours(i):
        run_dir = os.path.join(work, f"vidcurate-{i}")  # fresh every time: nothing to resume
        log(f"[{i + 1}/{a.repeat}] vidcurate run -> {os.path.relpath(run_dir, ROOT)} ...")
        wait_idle(a.wait_idle)
        wall, rc, cpu, foreign = timed([binary, "run", pipe, "--out", run_dir, "-q", "--profile"], run_dir + ".log",
                                       ok=(0, 3))
        exit_codes.append(rc)
        # `run --profile`'s table (stdout, after the summary): where the time went, per step.
        text = open(run_dir + ".log").read()
        record("vidcurate", wall, cpu, foreign, profile=text[text.find("profile ("):].strip() or None)

    def theirs(i):
        out = os.path.join(work, f"peer-{i}")
        log(f"[{i + 1}/{a.repeat}] peer (PyAV {av_version} + RapidOCR 1.4.4) -> {os.path.relpath(out, ROOT)} ...")
        wait_idle(a.wait_idle)
        wall, _, cpu, foreign = timed([a.peer_python, peer_py, manifest, out, str(COUNT), str(a.threads),
                                       "AUTO" if a.peer_threaded_decode else "default"], out + ".log")
        spent = [l for l in open(out + ".log") if l.startswith("spent ")]
        record("peer", wall, cpu, foreign, json.loads(spent[-1][6:]) if spent else None)

    # The tools take turns, and which goes first alternates, so that a machine warming up or
    # busy for a while weighs on both alike; the best of each is compared.
    for i in range(a.repeat):
        order = [ours, theirs] if i % 2 == 0 else [theirs, ours]
        for step in order:
            if step is theirs and a.skip_peer:
                continue
            step(i)

    last = a.repeat - 1
    run_dir = os.path.join(work, f"vidcurate-{last}")
    v_frames = read_table(os.path.join(run_dir, "frames"))
    v_score, v_pairs = score(read_table(os.path.join(run_dir, "ocr_regions")), v_frames, truth)
    rejects_dir = os.path.join(run_dir, "rejects")
    rejects = len(read_table(rejects_dir)) if os.path.isdir(rejects_dir) and os.listdir(rejects_dir) else 0
    sides = {"vidcurate": dict(frames=len(v_frames), rejects=rejects, exit_codes=exit_codes, **v_score)}
    if not a.skip_peer:
        out = os.path.join(work, f"peer-{last}")
        p_frames = read_table(os.path.join(out, "frames.parquet"))
        p_score, p_pairs = score(read_table(os.path.join(out, "regions.parquet")), p_frames, truth)
        sides["peer"] = dict(frames=len(p_frames), **p_score)
    for name, s in sides.items():
        best = min(runs[name], key=lambda r: r["wall"])
        s.update(wall_s=best["wall"], cpu_s=best["cpu"], other_cpu_s=best["foreign"], spent_s=best["spent"],
                 profile=best["profile"],
                 walls_s=[round(r["wall"], 3) for r in runs[name]], frames_per_s=s["frames"] / best["wall"])

    # The shared scorer, as the test suite runs it, must agree with ours on vidcurate's run.
    ev = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "eval_ocr_truth.py"), run_dir,
                         os.path.join(cdir, "ground_truth.jsonl")], capture_output=True, text=True)
    check = json.loads(ev.stdout) if ev.returncode == 0 else {}
    agrees = (abs(check.get("text_exact", -1) - v_score["text_recall"]) < 1e-9
              and abs(check.get("hue_ok", -1) - v_score["hue_ok"]) < 1e-9)

    res = dict(cpu_model=cpu_model(), clips=clips, seconds=a.seconds, videos=len({f["video_id"] for f in v_frames}), threads=a.threads,
               repeat=a.repeat, ocr_compute=ocr_compute, vidcurate_version=version, build=built, av=av_version,
               peer_thread_type="AUTO" if a.peer_threaded_decode else "default",
               cores=os.cpu_count(), vidcurate=sides["vidcurate"], peer=sides.get("peer"),
               ratio=(sides["peer"]["wall_s"] / sides["vidcurate"]["wall_s"]) if "peer" in sides else None,
               eval_ocr_truth_agrees=agrees)
    show = log if a.json else print
    show("")
    show(f"machine: {res['cpu_model']}, {res['cores']} cores")
    show(f"corpus: {res['videos']} videos ({os.path.relpath(cdir, ROOT)}), {COUNT} frames each; {version}; "
         f"threads {a.threads}; best of {a.repeat}; ocr compute extra: {ocr_compute or 'none'}")
    if built["src_changed"]:
        show(f"binary built {built['binary_mtime']}; HEAD {built['head']} with uncommitted changes in: "
             + ", ".join(built["src_changed"]))
    show("| tool | wall (s) | frames/s | CPU (s) | text recall | hue ok | centre ok | regions |")
    show("|---|---:|---:|---:|---:|---:|---:|---:|")
    labels = {"vidcurate": "vidcurate", "peer": f"PyAV {av_version} + RapidOCR 1.4.4"
              + (" (frame-threaded decode)" if a.peer_threaded_decode else "")}
    for name, s in sides.items():
        show(f"| {labels[name]} | {s['wall_s']:.2f} | {s['frames_per_s']:.2f} | {s['cpu_s']:.1f} | "
             f"{100 * s['text_recall']:.1f} % of {s['pairs']} | {100 * s['hue_ok']:.1f} % of {s['hue_n']} | "
             f"{100 * s['center_ok']:.1f} % of {s['center_n']} | {s['regions']} |")
    if res["ratio"] is not None:
        show(f"ratio peer/vidcurate wall time: **{res['ratio']:.2f}x** (> 1: vidcurate faster)")
        sp = sides["peer"]["spent_s"]
        if sp:
            rest = sides["peer"]["wall_s"] - sum(sp.values())
            show("peer's time: " + ", ".join(f"{k} {v:.1f} s" for k, v in sp.items())
                 + f", start-up and models {rest:.1f} s")
    if sides["vidcurate"].get("profile"):
        show("vidcurate's time, its best run (`run --profile`):")
        show(sides["vidcurate"]["profile"])
    dirty = [n for n, s in sides.items() if (s["other_cpu_s"] or 0) > 0.05 * s["wall_s"]]
    if dirty:
        show(f"WARNING: other processes used CPU during the best run of {', '.join(dirty)}: rerun on an idle machine")
    if rejects or any(c != 0 for c in exit_codes):
        show(f"vidcurate: exit codes {exit_codes}, {rejects} rejected (see {os.path.relpath(run_dir, ROOT)}/rejects)")
    if not agrees:
        show(f"WARNING: scripts/eval_ocr_truth.py scores vidcurate's run differently: {check or ev.stderr[-500:]}")
    if "peer" in sides:
        for line in disagreements(v_pairs, p_pairs):
            show(line)
    show(f"run directories: {os.path.relpath(work, ROOT)}/")
    if a.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
