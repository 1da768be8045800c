#!/usr/bin/env python3
"""Issue 57's table, redone on the demo: each edit of the inputs, then `vidcurate run` into the
same directory, against a clean run of the same pipeline and inputs in a new one.

Copies the demo corpus (data/demo, made by ./scripts/demo.sh), the demo pipeline and its query
file into a temporary folder, runs pipelines/demo.toml there once, then applies the issue's edits
one after the other:

  label     demo000's label fake -> real
  title     demo001's title and description rewritten
  removed   demo003's row taken out of the manifest
  file      demo004's file replaced by demo005's
  touched   every video's modification time set to now (issue 66)
  copied    the whole folder copied elsewhere (`cp -r`), the old one removed (issue 66)
  title-out demo002 retitled as a cooking lesson: relevance drops it, its later rows are held
  title-in  demo002's title back: its held rows come back uncomputed

After each it reruns into the first directory, runs a clean run into a new one, and compares every
table (as pyarrow reads the folders: every column but times; the inputs' folder in a value, such
as a reject's detail naming its file, read as `<inputs>`) and the `analyze --by label` tables.
It prints, per edit, the summary lines the rerun said, what it computed per stage, and whether the
tables equal the clean run's. Exit 1 when any differs.

  python3 scripts/bench/rerun_demo.py

Needs: ./scripts/demo.sh once (the release binary, data/demo, the models), pyarrow.
"""

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("VIDCURATE_BIN", ROOT / "target/release/vidcurate"))
TABLES = ["source", "relevance", "probe", "frames", "ocr_regions", "ocr_videos", "shots",
          "prescreen", "rejects"]
VOLATILE = {"rejected_at"}


def run(args, cwd):
    p = subprocess.run([str(BIN)] + args, cwd=cwd, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        sys.exit(f"vidcurate {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stderr


# The folders the inputs were read from: a path in a value is compared as `<inputs>/...` (a
# reject's detail names the file it could not read, as it was named when it was rejected).
ROOTS = []


def rows(run_dir, table):
    path = Path(run_dir) / table
    if not path.exists():
        return []
    t = ds.dataset(str(path), format="parquet").to_table()
    keep = [c for c in t.schema.names if c not in VOLATILE]
    out = []
    for r in t.select(keep).to_pylist():
        text = repr(sorted(r.items()))
        for root in ROOTS:
            text = text.replace(root, "<inputs>")
        out.append(text)
    return sorted(out)


def analysis(run_dir, cwd):
    run(["analyze", str(run_dir), "--by", "label"], cwd)
    out = {}
    for f in sorted((Path(run_dir) / "analysis").rglob("*.csv")):
        out[f.name] = f.read_text()
    return out


def edit_manifest(path, change):
    with open(path, newline="") as f:
        r = list(csv.DictReader(f))
    cols = list(r[0].keys())
    r = change(r)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(r)


def main():
    if not (ROOT / "data/demo/manifest.csv").exists() or not BIN.exists():
        sys.exit("run ./scripts/demo.sh first (it makes data/demo and the release binary)")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copytree(ROOT / "data/demo", tmp / "data/demo")
        (tmp / "pipelines").mkdir()
        shutil.copy(ROOT / "pipelines/demo.toml", tmp / "pipelines/demo.toml")
        (tmp / "queries").mkdir()
        shutil.copy(ROOT / "queries/protest.toml", tmp / "queries/protest.toml")
        os.symlink(ROOT / "data/models", tmp / "data/models")
        manifest = tmp / "data/demo/manifest.csv"
        pipeline = str(tmp / "pipelines/demo.toml")
        ROOTS.append(str(tmp))
        out = tmp / "run"
        run(["run", pipeline, "--out", str(out), "-q"], tmp)

        def label(r):
            for x in r:
                if x["id"] == "demo000":
                    x["label"] = "real" if x["label"] == "fake" else "fake"
            return r

        def title(r):
            for x in r:
                if x["id"] == "demo001":
                    x["title"] = "Protesters clash with riot police in the city centre"
                    x["description"] = "Footage from the march, rewritten"
            return r

        def removed(r):
            return [x for x in r if x["id"] != "demo003"]

        def file(_r):
            v = tmp / "data/demo/videos"
            shutil.copy(v / "demo005.mp4", v / "demo004.mp4")
            return _r

        def touched(r):
            for v in (tmp / "data/demo/videos").iterdir():
                os.utime(v)
            return r

        def copied(r):
            # Everything the run reads, elsewhere; the rerun still writes into `out`.
            nonlocal tmp, manifest, pipeline
            moved = tmp.parent / (tmp.name + "-moved")
            shutil.rmtree(moved, ignore_errors=True)
            moved.mkdir()
            for d in ("data", "pipelines", "queries"):
                subprocess.run(["cp", "-r", str(tmp / d), str(moved / d)], check=True)
            shutil.rmtree(tmp / "data/demo")
            moves.append(moved)
            ROOTS.insert(0, str(moved))
            tmp, manifest = moved, moved / "data/demo/manifest.csv"
            pipeline = str(moved / "pipelines/demo.toml")
            return r

        titles = {}

        def title_out(r):
            for x in r:
                if x["id"] == "demo002":
                    titles["demo002"] = (x["title"], x["description"])
                    x["title"] = "A quiet cooking lesson in a studio kitchen"
                    x["description"] = "Chopping onions, slowly, for beginners"
            return r

        def title_in(r):
            for x in r:
                if x["id"] == "demo002":
                    x["title"], x["description"] = titles["demo002"]
            return r

        moves = []
        for name, change in [("label", label), ("title", title), ("removed", removed),
                             ("file", file), ("touched", touched), ("copied", copied),
                             ("title-out", title_out), ("title-in", title_in)]:
            if change is copied:
                copied(None)
            else:
                edit_manifest(manifest, change)
            said = run(["run", pipeline, "--out", str(out), "-q"], tmp)
            clean = tmp / f"clean-{name}"
            run(["run", pipeline, "--out", str(clean), "-q"], tmp)
            differ = [t for t in TABLES if rows(out, t) != rows(clean, t)]
            ours, theirs = analysis(out, tmp), analysis(clean, tmp)
            if not ours or ours != theirs:
                differ.append("analyze")
            lines = [l for l in said.splitlines() if ": " in l and l.split(":")[0] in
                     ["source"] + TABLES and any(w in l for w in
                     ("changed", "removed", "added", "recomputed", "rewritten", "retried",
                      "re-hashed", "moved", "restored"))]
            computed = [l.split()[0] + "=" + l.split()[2] for l in said.splitlines()
                        if l.split() and l.split()[0] in TABLES + ["source"]
                        and len(l.split()) == 7 and l.split()[2].isdigit() and l.split()[2] != "0"]
            verdict = (f"equal to a clean run ({len(TABLES)} tables, {len(ours)} analyze tables)"
                       if not differ else f"DIFFERS: {', '.join(differ)}")
            print(f"{name:8} | {'; '.join(lines) or '(nothing said)'} | computed: "
                  f"{', '.join(computed) or 'nothing'} | {verdict}", flush=True)
            bad += bool(differ)
        for m in moves:
            shutil.rmtree(m, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
