#!/usr/bin/env python3
"""Benchmark: `vidcurate rethreshold RUN --set relevance.min_score=N` over a genuine run grown to
R stored relevance rows (default 1,000,000; several sizes with --rows 100000,1000000,10000000),
against pyarrow making the same selection, in the same run.

The run: `vidcurate run` on the demo corpus (scripts/make_demo_corpus.py) with the demo's source
and its relevance stage (the local judge, select min_score = 9; pipelines/demo.toml) — or
--pipeline FILE — then grown by replicating its videos under new ids through every stage table,
committed as the run's own ShardWriter commits shards (see scripts/bench/analyze.py, whose grow()
this uses), until the relevance table holds R rows. `vidcurate status` must count every copy done
and nothing pending. With several sizes, each is grown from the same genuine run.

Timed at each size, each as its own process (wall seconds; CPU seconds and peak RSS from
/usr/bin/time; best of --repeat):
  vidcurate         `vidcurate rethreshold RUN --set relevance.min_score=N`: reads every stage
                    table of the manifest's fingerprint, the funnel under the stored and the new
                    thresholds, two selection files (Parquet + JSON funnel).
  pyarrow selection the same in pyarrow (data/venv-readers): committed shards of the manifest's
                    fingerprint (footers: done and rejected videos), relevance scores, the funnel
                    under both thresholds, both selection files.
  pyarrow filter    what scripts/bench/judge.py compares with: the relevance folder as a dataset,
                    two columns, score >= N (no funnel, nothing written).
The outputs are compared: both selection tables column by column (video_id, kept per stage with
its nulls, selected) and both funnels; any difference fails the benchmark. Then, per size, the
issue's targets: vidcurate's wall time <= pyarrow's, its peak RSS <= 1.5x pyarrow's. With
several sizes, a growth table (Markdown) and with --plot FILE.png a log-log plot of both.

Usage: scripts/bench/rethreshold.py [--bin PATH] [--rows R[,R...]] [--min-score N] [--repeat K]
                                    [--pipeline FILE] [--from-run RUN] [--keep] [--plot FILE.png]
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


def same_output(ours, theirs):
    """Differences between vidcurate's selection (Parquet + JSON funnel) and the peer's: []
    when the tables hold the same values and nulls in every column and the funnels agree."""
    a, b = pq.read_table(ours + ".parquet"), pq.read_table(theirs + ".parquet")
    problems = []
    if a.column_names != b.column_names:
        return [f"columns {a.column_names} vs {b.column_names}"]
    for c in a.column_names:
        if not a.column(c).equals(b.column(c)):
            problems.append(f"column {c} differs")
    with open(ours + ".json") as f, open(theirs + ".json") as g:
        fa, fb = json.load(f)["funnel"], json.load(g)["funnel"]
    if fa != fb:
        problems.append(f"funnel {fa} vs {fb}")
    return problems


def bench_size(a, run, rel, work):
    """One size: both tools timed, their outputs compared; the numbers of the growth table."""
    out, pending = bench.status(a.bin, run)
    print(f"vidcurate status after growing ({pending} pending):")
    print("\n".join("  " + l for l in out.strip().splitlines()))
    if pending:
        raise SystemExit("the grown run has pending videos")
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
    problems = (same_output(newest[: -len(".parquet")], os.path.join(peer_dir, "rethreshold"))
                + same_output(os.path.join(run, "selections", "pipeline"), os.path.join(peer_dir, "pipeline")))
    ours, ours0 = selected_ids(newest), selected_ids(os.path.join(run, "selections", "pipeline.parquet"))
    print(f"same output: {'yes' if not problems else 'NO: ' + '; '.join(problems)} (selection tables "
          f"column by column and funnels, both thresholds; {len(ours):,} and {len(ours0):,} selected); "
          f"pyarrow filter {filt['stdout'].strip()}")
    print(f"rethreshold {setting} over {rel.rows:,} stored {rel.id} rows, best of {a.repeat} ({bench.load()}):")
    bench.print_table([("vidcurate rethreshold", vid), ("pyarrow (same funnel + selections)", peer),
                       ("pyarrow (read 2 columns + filter)", filt)], "pyarrow selection / vidcurate")
    print(f"  ratio pyarrow filter / vidcurate: {filt['seconds'] / vid['seconds']:.2f} whole process, "
          f"{filt['inner'] / vid['seconds']:.2f} in-process (judge.py's comparison)")
    fast, small = vid["seconds"] <= peer["seconds"], vid["rss"] <= 1.5 * peer["rss"]
    print(f"  targets: wall time <= pyarrow's {'met' if fast else 'MISSED'} ({vid['seconds']:.2f} s vs "
          f"{peer['seconds']:.2f} s); peak RSS <= 1.5x pyarrow's {'met' if small else 'MISSED'} "
          f"({vid['rss']:.0f} MiB vs {peer['rss']:.0f} MiB); outputs {'equal' if not problems else 'DIFFER'}")
    if problems:
        raise SystemExit("vidcurate and pyarrow disagree")
    return {"rows": rel.rows, "vid": vid, "peer": peer}


def growth_table(sizes):
    print("\ngrowth (Markdown):")
    print("| relevance rows | vidcurate s | vidcurate MiB | pyarrow s | pyarrow MiB | time pyarrow / vidcurate "
          "| RSS vidcurate / pyarrow |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        v, p = s["vid"], s["peer"]
        print(f"| {s['rows']:,} | {v['seconds']:.2f} | {v['rss']:.0f} | {p['seconds']:.2f} | {p['rss']:.0f} "
              f"| {p['seconds'] / v['seconds']:.2f} | {v['rss'] / p['rss']:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=bench.BIN)
    ap.add_argument("--rows", default="1000000",
                    help="relevance rows to grow the run to; several, comma-separated, grow it step by step")
    ap.add_argument("--min-score", type=int, default=5,
                    help="the new relevance.min_score (the demo judge scores 3, 5 or 10: 5 lets one more title in)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side (best wall time)")
    ap.add_argument("--pipeline", help="pipeline to make the run with (default: demo source + relevance)")
    ap.add_argument("--work", help="folder for the run (default: a new one under /tmp)")
    ap.add_argument("--from-run", help="copy this genuine run instead of making one")
    ap.add_argument("--keep", action="store_true", help="leave the run directory")
    ap.add_argument("--plot", help="write the growth plot here (PNG), with several --rows")
    ap.add_argument("--pyarrow-peer", nargs=5, metavar=("RUN", "STAGE", "KEY", "VALUE", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--filter-peer", nargs=3, metavar=("RUN", "STAGE", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pyarrow_peer:
        return pyarrow_peer(*a.pyarrow_peer)
    if a.filter_peer:
        return filter_peer(*a.filter_peer)
    counts = sorted(int(r.replace("_", "")) for r in a.rows.split(","))
    a.bin = os.path.abspath(a.bin)
    bench.check_bin(a.bin)
    tmp = tempfile.mkdtemp(prefix="vidcurate-rethreshold-pipeline-", dir="/tmp")
    pipeline = os.path.abspath(a.pipeline) if a.pipeline else relevance_pipeline(os.path.join(tmp, "relevance.toml"))
    print(f"vidcurate: {a.bin}; {bench.load()}")
    own_work = not a.work
    a.work = a.work or tempfile.mkdtemp(prefix="vidcurate-rethreshold-bench-", dir="/tmp")
    try:
        if not a.from_run:
            # Each size is grown from the same genuine run (growing a grown run would copy
            # every copy again).
            bench.make_corpus()
            genuine = os.path.join(a.work, "genuine")
            if os.path.exists(genuine):
                shutil.rmtree(genuine)
            dt = bench.make_run(a.bin, pipeline, genuine)
            print(f"genuine run: `vidcurate run {pipeline} --out {genuine}` in {dt:.1f} s")
            a.from_run = genuine
        sizes = []
        for n in counts:
            print(f"\n=== {n:,} relevance rows")
            a.rows = n
            work, run, rel = bench.prepare(a, pipeline, "relevance", "rethreshold", ["video_id", "score"])
            sizes.append(bench_size(a, run, rel, work))
        if len(sizes) > 1:
            growth_table(sizes)
        if a.plot:
            bench.growth_plot(sizes, a.plot, "relevance rows", "pyarrow")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if a.keep:
            print(f"kept: {os.path.join(a.work, 'run')}")
        elif own_work:
            shutil.rmtree(a.work, ignore_errors=True)

if __name__ == "__main__":
    main()
