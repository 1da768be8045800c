#!/usr/bin/env python3
"""The cost of a rerun that compares every input (issue 57) against the resume before it.

For each size N it makes a run of N videos through a cheap pipeline (a local manifest whose rows
point at a few tiny generated clips under distinct ids, with a label column; the probe stage), as
scripts/bench/cluster.py grows one, then times and measures the peak RSS of:

  - a rerun with no edit (the source read again, every row's digest compared, nothing computed);
  - a rerun after an edit script (one label fixed, one row removed, one added).

With --base BIN (a build of an earlier commit, e.g. the one before stamps), the same runs are made
with it in its own folders, and the no-edit rerun's time is printed as a ratio (base / this).

  python3 scripts/bench/rerun.py                         # 100000 videos, this build only
  python3 scripts/bench/rerun.py --sizes 10000 100000 --base /tmp/base/vidcurate

Needs: the release binary (cargo build --release) and the ffmpeg CLI.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The tiny clips cluster.py's run of N videos points at (this script sits beside it).
from cluster import tiny_clips

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("VIDCURATE_BIN", ROOT / "target/release/vidcurate"))


def measured(binary, args):
    """Wall time, peak RSS (MiB) and stderr of one invocation, waited for by a fresh Python (so
    ru_maxrss is this child's alone)."""
    code = ("import resource,subprocess,sys;"
            "p=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.PIPE);"
            "sys.stderr.buffer.write(p.stderr[-4000:]);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, str(binary)] + args,
                       capture_output=True, text=True)
    secs = time.perf_counter() - t0
    rss_kib, rc = p.stdout.split()
    if int(rc) not in (0, 3):
        sys.exit(f"{binary} {' '.join(args)} failed ({rc}):\n{p.stderr}")
    return secs, int(rss_kib) / 1024, p.stderr


def manifest(path, ids, clips, labels):
    with open(path, "w") as f:
        f.write("path,id,label\n")
        for i in ids:
            f.write(f"{clips[i % len(clips)]},v{i:07d},{labels.get(i, 'fake')}\n")


def one_size(binary, d, n, clips):
    d.mkdir(parents=True)
    (d / "p.toml").write_text(
        'name = "rerun"\n[source]\ntype = "local"\nmanifest = "m.csv"\n'
        '[[stages]]\nid = "probe"\ntype = "probe"\n')
    run = ["run", str(d / "p.toml"), "--out", str(d / "run"), "-q"]
    ids = list(range(n))
    manifest(d / "m.csv", ids, clips, {})
    t_make, _, _ = measured(binary, run)
    t_same, rss_same, _ = measured(binary, run)
    # The edit script: a label fixed, a row removed, a row added.
    ids = [i for i in ids if i != n // 2] + [n]
    manifest(d / "m.csv", ids, clips, {1: "real"})
    # The dry run before the edited rerun walks every video down the chain (issue 58).
    t_dry, rss_dry = dry_run(binary, run)
    t_edit, rss_edit, said = measured(binary, run)
    lines = [l for l in said.splitlines() if l.startswith(("source:", "probe:"))]
    return {"videos": n, "first_run_secs": t_make, "rerun_no_edit_secs": t_same,
            "rerun_no_edit_rss_mib": rss_same, "rerun_edit_secs": t_edit,
            "rerun_edit_rss_mib": rss_edit, "said": lines,
            "dry_run_secs": t_dry, "dry_run_rss_mib": rss_dry}


def dry_run(binary, run):
    """Time and peak RSS of `run --dry-run` over the run directory."""
    secs, rss, _ = measured(binary, run[:-1] + ["--dry-run"])
    return secs, rss


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100000])
    ap.add_argument("--base", help="an earlier build to compare with")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} missing: cargo build --release")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        clips = tiny_clips(tmp)
        for n in a.sizes:
            row = {"this": one_size(BIN, tmp / f"this{n}", n, clips)}
            if a.base:
                row["base"] = one_size(Path(a.base), tmp / f"base{n}", n, clips)
            out.append(row)
            for who, r in row.items():
                print(f"{who:>5} {n:>7} videos: first run {r['first_run_secs']:.1f} s; "
                      f"rerun, no edit {r['rerun_no_edit_secs']:.2f} s, "
                      f"{r['rerun_no_edit_rss_mib']:.0f} MiB; after an edit "
                      f"{r['rerun_edit_secs']:.2f} s, {r['rerun_edit_rss_mib']:.0f} MiB "
                      f"{r['said']}; dry run before it {r['dry_run_secs']:.2f} s, "
                      f"{r['dry_run_rss_mib']:.0f} MiB", flush=True)
            if a.base:
                ratio = row["base"]["rerun_no_edit_secs"] / row["this"]["rerun_no_edit_secs"]
                print(f"      no-edit rerun: base / this = {ratio:.2f} "
                      f"(above 1: this build is faster)", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
