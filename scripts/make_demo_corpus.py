#!/usr/bin/env python3
"""Makes synthetic news-style clips whose on-screen text is known exactly.

Each clip is an ffmpeg lavfi background (no text of its own) plus drawtext overlays. Every
overlay's text, colour (hex and HSV), ink box (measured with the same font through Pillow),
font size, style, timing and whether it moves is written to ground_truth.jsonl, and each clip's
label to manifest.csv, so the OCR, colour, layout and analysis stages can be checked against
what was drawn.

Profiles:
  demo       the habits SPEC §8 reports (MVFNDB): fake = red text (hue 0-5 deg), scattered
             positions, short lines (aspect < 15), very large or very small; real = orange text
             (hue 25-30 deg) in a lower band, long captions (aspect > 15) on a box, moderate size.
  ocr-truth  a variety for the OCR tests: red, orange, white and yellow text, plain, outlined,
             shadowed and on a semi-opaque box, over busy backgrounds, 720p and 1080p.
  reuse      for OCR reuse across frames (issue 12): static backgrounds (bars, flat colours), a
             channel tag that stays, a caption that changes its text halfway at the same place
             and size, and on every other clip a line drifting across (so some frames change
             only in a band).
  outline    outlined text for the colour rule (issue 48): four lines a clip in ten ink colours,
             each outlined in black, white or a contrasting colour, 1 to 4 px, over busy
             backgrounds, 720p; the ground truth names the ink's colour.
  soak       many small clips for the runtime's soak test: 320x180, --seconds is the longest
             (each clip 1 s to that), every other clip with one line of text, demo titles,
             and every 40th file cut short (the run must reject it and carry on).
Both add scene text (a sign drifting across the frame) to some clips; editor overlays stay put.
Deterministic (seeded) and idempotent (an up-to-date corpus is left alone).

Usage: make_demo_corpus.py OUT_DIR [--profile demo|ocr-truth|reuse|outline|soak] [--clips N] [--seconds S] [--seed K]
"""
import argparse
import colorsys
import concurrent.futures
import csv
import json
import os
import random
import shutil
import subprocess
import sys

from PIL import ImageFont

VERSION = 11

# Titles and descriptions for the demo's relevance stage (event: a protest turning violent):
# every third clip reads like studio talk or a lecture, the rest like raw street footage.
TITLES_RAW = [
    ("Police fire tear gas at protesters near the square", "Raw phone footage from inside the crowd"),
    ("Protesters and riot police clash at the barricade", "Shaky handheld video filmed by a bystander"),
    ("Crowd runs as police charge the demonstration", "Unedited clip from the street corner"),
    ("Stones thrown at police line during night protest", "Filmed from a balcony above the street"),
    ("Water cannon turned on protesters blocking the road", "Bystander video, no edits"),
    ("Demonstrators push through police cordon", "CCTV camera footage of the confrontation"),
]
TITLES_TALK = [
    ("Why protests turn violent: a sociology lecture", "Slides from my university course on collective action"),
    ("Studio panel discusses the weekend's demonstrations", "Our guests debate the government's response"),
    ("How to stay safe at a march: tutorial", "Step by step guide with animated slides"),
]
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
FPS = 25

FAKE_LINES = ["SHOCKING", "BREAKING", "MUST SEE", "THEY LIED", "SHARE NOW", "TRUTH", "EXPOSED",
              "WAKE UP", "HIDDEN", "NO MEDIA", "BANNED", "ALERT"]
REAL_LINES = ["Officials confirm the bridge reopens Monday", "Firefighters contain the warehouse blaze",
              "Council approves the new transport budget", "Rescue teams continue the search overnight",
              "Ministry publishes hospital capacity figures", "Police close the northern ring road"]
SCENE_LINES = ["BUS STOP", "EXIT", "PHARMACY", "HOTEL", "PARKING"]
TRUTH_LINES = ["BREAKING NEWS", "LIVE REPORT", "Weather warning issued", "Election results tonight",
               "Traffic update", "MARKET WATCH", "Storm hits the coast", "EXCLUSIVE", "Breaking update",
               "City council meeting", "Train strike ends", "LOCAL NEWS"]
