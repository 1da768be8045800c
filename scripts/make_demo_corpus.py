#!/usr/bin/env python3
"""Makes the demo corpus: synthetic news-style clips whose on-screen text is known exactly.

Each clip is an ffmpeg lavfi background plus drawtext overlays. Every overlay's text, colour
(hex and HSV), position, font size, timing and whether it moves is written to ground_truth.jsonl,
and each clip's label to manifest.csv, so later stages (OCR, colour, layout, analysis) can be
checked against what was drawn. The habits follow MVFNDB as summarised in SPEC §8:
  fake: red text (hue 0-5 deg), scattered positions, short lines (aspect < 15), very large or very small;
  real: orange text (hue 25-30 deg), captions in a lower band, long lines (aspect > 15), moderate size.
Scene text (a drifting sign) moves across the frame in both; editor overlays stay put.
Deterministic: the same seed gives the same corpus. Idempotent: an up-to-date corpus is left alone.

Usage: make_demo_corpus.py OUT_DIR [--clips N] [--seconds S] [--seed K]
"""
import argparse
import colorsys
import csv
import json
import os
import random
import shutil
import subprocess
import sys

VERSION = 4
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
W, H, FPS = 640, 360, 25

FAKE_LINES = ["SHOCKING", "BREAKING", "MUST SEE", "THEY LIED", "SHARE NOW", "TRUTH", "EXPOSED", "WAKE UP",
              "HIDDEN", "NO MEDIA", "BANNED", "ALERT"]
REAL_LINES = ["Officials confirm the bridge will reopen on Monday after repairs",
              "Firefighters contain the warehouse blaze near the harbour district",
              "City council approves the new budget for public transport services",
              "Rescue teams continue searching the area after heavy rainfall overnight",
              "The ministry publishes updated figures on regional hospital capacity",
              "Police ask drivers to avoid the northern ring road until further notice"]
SCENE_LINES = ["BUS STOP", "EXIT", "PHARMACY", "HOTEL", "PARKING"]
BACKGROUNDS = ["testsrc2=s={w}x{h}:r={fps}", "smptebars=s={w}x{h}:r={fps}",
               "gradients=s={w}x{h}:r={fps}:speed=0.03:c0=0x203040:c1=0x506070:seed={seed}",
               "mandelbrot=s={w}x{h}:r={fps}", "cellauto=s={w}x{h}:r={fps}:rule=110:seed={seed}"]


def hsv_hex(h_deg, s, v):
    r, g, b = colorsys.hsv_to_rgb(h_deg / 360.0, s, v)
    return "0x%02X%02X%02X" % (round(r * 255), round(g * 255), round(b * 255))


def overlays_for(label, rng, seconds):
    out = []
    if label == "fake":
        for _ in range(rng.randint(2, 3)):
            text = rng.choice(FAKE_LINES)
            size = rng.choice([14, 16, 44, 52, 60])
            hue, sat, val = rng.uniform(0.5, 4.5), rng.uniform(0.8, 1.0), rng.uniform(0.85, 1.0)
            est_w = int(len(text) * size * 0.72)
            x = rng.randint(4, max(5, W - est_w - 4))
            y = rng.randint(4, H - size - 4)
            start = round(rng.uniform(0, seconds * 0.3), 2)
            out.append(dict(text=text, size=size, hue=hue, sat=sat, val=val, x=x, y=y, start=start,
                            end=seconds, moving=False, creator_added=True, box=False))
    else:
        text = rng.choice(REAL_LINES)
        size = rng.choice([18, 20])
        hue, sat, val = rng.uniform(25.5, 29.5), rng.uniform(0.75, 0.95), rng.uniform(0.9, 1.0)
        y = rng.randint(int(H * 0.80), int(H * 0.86))
        out.append(dict(text=text, size=size, hue=hue, sat=sat, val=val, x=12, y=y, start=0.0,
                        end=seconds, moving=False, creator_added=True, box=True))
        # A channel mark: small, static, top corner, same orange family.
        out.append(dict(text="CITY NEWS 24", size=16, hue=rng.uniform(25.5, 29.5), sat=0.9, val=0.95,
                        x=W - 150, y=12, start=0.0, end=seconds, moving=False, creator_added=True,
                        box=True))
    if rng.random() < 0.6:
        text = rng.choice(SCENE_LINES)
        out.append(dict(text=text, size=26, hue=0.0, sat=0.0, val=0.92, x=-1,
                        y=rng.randint(60, 200), start=0.0, end=seconds, moving=True,
                        creator_added=False, box=False, speed=rng.choice([30, 45, 60])))
    return out


