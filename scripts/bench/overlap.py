"""Benchmark: `vidcurate overlap A --against B` on large releases, against the Python a data
engineer would write for the same check, in the same run.

Two releases of N videos each (16 frames of 96 x 64 px per video, JPEG, `--frames paths`
layout: data/train-00000-of-00001.parquet with `video_id` and `frames`, the files under
frames/<id>/) are generated into --work, once per size. Every video's frames are a window drifting over
its own random picture (a grid of random colours, smoothly scaled), so no two videos look
alike. B holds the planted
copies of A's first --planted videos, a third each:
  - re-encoded at 144 x 96 px and JPEG quality 60 (same id),
  - cropped 8 % on every side and scaled back (same id),
  - the same frames under a new id.
and N - planted videos of its own.

  vidcurate  `vidcurate overlap A --against B --no-leakage --out pairs.csv` (perceptual hashes
             of every frame and of its centre 90 % and 80 %, multi-index hashing; ids; no
             questions in these releases).
  peer       one Python process: Pillow decodes every frame, imagehash's pHash definition (32 x
             32 grey thumbnail, scipy's DCT-II, the 8 x 8 lowest coefficients against their
             median) of the frame and the same two centre crops, then numpy compares every
             frame hash of A with every one of B (XOR and popcount, in blocks) and counts, per
             pair of videos, the frames of A with a frame of B within 10 bits; a pair is shared
             when half of A's frames (at least 2) match, as vidcurate's defaults say. Plus ids.
Both are timed as whole processes (wall seconds, peak RSS), best of --repeat, alternating. The
found pairs are compared with the planted ones: each tool must find every planted pair and
nothing else. The hashes differ by definition (vidcurate leaves out the DC term), so the
comparison is of the pairs found, not of the bits.

usage: data/venv-readers/bin/python scripts/bench/overlap.py [--videos 200,1000,3000]
           [--repeat 2] [--work DIR] [--bin target/release/vidcurate] [--json]
"""

import argparse
import csv
import io
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FRAMES = 16
W, H = 96, 64


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def picture(rng):
    """A random picture twice a frame's size: a grid of random colours (about a pHash cell
    each), smoothly scaled up. Two videos' hashes then differ in about half their bits."""
    import numpy as np
    from PIL import Image

    cells = np.array([[[rng.randrange(256) for _ in range(3)] for _ in range(24)] for _ in range(16)],
                     np.uint8)
    return np.asarray(Image.fromarray(cells).resize((W * 2, H * 2), Image.BICUBIC))