# Backgrounds without text of their own (testsrc/testsrc2 draw a clock and numbers).
BACKGROUNDS = ["smptebars=s={w}x{h}:r={fps}",
               "gradients=s={w}x{h}:r={fps}:speed=0.03:c0=0x203040:c1=0x506070:seed={seed}",
               "mandelbrot=s={w}x{h}:r={fps}",
               "cellauto=s={w}x{h}:r={fps}:rule=110:seed={seed}",
               "life=s={w}x{h}:r={fps}:mold=10:ratio=0.2:seed={seed}:life_color=#406080:death_color=#101418"]
COLOURS = {"red": (2.0, 0.9, 0.95), "orange": (28.0, 0.9, 0.97), "white": (0.0, 0.0, 0.97),
           "yellow": (55.0, 0.9, 0.97)}


# Ink colours whose hue sits inside its name's range (src/stages/ocr/colour.rs `colour_name`).
INKS = [("red", (2.0, 0.9, 0.95)), ("orange", (28.0, 0.9, 0.97)), ("yellow", (55.0, 0.9, 0.97)),
        ("green", (120.0, 0.8, 0.8)), ("cyan", (185.0, 0.85, 0.9)), ("blue", (225.0, 0.85, 0.95)),
        ("purple", (280.0, 0.65, 0.85)), ("pink", (325.0, 0.55, 0.95)), ("white", (0.0, 0.0, 0.97)),
        ("black", (0.0, 0.0, 0.06))]


def hsv_hex(h_deg, s, v):
    r, g, b = colorsys.hsv_to_rgb(h_deg / 360.0, s, v)
    return "0x%02X%02X%02X" % (round(r * 255), round(g * 255), round(b * 255))


def ink(text, size):
    """Ink box of `text` drawn by drawtext at (0, 0): drawtext puts the tallest glyph's top at y."""
    left, top, right, bottom = ImageFont.truetype(FONT, size).getbbox(text, anchor="ls")
    return left, right, bottom - top


def place(rng, taken, text, size, w, h, xr=None, yr=None, tries=200):
    """A position for `text` whose ink box overlaps no box in `taken` (with a margin)."""
    left, right, th = ink(text, size)
    tw = right - left
    for _ in range(tries):
        x = rng.randint(*(xr or (8, max(9, w - tw - 8))))
        y = rng.randint(*(yr or (8, max(9, h - th - 8))))
        box = (x + left, y, x + right, y + th)
        if box[2] > w - 4 or box[3] > h - 4:
            continue
        if all(box[2] + 24 < b[0] or b[2] + 24 < box[0] or box[3] + 24 < b[1] or b[3] + 24 < box[1] for b in taken):
            taken.append(box)
            return x, y, box
    return None


def free_row(rng, taken, size, lo, hi):
    """A y for text drifting across the whole width that crosses no overlay's rows."""
    for _ in range(500):
        y = rng.randint(lo, hi)
        if all(y + size * 1.2 + 16 < b[1] or b[3] + 16 < y for b in taken):
            return y
    return lo


def overlay(text, size, colour, x, y, box, start, end, creator_added, style="plain", moving=False, speed=0):
    h, s, v = colour
    return dict(text=text, size=size, hue=h, sat=s, val=v, x=x, y=y, box=box, start=start, end=end,
                creator_added=creator_added, style=style, moving=moving, speed=speed)


def demo_overlays(label, rng, w, h, secs):
    taken, out = [], []
    if label == "fake":
        for _ in range(rng.randint(2, 3)):
            text, size = rng.choice(FAKE_LINES), rng.choice([28, 32, 88, 104])
            p = place(rng, taken, text, size, w, h)
            if p:
                col = (rng.uniform(0.5, 4.5), rng.uniform(0.85, 1.0), rng.uniform(0.9, 1.0))
                out.append(overlay(text, size, col, p[0], p[1], p[2], round(rng.uniform(0, secs * 0.3), 2), secs, True))
    else:
        text, size = rng.choice(REAL_LINES), rng.choice([36, 40])
        p = place(rng, taken, text, size, w, h, xr=(24, 40), yr=(int(h * 0.80), int(h * 0.86)))
        col = (rng.uniform(25.5, 29.5), rng.uniform(0.8, 0.95), rng.uniform(0.92, 1.0))
        out.append(overlay(text, size, col, p[0], p[1], p[2], 0.0, secs, True, style="box"))
        # A channel mark on some clips: small, static, top corner, same orange family.
        if rng.random() < 0.3:
            p = place(rng, taken, "CITY NEWS 24", 30, w, h, xr=(w - 300, w - 280), yr=(20, 30))
            col = (rng.uniform(25.5, 29.5), 0.9, 0.97)
            out.append(overlay("CITY NEWS 24", 30, col, p[0], p[1], p[2], 0.0, secs, True, style="box"))
    if rng.random() < 0.6:
        text = rng.choice(SCENE_LINES)
        y = free_row(rng, taken, 52, 120, 380)
        out.append(overlay(text, 52, (0.0, 0.0, 0.92), -1, y, None, 0.0, secs, False, moving=True,
                           speed=rng.choice([90, 120, 150])))
    return out


