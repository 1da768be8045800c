#!/usr/bin/env python3
"""Scores a run's `ocr` table against the corpus generator's ground truth.

For every drawn overlay and every sampled frame it is visible on, the region read on that frame
with the most similar text is its match. Prints JSON:
  text_exact     share of (overlay, frame) pairs read exactly, ignoring case and spaces
  hue_ok         share of coloured static overlays read exactly (saturation > 0.3) whose stroke hue
                 is within 3 deg
  center_ok      share of static overlays read exactly whose box centre is within 2 % of the frame
                 of the drawn ink box
  creator_ok     share of matched regions whose creator_added verdict is right
  rapidocr_exact (with --rapidocr PY) the same text score for RapidOCR 1.4.4 on the same JPEGs
Usage: eval_ocr_truth.py RUN_DIR TRUTH_JSONL [--ocr-stage ID] [--frames-stage ID] [--rapidocr PY]
"""
import argparse
import collections
import json
import os
import subprocess

import pyarrow.dataset as ds


def norm(s):
    return "".join(c for c in s.lower() if c.isalnum())


def sim(a, b):
    a, b = norm(a), norm(b)
    if not a and not b:
        return 1.0
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    return 1 - prev[len(b)] / max(len(a), len(b))


RAPID = r"""
import json, sys
from rapidocr_onnxruntime import RapidOCR
eng = RapidOCR()
for line in sys.stdin:
    path = line.strip()
    res, _ = eng(path)
    print(json.dumps([r[1] for r in (res or [])]), flush=True)
"""


def visible(regions, frames, truth):
    """(overlay, frame, regions read on that frame) for every drawn overlay and every sampled frame
    it is visible on, well inside its time window (a frame at a switch may show either)."""
    by_frame = collections.defaultdict(list)
    for r in regions:
        by_frame[(r["video_id"], r["frame_index"])].append(r)
    frames_of = collections.defaultdict(list)
    for f in frames:
        frames_of[f["video_id"]].append(f)
    for t in truth:
        for f in frames_of[t["video_id"]]:
            if t["start_secs"] + 0.05 <= f["timestamp_secs"] <= t["end_secs"] - 0.05:
                yield t, f, by_frame[(t["video_id"], f["frame_index"])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("truth")
    ap.add_argument("--ocr-stage", default="ocr_regions")
    ap.add_argument("--frames-stage", default="frames")
    ap.add_argument("--rapidocr")
    a = ap.parse_args()
    regions = ds.dataset(os.path.join(a.run, a.ocr_stage), format="parquet").to_table().to_pylist()
    frames = ds.dataset(os.path.join(a.run, a.frames_stage), format="parquet").to_table().to_pylist()
    truth = [json.loads(l) for l in open(a.truth)]
    rapid_texts = {}
    if a.rapidocr:
        paths = [os.path.join(a.run, f["path"]) for f in frames]
        out = subprocess.run([a.rapidocr, "-c", RAPID], input="\n".join(paths) + "\n", capture_output=True,
                             text=True, check=True).stdout.splitlines()
        for f, line in zip(frames, out):
            rapid_texts[(f["video_id"], f["frame_index"])] = json.loads(line)
    n_text = ok_text = ok_rapid = 0
    n_hue = ok_hue = n_center = ok_center = n_ca = ok_ca = 0
    misses, only_rapid = [], []
    for t, f, cands in visible(regions, frames, truth):
        key = (t["video_id"], f["frame_index"])
        if t["moving"]:
            # Scene text drifting off the edge is legitimately cut: judge only the verdicts.
            for r in cands:
                if sim(r["text"], t["text"]) >= 0.8:
                    n_ca += 1
                    ok_ca += r["creator_added"] == t["creator_added"]
            continue
        n_text += 1
        best = max(cands, key=lambda r: sim(r["text"], t["text"]), default=None)
        exact = best is not None and norm(best["text"]) == norm(t["text"])
        ok_text += exact
        if a.rapidocr:
            rapid_exact = any(norm(x) == norm(t["text"]) for x in rapid_texts.get(key, []))
            ok_rapid += rapid_exact
            if rapid_exact and not exact:
                only_rapid.append((t["video_id"], f["frame_index"], t["text"], [r["text"] for r in cands]))
        if best is None or sim(best["text"], t["text"]) < 0.6:
            misses.append((t["video_id"], f["frame_index"], t["text"], [r["text"] for r in cands]))
            continue
        n_ca += 1
        ok_ca += best["creator_added"] == t["creator_added"]
        if not exact:
            # A line the detector split into words has no single box to compare.
            continue
        if "center_x" in t:
            n_center += 1
            ok_center += abs(best["center_x"] - t["center_x"]) <= 0.02 and abs(best["center_y"] - t["center_y"]) <= 0.02
        if t["saturation"] > 0.3:
            n_hue += 1
            d = abs(best["text_h"] - t["hue_deg"]) % 360
            ok_hue += min(d, 360 - d) <= 3.0
    res = dict(pairs=n_text, text_exact=ok_text / max(1, n_text), hue_n=n_hue, hue_ok=ok_hue / max(1, n_hue),
               center_n=n_center, center_ok=ok_center / max(1, n_center), creator_n=n_ca,
               creator_ok=ok_ca / max(1, n_ca), misses=misses[:10])
    if a.rapidocr:
        res["rapidocr_exact"] = ok_rapid / max(1, n_text)
        res["only_rapidocr"] = only_rapid[:10]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
