#!/usr/bin/env python3
"""Benchmark: `vidcurate rethreshold RUN --set relevance.min_score=N` over a genuine run grown to
R stored relevance rows (default 1,000,000), against pyarrow making the same selection, in the
same run.

The run: `vidcurate run` on the demo corpus (scripts/make_demo_corpus.py) with the demo's source
and its relevance stage (the local judge, select min_score = 9; pipelines/demo.toml) — or
--pipeline FILE — then grown by replicating its videos under new ids through every stage table,
committed as the run's own ShardWriter commits shards (see scripts/bench/analyze.py, whose grow()
this uses), until the relevance table holds R rows. `vidcurate status` must count every copy done
and nothing pending.

Timed, each as its own process (wall seconds; CPU seconds and peak RSS from /usr/bin/time; best
of --repeat):
  vidcurate         `vidcurate rethreshold RUN --set relevance.min_score=N`: reads every stage
                    table of the manifest's fingerprint, the funnel under the stored and the new
                    thresholds, two selection files (Parquet + JSON funnel).
  pyarrow selection the same in pyarrow (data/venv-readers): committed shards of the manifest's
                    fingerprint (footers: done and rejected videos), relevance scores, the funnel
                    under both thresholds, both selection files. Its selected set must equal
                    vidcurate's.
  pyarrow filter    what scripts/bench/judge.py compares with: the relevance folder as a dataset,
                    two columns, score >= N (no funnel, nothing written).

Usage: scripts/bench/rethreshold.py [--bin PATH] [--rows R] [--min-score N] [--repeat K]
                                    [--pipeline FILE] [--from-run RUN] [--keep]
"""
import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analyze as bench  # noqa: E402  (re-executes under data/venv-readers when numpy is missing)

np, pa, pq = bench.np, bench.pa, bench.pq
ROOT = bench.ROOT


def relevance_pipeline(path):
    """The demo's source and relevance stage, with absolute paths, as a pipeline file."""
    with open(path, "w") as f:
        f.write(f'''name = "rethreshold-bench"
description = "The demo corpus and the demo's relevance stage (local judge) only."

[source]
type = "local"
manifest = "{os.path.join(ROOT, "data", "demo", "manifest.csv")}"

[[stages]]
id = "relevance"
type = "relevance"
compute = {{ service = "local", queries = "{os.path.join(ROOT, "queries", "protest.toml")}" }}
select = {{ min_score = 9 }}
''')
    return path


# ---------------------------------------------------------------------------------------------
# The pyarrow side (its own process: `rethreshold.py --pyarrow-peer RUN STAGE KEY VALUE OUT`)

def stage_rules(kind, select):
    """A scoring stage's keep rule as vidcurate's reselect decides it: (columns it reads, rule
    over the table's rows, whether a done video without rows goes on); (None, None, True) for
    stages without thresholds."""
    if kind == "relevance":  # RelevanceSelect: the first row's score >= min_score; no row: out
        n = int(select.get("min_score", 9))
        return ["score"], lambda t: pa.compute.greater_equal(t.column("score"), n), False
    if kind == "prescreen":  # PrescreenSelect: certain failures <= 12 - min_twos; no row: on
        if not select.get("reject_certain", True):
            return [], None, True
        limit = max(12 - int(select.get("min_twos", 10)), 0)
        return ["certain_failures"], lambda t: pa.compute.less_equal(t.column("certain_failures"), limit), True
    if kind in ("quality", "committee"):
        raise SystemExit(f"pyarrow peer: stage kind {kind} not supported")
    return None, None, True