def truth_overlays(rng, w, h, secs, n):
    taken, out = [], []
    for i in range(3):
        text = TRUTH_LINES[(n * 3 + i) % len(TRUTH_LINES)]
        colour = list(COLOURS)[(n + i) % len(COLOURS)]
        style = ["plain", "outline", "shadow", "box"][(n + 2 * i) % 4]
        size = rng.choice([int(h * 0.05), int(h * 0.07), int(h * 0.09)])
        p = place(rng, taken, text, size, w, h)
        if p:
            out.append(overlay(text, size, COLOURS[colour], p[0], p[1], p[2], 0.0, secs, True, style=style))
    text = SCENE_LINES[n % len(SCENE_LINES)]
    y = free_row(rng, taken, int(h * 0.07), int(h * 0.1), int(h * 0.8))
    out.append(overlay(text, int(h * 0.07), (0.0, 0.0, 0.92), -1, y, None,
                       0.0, secs, False, moving=True, speed=int(w * 0.12)))
    return out


def filtergraph(bg, ovs, tmp, name, w):
    parts = [f"{bg},format=yuv420p"]
    for i, o in enumerate(ovs):
        tf = os.path.join(tmp, f"{name}_{i}.txt")
        with open(tf, "w") as f:
            f.write(o["text"])
        color = hsv_hex(o["hue"], o["sat"], o["val"])
        x = f"mod({o['speed']}*t\\,{w})" if o["moving"] else str(o["x"])
        style = {"plain": "", "outline": ":borderw={1}:bordercolor={0}".format(*o.get("outline", ("black", 3))),
                 "shadow": ":shadowx=4:shadowy=4:shadowcolor=black@0.8",
                 "box": ":box=1:boxcolor=0x101010@0.7:boxborderw=10"}[o["style"]]
        parts.append(f"drawtext=fontfile={FONT}:textfile={tf}:fontsize={o['size']}:fontcolor={color}"
                     f":x={x}:y={o['y']}{style}:enable='between(t\\,{o['start']}\\,{o['end']})'")
    return ",".join(parts)


# Backgrounds that do not change from frame to frame.
STATIC_BACKGROUNDS = ["smptebars=s={w}x{h}:r={fps}", "color=c=0x284878:s={w}x{h}:r={fps}",
                      "color=c=0xD8D0C0:s={w}x{h}:r={fps}"]


def reuse_overlays(rng, w, h, secs, n):
    taken, out = [], []
    colour = COLOURS[list(COLOURS)[n % len(COLOURS)]]
    p = place(rng, taken, "CITY NEWS 24", 34, w, h, xr=(w - 330, w - 300), yr=(20, 30))
    out.append(overlay("CITY NEWS 24", 34, colour, p[0], p[1], p[2], 0.0, secs, True, style="box"))
    # Two captions of the same length, one after the other at the same place and size: the
    # second must be read, not taken for the first.
    first, second = [("Storm hits the coast", "Train strike is over"),
                     ("Election results tonight", "Market opens higher"),
                     ("BREAKING NEWS", "LIVE COVERAGE")][n % 3]
    half = round(secs / 2, 2)
    p = place(rng, taken, first, 44, w, h, xr=(40, 60), yr=(int(h * 0.78), int(h * 0.82)))
    style = ["box", "outline"][n % 2]
    out.append(overlay(first, 44, COLOURS["white"], p[0], p[1], p[2], 0.0, half, True, style=style))
    out.append(overlay(second, 44, COLOURS["white"], p[0], p[1], p[2], half, secs, True, style=style))
    if n % 2:
        y = free_row(rng, taken, 48, int(h * 0.2), int(h * 0.6))
        out.append(overlay(SCENE_LINES[n % len(SCENE_LINES)], 48, (0.0, 0.0, 0.92), -1, y, None, 0.0, secs,
                           False, moving=True, speed=int(w * 0.1)))
    return out