def frames_of(big, t):
    """Frame t: a window drifting over the video's picture."""
    from PIL import Image

    x = int(t * W / FRAMES)
    return Image.fromarray(big[H // 2: H // 2 + H, x: x + W])


def write_release(root, videos):
    """videos: list of (id, [PIL images], jpeg quality)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, frames = [], []
    for vid, imgs, q in videos:
        d = root / "frames" / vid
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for k, im in enumerate(imgs):
            rel = f"frames/{vid}/{k:05d}.jpg"
            im.save(root / rel, "JPEG", quality=q)
            paths.append(rel)
        ids.append(vid)
        frames.append(paths)
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"video_id": ids, "split": ["train"] * len(ids), "frames": frames}),
                   root / "data" / "train-00000-of-00001.parquet")


def make(work, n, planted):
    """Releases A and B of n videos each; returns the planted (a, b) id pairs."""
    from PIL import Image

    base = work / f"n{n}"
    truth_file = base / "planted.json"
    if truth_file.exists():
        return base, [tuple(p) for p in json.loads(truth_file.read_text())]
    rng = random.Random(n)
    a_videos, b_videos, truth = [], [], []
    for i in range(n):
        big = picture(rng)
        imgs = [frames_of(big, t) for t in range(FRAMES)]
        vid = f"a{i:06d}"
        a_videos.append((vid, imgs, 90))
        if i < planted:
            kind = i % 3
            if kind == 0:
                copy = [im.resize((144, 96), Image.BILINEAR) for im in imgs]
                b_videos.append((vid, copy, 60))
                truth.append((vid, vid))
            elif kind == 1:
                dx, dy = round(W * 0.08), round(H * 0.08)
                copy = [im.crop((dx, dy, W - dx, H - dy)).resize((W, H), Image.BILINEAR) for im in imgs]
                b_videos.append((vid, copy, 90))
                truth.append((vid, vid))
            else:
                b_videos.append((f"b{i:06d}", imgs, 90))
                truth.append((vid, f"b{i:06d}"))
    for i in range(n - planted):
        big = picture(rng)
        b_videos.append((f"c{i:06d}", [frames_of(big, t) for t in range(FRAMES)], 90))
    write_release(base / "A", a_videos)
    write_release(base / "B", b_videos)
    truth_file.write_text(json.dumps(truth))
    return base, truth


PEER = r'''
import sys, io, csv
import numpy as np
import pyarrow.parquet as pq
from PIL import Image
from scipy.fftpack import dct

def phash(img):
    # imagehash.phash(hash_size=8, highfreq_factor=4)
    px = np.asarray(img.convert("L").resize((32, 32), Image.LANCZOS), dtype=np.float64)
    d = dct(dct(px, axis=0), axis=1)[:8, :8]
    bits = (d > np.median(d)).flatten()
    return int(np.packbits(bits).view(">u8")[0])

def hashes(root):
    t = pq.read_table(f"{root}/data/train-00000-of-00001.parquet").to_pylist()
    vids, frame_of, hs = [], [], []
    for v, row in enumerate(t):
        vids.append(row["video_id"])
        for k, f in enumerate(row["frames"]):
            im = Image.open(f"{root}/{f}")
            w, h = im.size
            views = [im] + [im.crop(((w - round(w*s)) // 2, (h - round(h*s)) // 2,
                                     (w - round(w*s)) // 2 + round(w*s), (h - round(h*s)) // 2 + round(h*s)))
                            for s in (0.9, 0.8)]
            for view in views:
                hs.append(phash(view)); frame_of.append((v, k))
    return vids, np.array(frame_of, dtype=np.int64), np.array(hs, dtype=np.uint64)

a, b = sys.argv[1], sys.argv[2]
va, fa, ha = hashes(a)
vb, fb, hb = hashes(b)
# Per frame of A (its whole picture only), the videos of B with a view within 10 bits.
whole = np.arange(len(ha)) % 3 == 0
matched = {}
for s in range(0, len(ha), 512):
    idx = np.arange(s, min(s + 512, len(ha)))
    idx = idx[whole[idx]]
    x = ha[idx][:, None] ^ hb[None, :]
    close = np.bitwise_count(x) <= 10
    for r, cols in zip(idx, close):
        va_i, frame = fa[r]
        for vb_i in set(fb[np.nonzero(cols)[0], 0].tolist()):
            matched.setdefault((int(va_i), vb_i), set()).add(int(frame))
frames_a = np.bincount(fa[whole, 0], minlength=len(va))
pairs = set()
for (i, j), fr in matched.items():
    if len(fr) >= max(2, 0.5 * frames_a[i]):
        pairs.add((va[i], vb[j]))
pairs |= {(v, v) for v in set(va) & set(vb)}
w = csv.writer(sys.stdout)
for p in sorted(pairs):
    w.writerow(p)
'''


def timed(cmd, out_file=None):
    """Wall seconds and peak RSS (MiB) of a process, via /usr/bin/time."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        sys.exit(f"{cmd[0]}: exit {r.returncode}\n{r.stderr[-2000:]}")
    rss = int(r.stderr.strip().splitlines()[-1]) / 1024
    if out_file:
        Path(out_file).write_text(r.stdout)
    return wall, rss, r.stdout


def vidcurate_pairs(csv_path):
    pairs = set()
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            if row["kind"] in ("frames", "id"):
                pairs.add((row["ours_video"], row["theirs_video"]))
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--videos", default="200,1000,3000", help="sizes: videos in each release")
    ap.add_argument("--planted", type=int, default=30, help="copies of A's videos planted in B")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", type=Path, default=REPO / "data/bench/overlap")
    ap.add_argument("--bin", type=Path, default=REPO / "target/release/vidcurate")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    (a.work / "peer.py").write_text(PEER)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores", file=sys.stderr)
    results = []
    for n in [int(x) for x in a.videos.split(",")]:
        base, truth = make(a.work, n, min(a.planted, n))
        truth = set(truth)
        best = {"vidcurate": None, "peer": None}
        found = {}
        for r in range(a.repeat):
            order = ["vidcurate", "peer"] if r % 2 == 0 else ["peer", "vidcurate"]
            for tool in order:
                if tool == "vidcurate":
                    out = base / "vidcurate.csv"
                    wall, rss, _ = timed([str(a.bin), "overlap", str(base / "A"), "--against",
                                          str(base / "B"), "--no-leakage", "--out", str(out)])
                    found[tool] = vidcurate_pairs(out)
                else:
                    wall, rss, text = timed([sys.executable, str(a.work / "peer.py"),
                                             str(base / "A"), str(base / "B")])
                    found[tool] = {tuple(row) for row in csv.reader(io.StringIO(text)) if row}
                if best[tool] is None or wall < best[tool][0]:
                    best[tool] = (wall, rss)
        row = {"videos": n, "frames": 2 * n * FRAMES, "planted": len(truth)}
        for tool in best:
            row[tool] = {"seconds": round(best[tool][0], 2), "rss_mib": round(best[tool][1]),
                         "planted_found": len(found[tool] & truth),
                         "extra": len(found[tool] - truth)}
        row["ratio"] = round(best["peer"][0] / best["vidcurate"][0], 2)
        results.append(row)
        v, p = row["vidcurate"], row["peer"]
        print(f"{n} videos a side ({row['frames']} frames): vidcurate {v['seconds']} s, {v['rss_mib']} MiB, "
              f"{v['planted_found']}/{len(truth)} planted, {v['extra']} extra; peer {p['seconds']} s, "
              f"{p['rss_mib']} MiB, {p['planted_found']}/{len(truth)} planted, {p['extra']} extra; "
              f"ratio peer / vidcurate {row['ratio']}x", file=sys.stderr)
    print("| videos a side | vidcurate | peer (Pillow + scipy DCT + numpy) | ratio | planted found (ours / peer) | extra pairs |",
          file=sys.stderr)
    print("|---:|---:|---:|---:|---:|---:|", file=sys.stderr)
    for row in results:
        v, p = row["vidcurate"], row["peer"]
        print(f"| {row['videos']:,} | {v['seconds']} s, {v['rss_mib']} MiB | {p['seconds']} s, {p['rss_mib']} MiB | "
              f"{row['ratio']}x | {v['planted_found']} / {p['planted_found']} of {row['planted']} | "
              f"{v['extra']} / {p['extra']} |", file=sys.stderr)
    if a.json:
        print(json.dumps({"machine": cpu_model(), "results": results}))


if __name__ == "__main__":
    main()