def pyarrow_peer(run, stage, key, value, out_dir):
    import time
    import tomllib
    import pyarrow.compute as pc
    try:
        import pandas  # noqa: F401  (pyarrow imports it lazily on numpy conversions: not in the timing)
    except ImportError:
        pass

    t0 = time.perf_counter()
    m = bench.manifest(run)
    pipeline = tomllib.loads(m["pipeline_toml"])
    selects = {s["id"]: s.get("select", {}) for s in pipeline.get("stages", [])}
    changed = {k: dict(v) for k, v in selects.items()}
    changed.setdefault(stage, {})[key] = tomllib.loads(f"v = {value}")["v"]

    # Every stage's committed shards of its fingerprint: done and rejected videos from the
    # footers, rows only of the scoring stages (the columns their rules read).
    stages = []
    for st in m["stages"]:
        cols, _, _ = stage_rules(st["type"], {})
        done, rejected, tables = [], [], []
        for path in bench.stage_shards(run, st["id"]):
            pf = pq.ParquetFile(path)
            meta = {k.decode(): v.decode() for k, v in (pf.metadata.metadata or {}).items()}
            if meta.get(bench.META_FP) != st["fingerprint"]:
                continue
            done.extend(json.loads(meta.get(bench.META_VIDEOS, "[]")))
            rejected.extend(json.loads(meta.get(bench.META_REJECTED, "[]")))
            if cols:
                tables.append(pf.read(columns=["video_id"] + cols))
        rdir = os.path.join(run, "rejects")
        for path in glob.glob(os.path.join(rdir, f"{st['id']}-part-*.parquet")):
            meta = bench.footer(path)
            if meta.get(bench.META_FP) == st["fingerprint"]:
                rejected.extend(json.loads(meta.get(bench.META_VIDEOS, "[]")))
        stages.append((st, pa.array(done, pa.string()), pa.array(rejected, pa.string()),
                       pa.concat_tables(tables) if tables else None))
    sources = pc.unique(stages[0][1]).sort() if stages[0][0]["id"] == "source" else None
    chain = [s for s in stages if s[0]["id"] != "source"]

    # What does not depend on the thresholds, once: per stage and source video, rejected, done,
    # and the row that decides (index_in finds a video's first row).
    facts = []
    for st, done, rejected, table in chain:
        is_rej = pc.is_in(sources, value_set=rejected).to_numpy(zero_copy_only=False)
        is_done = pc.is_in(sources, value_set=done).to_numpy(zero_copy_only=False) & ~is_rej
        idx = None
        if table is not None and stage_rules(st["type"], {})[1] is not None:
            idx = pc.fill_null(pc.index_in(sources, value_set=table.column("video_id")), -1).to_numpy()
        facts.append((st, is_rej, is_done, idx, table))

    def funnel(sel):
        current = np.ones(len(sources), dtype=bool)
        rows, kept = [], []
        for st, is_rej, is_done, idx, table in facts:
            keep = np.ones(len(sources), dtype=bool)
            _, rule, no_rows = stage_rules(st["type"], sel.get(st["id"], {}))
            if rule is not None:
                keep[:] = no_rows
                if idx is not None:
                    ok = pc.fill_null(rule(table), False).to_numpy(zero_copy_only=False)
                    keep[idx >= 0] = ok[idx[idx >= 0]]
            # kept: false when rejected, the rule's verdict when done, null when not reached.
            col = pa.array(is_done & keep, mask=~(current & (is_done | is_rej)))
            rows.append({"stage": st["id"], "kind": st["type"], "input": int(current.sum()),
                         "done": int((current & is_done).sum()), "rejected": int((current & is_rej).sum()),
                         "pending": int((current & ~is_done & ~is_rej).sum())})
            current = current & is_done & keep
            rows[-1]["out"] = int(current.sum())
            kept.append(col)
        return rows, kept, current

    os.makedirs(out_dir, exist_ok=True)
    for name, sel in [("pipeline", selects), ("rethreshold", changed)]:
        rows, kept, selected = funnel(sel)
        cols = {"video_id": sources}
        for (st, *_), k in zip(chain, kept):
            cols[f"{st['id']}_kept"] = k
        cols["selected"] = pa.array(selected)
        pq.write_table(pa.table(cols), os.path.join(out_dir, f"{name}.parquet"))
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump({"funnel": rows}, f, indent=2)
        print(f"{name}: " + ", ".join(f"{r['stage']} in {r['input']} done {r['done']} out {r['out']}" for r in rows))
    print(f"in-process: {time.perf_counter() - t0:.4f} s")


def filter_peer(run, stage, threshold):
    import time
    import pyarrow.dataset as ds

    t0 = time.perf_counter()
    kept = ds.dataset(os.path.join(run, stage)).to_table(columns=["video_id", "score"]).filter(
        pa.compute.greater_equal(pa.compute.field("score"), int(threshold))).num_rows
    print(f"kept {kept}")
    print(f"in-process: {time.perf_counter() - t0:.4f} s")


# ---------------------------------------------------------------------------------------------