def outline_overlays(rng, w, h, secs, n):
    """Overlay k of the corpus: ink k mod 10, outline width 1 + k mod 4, outline black, white or a
    contrasting colour by (k div 4) mod 3, so every ink meets every width and kind of outline."""
    taken, out = [], []
    for i in range(4):
        k = n * 4 + i
        name, colour = INKS[k % len(INKS)]
        kind = ["black", "white", "colour"][(k // 4) % 3]
        if kind == "colour":
            edge = (0x20, 0x50, 0xE0) if name in ("white", "black") else None
            hexed = hsv_hex((colour[0] + 180) % 360, 0.9, 0.9) if edge is None else "0x%02X%02X%02X" % edge
        else:
            # Never the ink's own colour: that outline would not show.
            kind = {"white": "black", "black": "white"}.get(name, kind) if name == kind else kind
            hexed = {"black": "0x000000", "white": "0xFFFFFF"}[kind]
        text = TRUTH_LINES[k % len(TRUTH_LINES)]
        size = rng.choice([int(h * 0.05), int(h * 0.07), int(h * 0.09)])
        p = place(rng, taken, text, size, w, h)
        if p:
            o = overlay(text, size, colour, p[0], p[1], p[2], 0.0, secs, True, style="outline")
            o.update(colour_name=name, outline=(hexed, 1 + k % 4, kind))
            out.append(o)
    return out


def soak_overlays(rng, w, h, secs, n):
    if n % 2:
        return []
    text, size = rng.choice(FAKE_LINES), 24
    p = place(rng, [], text, size, w, h)
    col = COLOURS[list(COLOURS)[n // 2 % len(COLOURS)]]
    return [overlay(text, size, col, p[0], p[1], p[2], 0.0, secs, True, style="box")] if p else []


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("ffmpeg failed: " + " ".join(cmd) + "\n" + r.stderr[-2000:])


def encode(graph, path, secs, tone):
    # B-frames and a 2 s GOP, like real uploads, so seeking is exercised.
    run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", graph,
         "-f", "lavfi", "-i", f"sine=frequency={tone}:sample_rate=44100",
         "-t", str(secs), "-c:v", "libx264", "-preset", "veryfast", "-crf", "18",
         "-g", str(2 * FPS), "-bf", "2", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", path])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--profile", choices=["demo", "ocr-truth", "reuse", "outline", "soak"], default="demo")
    ap.add_argument("--clips", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    stamp = os.path.join(a.out, ".corpus-stamp")
    want = json.dumps({"version": VERSION, "profile": a.profile, "clips": a.clips, "seconds": a.seconds, "seed": a.seed})
    if os.path.exists(stamp) and open(stamp).read() == want:
        print(f"corpus: up to date in {a.out}")
        return
    if shutil.which("ffmpeg") is None:
        sys.exit("ffmpeg CLI not found: run scripts/setup.sh")
    rng = random.Random(a.seed)
    vdir = os.path.join(a.out, "videos")
    tmp = os.path.join(a.out, ".tmp")
    shutil.rmtree(vdir, ignore_errors=True)
    os.makedirs(vdir, exist_ok=True)
    os.makedirs(tmp, exist_ok=True)
    rows, truth = [], []
    encodes = []
    titled = a.profile in ("demo", "soak")
    for n in range(a.clips):
        secs = a.seconds
        if a.profile == "demo":
            label, (w, h) = ("fake" if n % 2 == 0 else "real"), (1280, 720)
            ovs = demo_overlays(label, rng, w, h, a.seconds)
        elif a.profile == "soak":
            secs = round(rng.uniform(1.0, max(1.0, a.seconds)), 1)
            label, (w, h) = ("fake" if n % 2 == 0 else "real"), (320, 180)
            ovs = soak_overlays(rng, w, h, secs, n)
        elif a.profile == "reuse":
            label, (w, h) = "truth", (1280, 720)
            ovs = reuse_overlays(rng, w, h, a.seconds, n)
        elif a.profile == "outline":
            label, (w, h) = "truth", (1280, 720)
            ovs = outline_overlays(rng, w, h, a.seconds, n)
        else:
            label, (w, h) = "truth", ((1280, 720) if n % 2 == 0 else (1920, 1080))
            ovs = truth_overlays(rng, w, h, a.seconds, n)
        vid = {"demo": "demo", "ocr-truth": "truth", "reuse": "reuse", "outline": "outline",
               "soak": "soak"}[a.profile] + f"{n:03d}"
        backgrounds = STATIC_BACKGROUNDS if a.profile == "reuse" else BACKGROUNDS
        bg = backgrounds[n % len(backgrounds)].format(w=w, h=h, fps=FPS, seed=n + 1)
        path = os.path.join(vdir, f"{vid}.mp4")
        encodes.append((filtergraph(bg, ovs, tmp, vid, w), path, secs, 300 + 40 * (n % 100)))
        row = dict(path=f"videos/{vid}.mp4", id=vid, label=label, domain="demo-news", language="en")
        if titled:
            title, desc = (TITLES_TALK[(n // 3) % len(TITLES_TALK)] if n % 3 == 2
                           else TITLES_RAW[n % len(TITLES_RAW)])
            row.update(title=title, description=desc)
        rows.append(row)
        for i, o in enumerate(ovs):
            t = dict(video_id=vid, overlay=i, label=label, text=o["text"],
                     color_hex=hsv_hex(o["hue"], o["sat"], o["val"]), hue_deg=round(o["hue"], 3),
                     saturation=round(o["sat"], 4), value=round(o["val"], 4), x=o["x"], y=o["y"],
                     font_size=o["size"], style=o["style"], start_secs=o["start"], end_secs=o["end"],
                     moving=o["moving"], creator_added=o["creator_added"], frame_width=w, frame_height=h)
            if "outline" in o:
                t.update(colour_name=o["colour_name"], outline_hex=o["outline"][0], outline_px=o["outline"][1],
                         outline_kind=o["outline"][2])
            if o["box"]:
                x0, y0, x1, y1 = o["box"]
                t.update(ink_box=[x0, y0, x1, y1], center_x=(x0 + x1) / 2 / w, center_y=(y0 + y1) / 2 / h,
                         aspect_ratio=(x1 - x0) / max(1, y1 - y0))
            truth.append(t)
    # The choices above are made in order (seeded); only the encoding runs in parallel.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda e: encode(*e), encodes))
    if a.profile == "soak":
        for n in range(39, a.clips, 40):
            path = os.path.join(vdir, f"soak{n:03d}.mp4")
            with open(path, "rb") as f:
                head = f.read(3000)
            with open(path, "wb") as f:
                f.write(head)
    if a.profile == "demo":
        # A phone clip: coded landscape, rotation metadata says portrait. (FFmpeg 5.1 writes the
        # display matrix from the `rotate` tag only when stream-copying.)
        rot = os.path.join(vdir, "demo_rotated.mp4")
        plain = os.path.join(tmp, "unrotated.mp4")
        run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
             f"smptebars=s=640x360:r={FPS}:d={a.seconds}", "-c:v", "libx264", "-preset", "veryfast", plain])
        run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", plain, "-c", "copy",
             "-metadata:s:v:0", "rotate=90", rot])
        rows.append(dict(path="videos/demo_rotated.mp4", id="demo_rotated", label="real", domain="demo-phone",
                         language="en", title="Phone video: protesters clash with police outside the station",
                         description="Filmed upright on my phone"))
        # A broken upload: the first 20 kB of a clip. The run must reject it and carry on.
        with open(os.path.join(vdir, "demo000.mp4"), "rb") as src, \
                open(os.path.join(vdir, "demo_broken.mp4"), "wb") as dst:
            dst.write(src.read(20000))
        rows.append(dict(path="videos/demo_broken.mp4", id="demo_broken", label="fake", domain="demo-news",
                         language="en", title="Riot footage (upload cut short)", description="Broken file"))
    with open(os.path.join(a.out, "manifest.csv"), "w", newline="") as f:
        cols = ["path", "id", "label", "domain", "language"]
        if titled:
            cols += ["title", "description"]
        wr = csv.DictWriter(f, fieldnames=cols)
        wr.writeheader()
        wr.writerows(rows)
    with open(os.path.join(a.out, "ground_truth.jsonl"), "w") as f:
        for t in truth:
            f.write(json.dumps(t) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    with open(stamp, "w") as f:
        f.write(want)
    print(f"corpus: {len(rows)} videos, {len(truth)} overlays in {a.out}")


if __name__ == "__main__":
    main()
