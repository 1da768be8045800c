#!/usr/bin/env python3
"""A corpus moved to another folder (issue 66): what the rerun costs against hashing the same files
with b3sum and xxhsum, and that it computes nothing.

Two corpora, each run once through a folder source and the probe stage, then moved (`mv` to a new
folder: new paths, so every file is read again) and run again into the same run directory:

  - many small files (default 100,000): copies of a tiny generated clip, each with its own
    trailing MP4 `free` atom (distinct bytes, so distinct content ids; every file still probes);
  - a few large files (default 3 of 1 GiB): a tiny clip with a `free` atom of that size.

Printed per corpus: the no-edit rerun (one stat a file, no read), the rerun after the move (time,
peak RSS, files re-hashed, and what each stage computed: 0 expected), then `b3sum` and
`xxhsum -H3` over the same files (warm page cache, as for the rerun), and the ratio
rerun / b3sum.

  python3 scripts/bench/media_move.py                        # 100000 small, 3 x 1 GiB
  python3 scripts/bench/media_move.py --small 10000 --large 0

Needs: the release binary (cargo build --release), the ffmpeg CLI, b3sum and xxhsum
(scripts/setup.sh installs them).
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Time and peak RSS of one command, as the rerun bench measures them (this script sits beside it).
from rerun import BIN, measured


def tiny_clip(path):
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc=size=64x36:rate=5:duration=0.4", "-pix_fmt", "yuv420p", str(path)],
                   check=True)
    return path.read_bytes()


def free_atom(payload_len):
    """The header of an MP4 `free` atom of `payload_len` bytes: any reader skips it."""
    return struct.pack(">I", 8 + payload_len) + b"free"


def small_corpus(d, n, clip):
    d.mkdir(parents=True)
    for i in range(n):
        (d / f"c{i:07d}.mp4").write_bytes(clip + free_atom(8) + struct.pack(">Q", i))


def large_corpus(d, n, gib, clip):
    d.mkdir(parents=True)
    block = os.urandom(1 << 20)
    size = gib << 30
    for i in range(n):
        with open(d / f"big{i}.mp4", "wb") as f:
            f.write(clip + free_atom(size))
            for k in range(size >> 20):
                # Each MiB differs (its first 8 bytes), so no two files or blocks are alike.
                f.write(struct.pack(">QQ", i, k) + block[16:])


def counts(run_dir):
    m = json.loads((run_dir / "manifest.json").read_text())
    return m["invocations"][-1]["counts"]


def peer(cmd, files):
    """One peer hashing every file (as many per invocation as the command line takes)."""
    t0 = time.perf_counter()
    rss = 0.0
    for k in range(0, len(files), 5000):
        _, r, _ = measured(cmd[0], cmd[1:] + files[k:k + 5000])
        rss = max(rss, r)
    return time.perf_counter() - t0, rss


def one_corpus(name, d, make):
    media, moved = d / "media", d / "moved"
    make(media)
    pipeline = ('name = "move"\n[source]\ntype = "local"\ndir = "{}"\n'
                '[[stages]]\nid = "probe"\ntype = "probe"\n')
    run = d / "run"
    p = d / "p.toml"
    p.write_text(pipeline.format("media"))
    args = ["run", str(p), "--out", str(run), "-q"]
    t_first, _, _ = measured(BIN, args)
    t_same, rss_same, _ = measured(BIN, args)
    media.rename(moved)
    p.write_text(pipeline.format("moved"))
    t_move, rss_move, said = measured(BIN, args)
    c = counts(run)
    files = sorted(str(f) for f in moved.iterdir())
    size = sum(os.path.getsize(f) for f in files)
    t_b3, rss_b3 = peer(["b3sum", "--no-names"], files)
    t_xx, rss_xx = peer(["xxhsum", "-H3"], files)
    said = [l for l in said.splitlines() if l.startswith(("source:", "probe:"))]
    row = {"corpus": name, "files": len(files), "bytes": size, "first_run_secs": t_first,
           "rerun_no_edit_secs": t_same, "rerun_no_edit_rss_mib": rss_same,
           "rerun_moved_secs": t_move, "rerun_moved_rss_mib": rss_move,
           "rehashed": c["source"].get("tally", {}).get("rerun_rehashed", 0),
           "computed": {s: v.get("computed", 0) for s, v in c.items() if s != "source"},
           "said": said, "b3sum_secs": t_b3, "b3sum_rss_mib": rss_b3,
           "xxhsum_secs": t_xx, "xxhsum_rss_mib": rss_xx}
    print(f"{name}: {len(files)} files, {size / 2**30:.2f} GiB; first run {t_first:.1f} s; "
          f"rerun, no edit {t_same:.2f} s ({rss_same:.0f} MiB)", flush=True)
    print(f"  moved: rerun {t_move:.2f} s ({rss_move:.0f} MiB), {row['rehashed']} re-hashed, "
          f"computed {row['computed']} {said}", flush=True)
    print(f"  b3sum {t_b3:.2f} s ({rss_b3:.0f} MiB), xxhsum -H3 {t_xx:.2f} s ({rss_xx:.0f} MiB); "
          f"rerun / b3sum = {t_move / t_b3:.2f}, rerun / xxhsum = {t_move / t_xx:.2f}",
          flush=True)
    shutil.rmtree(d)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=100000, help="small files (0: none)")
    ap.add_argument("--large", type=int, default=3, help="large files (0: none)")
    ap.add_argument("--large-gib", type=int, default=1, help="GiB a large file")
    ap.add_argument("--tmp", help="where to make the corpora (default: the system's temp)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} missing: cargo build --release")
    for tool in ("ffmpeg", "b3sum", "xxhsum"):
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: scripts/setup.sh installs it")
    out = []
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        tmp = Path(tmp)
        clip = tiny_clip(tmp / "tiny.mp4")
        if a.small:
            out.append(one_corpus(f"{a.small} small", tmp / "small",
                                  lambda d: small_corpus(d, a.small, clip)))
        if a.large:
            out.append(one_corpus(f"{a.large} x {a.large_gib} GiB", tmp / "large",
                                  lambda d: large_corpus(d, a.large, a.large_gib, clip)))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