def selected_ids(path):
    t = pq.read_table(path, columns=["video_id", "selected"])
    return set(t.filter(t.column("selected")).column("video_id").to_pylist())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=bench.BIN)
    ap.add_argument("--rows", type=int, default=1_000_000, help="relevance rows to grow the run to")
    ap.add_argument("--min-score", type=int, default=5,
                    help="the new relevance.min_score (the demo judge scores 3, 5 or 10: 5 lets one more title in)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side (best wall time)")
    ap.add_argument("--pipeline", help="pipeline to make the run with (default: demo source + relevance)")
    ap.add_argument("--work", help="folder for the run (default: a new one under /tmp)")
    ap.add_argument("--from-run", help="copy this genuine run instead of making one")
    ap.add_argument("--keep", action="store_true", help="leave the run directory")
    ap.add_argument("--pyarrow-peer", nargs=5, metavar=("RUN", "STAGE", "KEY", "VALUE", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--filter-peer", nargs=3, metavar=("RUN", "STAGE", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pyarrow_peer:
        return pyarrow_peer(*a.pyarrow_peer)
    if a.filter_peer:
        return filter_peer(*a.filter_peer)
    a.bin = os.path.abspath(a.bin)
    bench.check_bin(a.bin)
    tmp = tempfile.mkdtemp(prefix="vidcurate-rethreshold-pipeline-", dir="/tmp")
    pipeline = os.path.abspath(a.pipeline) if a.pipeline else relevance_pipeline(os.path.join(tmp, "relevance.toml"))
    print(f"vidcurate: {a.bin}; {bench.load()}")
    work, run, rel = bench.prepare(a, pipeline, "relevance", "rethreshold", ["video_id", "score"])
    try:
        out, pending = bench.status(a.bin, run)
        print(f"vidcurate status after growing ({pending} pending):")
        print("\n".join("  " + l for l in out.strip().splitlines()))
        setting = f"{rel.id}.min_score={a.min_score}"
        vid = bench.best_of([a.bin, "rethreshold", run, "--set", setting], a.repeat, "vidcurate rethreshold")
        print("\n".join("  " + l for l in vid["stdout"].strip().splitlines()))
        newest = sorted(glob.glob(os.path.join(run, "selections", "rethreshold-*.parquet")))[-1]
        py = bench.READERS_PY if os.path.exists(bench.READERS_PY) else sys.executable
        me = os.path.abspath(__file__)
        peer_dir = os.path.join(work, "pyarrow")
        peer = bench.best_of([py, me, "--pyarrow-peer", run, rel.id, "min_score", str(a.min_score), peer_dir],
                             a.repeat, "pyarrow selection")
        print("  pyarrow " + peer["stdout"].strip().replace("\n", "\n  pyarrow "))
        filt = bench.best_of([py, me, "--filter-peer", run, rel.id, str(a.min_score)], a.repeat, "pyarrow filter")
        ours, theirs = selected_ids(newest), selected_ids(os.path.join(peer_dir, "rethreshold.parquet"))
        ours0 = selected_ids(os.path.join(run, "selections", "pipeline.parquet"))
        theirs0 = selected_ids(os.path.join(peer_dir, "pipeline.parquet"))
        print(f"same selection: new thresholds {'yes' if ours == theirs else 'NO'} ({len(ours):,} vs {len(theirs):,} "
              f"selected), pipeline's {'yes' if ours0 == theirs0 else 'NO'} ({len(ours0):,} vs {len(theirs0):,}); "
              f"pyarrow filter {filt['stdout'].strip()}")
        print(f"rethreshold {setting} over {rel.rows:,} stored {rel.id} rows, best of {a.repeat} ({bench.load()}):")
        bench.print_table([("vidcurate rethreshold", vid), ("pyarrow (same funnel + selections)", peer),
                           ("pyarrow (read 2 columns + filter)", filt)], "pyarrow selection / vidcurate")
        print(f"  ratio pyarrow filter / vidcurate: {filt['seconds'] / vid['seconds']:.2f} whole process, "
              f"{filt['inner'] / vid['seconds']:.2f} in-process (judge.py's comparison)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not a.keep and not a.work:
            shutil.rmtree(work, ignore_errors=True)
        elif a.keep:
            print(f"kept: {run}")


if __name__ == "__main__":
    main()