def filtergraph(bg, ovs, tmp, name):
    parts = [f"{bg},format=yuv420p"]
    for i, o in enumerate(ovs):
        tf = os.path.join(tmp, f"{name}_{i}.txt")
        with open(tf, "w") as f:
            f.write(o["text"])
        color = hsv_hex(o["hue"], o["sat"], o["val"])
        x = f"mod({o['speed']}*t\\,{W})" if o["moving"] else str(o["x"])
        box = ":box=1:boxcolor=0x101010@0.85:boxborderw=6" if o["box"] else ""
        parts.append(
            f"drawtext=fontfile={FONT}:textfile={tf}:fontsize={o['size']}:fontcolor={color}"
            f":x={x}:y={o['y']}{box}:enable='between(t\\,{o['start']}\\,{o['end']})'"
        )
    return ",".join(parts)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("ffmpeg failed: " + " ".join(cmd) + "\n" + r.stderr[-2000:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--clips", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    stamp = os.path.join(a.out, ".corpus-stamp")
    want = json.dumps({"version": VERSION, "clips": a.clips, "seconds": a.seconds, "seed": a.seed})
    if os.path.exists(stamp) and open(stamp).read() == want:
        print(f"demo corpus: up to date in {a.out}")
        return
    if shutil.which("ffmpeg") is None:
        sys.exit("ffmpeg CLI not found: run scripts/setup.sh")
    rng = random.Random(a.seed)
    vdir = os.path.join(a.out, "videos")
    tmp = os.path.join(a.out, ".tmp")
    os.makedirs(vdir, exist_ok=True)
    os.makedirs(tmp, exist_ok=True)
    rows, truth = [], []
    for n in range(a.clips):
        label = "fake" if n % 2 == 0 else "real"
        vid = f"demo{n:03d}"
        ovs = overlays_for(label, rng, a.seconds)
        bg = BACKGROUNDS[n % len(BACKGROUNDS)].format(w=W, h=H, fps=FPS, seed=n + 1)
        path = os.path.join(vdir, f"{vid}.mp4")
        graph = filtergraph(bg, ovs, tmp, vid)
        # B-frames and a 2 s GOP, like real uploads, so seeking is exercised.
        run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", graph,
             "-f", "lavfi", "-i", f"sine=frequency={300 + 40 * n}:sample_rate=44100",
             "-t", str(a.seconds), "-c:v", "libx264", "-preset", "veryfast", "-crf", "20",
             "-g", str(2 * FPS), "-bf", "2", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", path])
        rows.append(dict(path=f"videos/{vid}.mp4", id=vid, label=label, domain="demo-news", language="en"))
        for i, o in enumerate(ovs):
            truth.append(dict(video_id=vid, overlay=i, label=label, text=o["text"],
                              color_hex=hsv_hex(o["hue"], o["sat"], o["val"]), hue_deg=round(o["hue"], 3),
                              saturation=round(o["sat"], 4), value=round(o["val"], 4), x=o["x"], y=o["y"],
                              font_size=o["size"], start_secs=o["start"], end_secs=o["end"],
                              moving=o["moving"], creator_added=o["creator_added"], boxed=o["box"],
                              frame_width=W, frame_height=H))
    # A phone clip: coded landscape, rotation metadata says portrait.
    # (FFmpeg 5.1 writes the display matrix from the `rotate` tag only when stream-copying.)
    rot = os.path.join(vdir, "demo_rotated.mp4")
    plain = os.path.join(tmp, "unrotated.mp4")
    run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         f"testsrc2=s={W}x{H}:r={FPS}:d={a.seconds}", "-c:v", "libx264", "-preset", "veryfast", plain])
    run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", plain, "-c", "copy",
         "-metadata:s:v:0", "rotate=90", rot])
    rows.append(dict(path="videos/demo_rotated.mp4", id="demo_rotated", label="real", domain="demo-phone",
                     language="en"))
    # A broken upload: the first 20 kB of a clip. The run must reject it and carry on.
    broken = os.path.join(vdir, "demo_broken.mp4")
    with open(os.path.join(vdir, "demo000.mp4"), "rb") as src, open(broken, "wb") as dst:
        dst.write(src.read(20000))
    rows.append(dict(path="videos/demo_broken.mp4", id="demo_broken", label="fake", domain="demo-news",
                     language="en"))
    with open(os.path.join(a.out, "manifest.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "id", "label", "domain", "language"])
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(a.out, "ground_truth.jsonl"), "w") as f:
        for t in truth:
            f.write(json.dumps(t) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    with open(stamp, "w") as f:
        f.write(want)
    print(f"demo corpus: {len(rows)} videos, {len(truth)} overlays in {a.out}")


if __name__ == "__main__":
    main()
