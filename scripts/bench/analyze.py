#!/usr/bin/env python3
"""Benchmark: `vidcurate analyze` over a genuine run grown to N OCR regions (default 1,000,000;
several sizes with --rows 100000,1000000,10000000), against DuckDB computing the same histograms
over the same Parquet, in the same run.

The run: `vidcurate run pipelines/demo.toml` on the demo corpus (scripts/make_demo_corpus.py;
exit code 3 is expected: the corpus has one broken video on purpose), then grown by replicating
its genuine videos under new ids (`<id>-gNNNNNN`) through every stage table of the manifest
(source, relevance, probe, frames, ocr, overlays, shots, prescreen), each copy with exactly the
rows and extra columns (label, ...) of its original, until the ocr table holds N rows. The new
shards are committed the way the run's own ShardWriter commits them (src/store/shards/write.rs):
the next free slot `<stage>/part-NNNNN.parquet`, written to a hidden temp file, fsynced and
hard-linked into place (create-only), cut where the writer cuts (max_rows_per_shard rows or ~4 MiB
of buffered rows, videos never split), with the footer that is the commit record
(`vidcurate.videos`, `vidcurate.stage`, `vidcurate.fingerprint`) and the BLAKE3 of the rows'
bytes every reader checks (`vidcurate.data_blake3`), then `_commits/<shard>.json`, holding the
run's `.lock` meanwhile (not written: a copy's list of dependent objects, its frames being its
original's; `vidcurate verify` passes on a grown run). Videos rejected anywhere are not copied.
`vidcurate status` must then see every copy done and nothing pending, and `analyze` must count
every creator-added region of the table. Left as they are: the manifest (its invocations count the
genuine run's videos only) and the media (a copy's frame rows name its original's JPEGs).

Sizes are grown step by step, each in its own run WORK/run-N: the run of the previous size (the
genuine run WORK/genuine for the first) with its shards hard-linked (committed shards are never
rewritten, so a size costs only its new shards on disk), then grown to N. With --work DIR --keep
the runs stay; a later `--work DIR --reuse` times every DIR/run-N that already holds >= N regions
as it is (growing only what is missing), e.g. to time again on a quiet machine.

Timed at each size, each as its own process (wall seconds; CPU seconds and peak RSS from
/usr/bin/time; best of --repeat):
  vidcurate  `vidcurate analyze RUN --by label` (all analyses, the statistics, the PNG plots and
             report.html, Parquet + CSV tables).
  duckdb     DuckDB (data/venv-readers) over the same Parquet files (rows of the manifest's
             fingerprint): the same tables — hue/saturation/value pixel histograms, hue with one
             vote per coloured region, grid position, area, aspect ratio, the 8 time segments and
             shots per video — per label, of creator-added regions, written as CSV. No statistics
             and no plots: DuckDB does less of the work.
The two outputs are compared table by table at every size (counts; the segment means to 1e-9);
any difference fails the benchmark (exit 1) after the last size. With several sizes, a growth
table (Markdown); with --plot FILE.png a log-log plot of wall time and peak RSS against regions.

Usage: scripts/bench/analyze.py [--bin PATH] [--rows N[,N...]] [--repeat K] [--from-run RUN]
                                [--work DIR] [--keep] [--reuse] [--plot FILE.png]
(runs itself with data/venv-readers/bin/python when numpy is missing). rethreshold.py imports
this file for the growing, the timing and the tables.
"""
import argparse
import csv
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
READERS_PY = os.path.join(ROOT, "data", "venv-readers", "bin", "python")

# The DuckDB side imports only DuckDB (its start-up and memory are measured).
if "--duckdb-peer" not in sys.argv:
    try:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        if os.path.exists(READERS_PY) and not os.environ.get("VIDCURATE_BENCH_REEXEC"):
            os.environ["VIDCURATE_BENCH_REEXEC"] = "1"
            os.execv(READERS_PY, [READERS_PY] + sys.argv)
        raise

BIN = os.path.join(ROOT, "target", "release", "vidcurate")
DEMO_CORPUS = os.path.join(ROOT, "data", "demo")
DEMO_PIPELINE = os.path.join(ROOT, "pipelines", "demo.toml")
MAX_ROWS_DEFAULT = 20_000  # OutputConfig::max_rows_per_shard's default
MAX_BUFFER_BYTES = 4 << 20  # ShardWriter's MAX_BUFFER_BYTES
META_VIDEOS, META_STAGE, META_FP = "vidcurate.videos", "vidcurate.stage", "vidcurate.fingerprint"
META_REJECTED, META_DATA = "vidcurate.rejected", "vidcurate.data_blake3"
SUFFIX = "-g"


# ---------------------------------------------------------------------------------------------
# Processes, timed one by one

TIME = "/usr/bin/time"


def timed(cmd, cwd=None, env=None):
    """Runs cmd; (returncode, stdout, stderr, wall s, cpu s, peak RSS MiB) of that one process.

    Measured by /usr/bin/time (GNU time: fork, exec, wait4), not by this process's own wait4: a
    child forked (or vforked) from this Python starts with its memory's high-water mark, and
    exec keeps it in ru_maxrss, so a small program would report this process's peak."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as res:
        t0 = time.perf_counter()
        rc = subprocess.run([TIME, "-q", "-f", "%U %S %M", "-o", res.name] + cmd, stdout=out, stderr=err,
                            cwd=cwd, env=env).returncode
        dt = time.perf_counter() - t0
        usr, sys_, kib = res.read().split()[-3:]
        out.seek(0)
        err.seek(0)
        return (rc, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                dt, float(usr) + float(sys_), int(kib) / 1024)


def best_of(cmd, repeat, what, ok=(0,)):
    """Best wall time of `repeat` runs, with that run's CPU time and the highest peak RSS seen."""
    best, rss = None, 0.0
    for _ in range(repeat):
        rc, out, err, dt, cpu, mib = timed(cmd)
        if rc not in ok:
            raise SystemExit(f"{what} failed (exit {rc}):\n{err or out}")
        rss = max(rss, mib)
        if best is None or dt < best[0]:
            best = (dt, cpu, out, err)
    inner = [l.split()[1] for l in best[2].splitlines() if l.startswith("in-process: ")]
    return {"seconds": best[0], "cpu": best[1], "rss": rss, "inner": float(inner[-1]) if inner else None,
            "stdout": "\n".join(l for l in best[2].splitlines() if not l.startswith("in-process: ")),
            "stderr": best[3]}


def check_bin(path):
    if not os.path.exists(path):
        raise SystemExit(f"{path}: no binary (build it with `cargo build --release --locked`)")


# ---------------------------------------------------------------------------------------------
# A genuine run, and growing it through the commit protocol

def make_corpus():
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_corpus.py"), DEMO_CORPUS],
                   check=True, stdout=subprocess.DEVNULL)


def make_run(bin_path, pipeline, run):
    """`vidcurate run PIPELINE --out RUN`; exit 3 (some videos rejected) is a finished run."""
    rc, out, err, dt, _, _ = timed([bin_path, "run", pipeline, "--out", run, "-q"])
    if rc not in (0, 3):
        raise SystemExit(f"vidcurate run {pipeline} failed (exit {rc}):\n{err or out}")
    return dt


def manifest(run):
    with open(os.path.join(run, "manifest.json")) as f:
        return json.load(f)


def footer(path):
    md = pq.read_metadata(path).metadata or {}
    return {k.decode(): v.decode() for k, v in md.items()}


def part_number(name):
    stem = name[: -len(".parquet")] if name.endswith(".parquet") else None
    if stem is None or "part-" not in stem:
        return None
    tail = stem.rsplit("part-", 1)[1]
    return int(tail) if tail.isdigit() else None


def stage_shards(run, stage_id):
    """The committed shards of a stage folder (hidden temp files and other names excluded)."""
    d = os.path.join(run, stage_id)
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(d, n) for n in os.listdir(d)
                  if n.endswith(".parquet") and not n.startswith(".") and ".tmp-" not in n)


def is_copy(video_id):
    """A video grow() made: `<original>-gNNNNNN`."""
    head, _, tail = video_id.rpartition(SUFFIX)
    return bool(head) and len(tail) >= 6 and tail.isdigit()


class StageTable:
    """One stage's table as `read_table` sees it: shards of the manifest's fingerprint only.
    With genuine_only, the rows of shards holding only copies are counted but not read (a grown
    run's template is its genuine videos; reading 10M copied rows would take gigabytes)."""

    def __init__(self, run, stage, columns=None, genuine_only=False):
        self.id, self.kind, self.fp = stage["id"], stage["type"], stage["fingerprint"]
        self.done, self.rejected, tables, self.slots, self.row_count = [], set(), [], [], 0
        for path in stage_shards(run, self.id):
            n = part_number(os.path.basename(path))
            if os.path.basename(path).startswith("part-") and n is not None:
                self.slots.append(n)
            md = pq.read_metadata(path)
            meta = {k.decode(): v.decode() for k, v in (md.metadata or {}).items()}
            if meta.get(META_FP) != self.fp:
                continue
            videos = json.loads(meta.get(META_VIDEOS, "[]"))
            self.done.extend(videos)
            self.rejected.update(json.loads(meta.get(META_REJECTED, "[]")))
            self.row_count += md.num_rows
            if not genuine_only or not all(is_copy(v) for v in videos):
                tables.append(pq.read_table(path, columns=columns))
        # Reject shards of earlier versions (`rejects/<stage>-part-N.parquet`) settle videos too.
        rdir = os.path.join(run, "rejects")
        if os.path.isdir(rdir):
            for n in os.listdir(rdir):
                if n.startswith(f"{self.id}-part-") and n.endswith(".parquet"):
                    meta = footer(os.path.join(rdir, n))
                    if meta.get(META_FP) == self.fp:
                        self.rejected.update(json.loads(meta.get(META_VIDEOS, "[]")))
        self.table = pa.concat_tables(tables) if tables else None
        self.done_set = set(self.done)

    @property
    def rows(self):
        return self.row_count


def output_settings(m):
    """max_rows_per_shard of the pipeline as run."""
    try:
        import tomllib
        out = tomllib.loads(m["pipeline_toml"]).get("output", {})
        return int(out.get("max_rows_per_shard", MAX_ROWS_DEFAULT))
    except Exception:
        return MAX_ROWS_DEFAULT


def json_len(row):
    return len(json.dumps(row, separators=(",", ":"), default=str))


class Template:
    """One stage's rows of the template videos, in template order, with each video's row range
    and about what ShardWriter's buffer counts for it (its rows as JSON, plus its id per row)."""

    def __init__(self, st, videos):
        self.st = st
        self.done = np.array([v in st.done_set for v in videos])
        self.count = np.zeros(len(videos), dtype=np.int64)
        self.bytes = np.zeros(len(videos), dtype=np.int64)
        self.table, self.start = None, self.count.copy()
        if st.table is None:
            return
        ids = st.table.column("video_id").to_pylist()
        by_video = {}
        for i, v in enumerate(ids):
            by_video.setdefault(v, []).append(i)
        cols = [c for c in st.table.column_names if c not in ("video_id", "stage_fingerprint")]
        rows = st.table.select(cols).to_pylist()
        take = []
        for k, v in enumerate(videos):
            idx = by_video.get(v, [])
            self.count[k] = len(idx)
            self.bytes[k] = sum(json_len(rows[i]) + len(v) for i in idx)
            take.extend(idx)
        self.start = np.concatenate([[0], np.cumsum(self.count)[:-1]]).astype(np.int64)
        self.table = st.table.take(pa.array(take, type=pa.int64()))


def with_data_sum(table):
    """The table as Parquet bytes whose footer carries `vidcurate.data_blake3`, the size and
    BLAKE3 of the bytes before the footer that every vidcurate reader checks
    (src/store/commits.rs): without it a copy would skip the check a genuine shard pays for.
    pyarrow writes the same pages for the same table, so: write, hash, write again with the sum."""
    import blake3

    def encode(t):
        sink = pa.BufferOutputStream()
        pq.write_table(t, sink, compression="snappy")
        return sink.getvalue().to_pybytes()

    def before_footer(data):
        return len(data) - 8 - int.from_bytes(data[-8:-4], "little")

    first = encode(table)
    n = before_footer(first)
    meta = dict(table.schema.metadata or {})
    meta[META_DATA.encode()] = f"{n}:{blake3.blake3(first[:n]).hexdigest()}".encode()
    data = encode(table.replace_schema_metadata(meta))
    if before_footer(data) != n or data[:n] != first[:n]:
        raise SystemExit("pyarrow wrote different pages for the same table: cannot record their BLAKE3")
    return data


def write_record(run, object_path, data, videos, stage_id):
    """`_commits/<object>.json`, the commit record ShardWriter writes after each commit."""
    import blake3
    rec = {"object": {"path": object_path, "size": len(data), "blake3": blake3.blake3(data).hexdigest()},
           "stage": stage_id, "videos": videos, "objects": [],
           "committed_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"}
    path = os.path.join(run, "_commits", object_path + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{secrets.token_hex(6)}"
    with open(tmp, "w") as f:
        f.write(json.dumps(rec, indent=2) + "\n")
    os.replace(tmp, path)


def commit_shard(run, stage_id, slot, table, videos, fp):
    """Commits one shard as ShardWriter does: create-only at the next free slot (temp file, fsync,
    hard link that fails if the name is taken), the footer listing the videos it completes and
    the BLAKE3 of its rows' bytes, then its commit record."""
    meta = dict(table.schema.metadata or {})
    for k in list(meta):
        if k.startswith(b"vidcurate.") or k == b"ARROW:schema":
            del meta[k]
    meta.update({META_VIDEOS.encode(): json.dumps(videos, separators=(",", ":")).encode(),
                 META_STAGE.encode(): stage_id.encode(), META_FP.encode(): fp.encode()})
    table = table.replace_schema_metadata(meta)
    d = os.path.join(run, stage_id)
    os.makedirs(d, exist_ok=True)
    while True:
        name = f"part-{slot:05d}.parquet"
        target = os.path.join(d, name)
        tmp = os.path.join(d, f".{name}.tmp-{secrets.token_hex(6)}")
        data = with_data_sum(table)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, target)
            break
        except FileExistsError:
            slot += 1  # the lock is held: only a leftover could take it, never a live writer
        finally:
            os.unlink(tmp)
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    write_record(run, f"{stage_id}/{name}", data, videos, stage_id)
    return slot


def grow(run, target_kind, rows_wanted):
    """Replicates the run's videos under new ids through every stage until the first stage of
    `target_kind` holds `rows_wanted` rows. Returns a summary dict."""
    try:
        import blake3  # noqa: F401
    except ImportError:
        raise SystemExit(f"{sys.executable}: no module blake3, needed to write the shards' checksums "
                         f"(`{sys.executable} -m pip install blake3==1.0.11`)")
    lock = open(os.path.join(run, ".lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"{run}: another vidcurate run is using this run directory")
    try:
        return _grow(run, target_kind, rows_wanted)
    finally:
        lock.close()


def _grow(run, target_kind, rows_wanted):
    m = manifest(run)
    max_rows = output_settings(m)
    tables = [StageTable(run, s, genuine_only=True) for s in m["stages"]]
    by_id = {t.id: t for t in tables}
    source = by_id["source"]
    target = next((t for t in tables if t.kind == target_kind), None)
    if target is None:
        raise SystemExit(f"{run}: no {target_kind} stage in the manifest")
    rejected = set().union(*(t.rejected for t in tables))
    # The template: the genuine videos (a grown run grows again from them, not from its copies).
    videos = sorted(v for v in source.done_set if v not in rejected and not is_copy(v))
    temps = {t.id: Template(t, videos) for t in tables}
    per_copy = int(temps[target.id].count.sum())
    if per_copy == 0:
        raise SystemExit(f"{run}: the {target.id} table has no rows to replicate")
    deficit = rows_wanted - target.rows
    summary = {"videos_before": len(source.done_set), "target_rows_before": target.rows, "new_videos": 0,
               "shards": {}, "template_videos": len(videos)}
    if deficit <= 0:
        return summary
    # New videos: whole copies of the template, then the first videos of one more copy.
    full, rest = divmod(deficit, per_copy)
    n_new = full * len(videos)
    if rest:
        cum = np.cumsum(temps[target.id].count)
        n_new += int(np.searchsorted(cum, rest)) + 1
    first_copy = 1 + max([int(v.rsplit(SUFFIX, 1)[1]) for v in source.done_set if is_copy(v)] or [0])
    j = np.arange(n_new)
    tpl = j % len(videos)
    new_ids = [f"{videos[v]}{SUFFIX}{first_copy + k:06d}" for v, k in zip(tpl.tolist(), (j // len(videos)).tolist())]
    taken = set().union(*(t.done_set for t in tables)) | rejected
    if not taken.isdisjoint(new_ids) or len(set(new_ids)) != len(new_ids):
        raise SystemExit("new video ids collide with the run's")
    new_ids_arr = np.array(new_ids, dtype=object)
    # How much longer each new id is than its original's (the buffer counts the id per row).
    id_growth = np.array([len(v) for v in new_ids], dtype=np.int64) - np.array([len(v) for v in videos])[tpl]
    for t in tables:
        tp = temps[t.id]
        seq = np.nonzero(tp.done[tpl])[0]  # the new videos this stage completes, in order
        if len(seq) == 0:
            continue
        v_of = tpl[seq]
        counts = tp.count[v_of]
        size = tp.bytes[v_of] + id_growth[seq] * counts
        slot = max(t.slots, default=-1) + 1
        shards, a = 0, 0
        # ShardWriter flushes after the video that brings its buffer to max_rows rows or
        # MAX_BUFFER_BYTES bytes: cut the sequence there. Its timed flush (flush_secs) bounds a
        # shard of videos without rows; here max_rows videos do.
        crows, cbytes = np.cumsum(counts), np.cumsum(size)
        while a < len(seq):
            base_r = crows[a - 1] if a else 0
            base_b = cbytes[a - 1] if a else 0
            cut_r = np.searchsorted(crows, base_r + max_rows, side="left")
            cut_b = np.searchsorted(cbytes, base_b + MAX_BUFFER_BYTES, side="left")
            b = min(int(min(cut_r, cut_b)) + 1, len(seq), a + max_rows)
            ids = new_ids_arr[seq[a:b]]
            vs, cs = v_of[a:b], counts[a:b]
            if tp.table is not None and cs.sum() > 0:
                nrows = int(cs.sum())
                idx = np.repeat(tp.start[vs] - np.cumsum(cs) + cs, cs) + np.arange(nrows)
                part = tp.table.take(pa.array(idx))
                col = part.schema.get_field_index("video_id")
                part = part.set_column(col, part.schema.field(col),
                                       pa.array(np.repeat(ids, cs).tolist(), type=part.schema.field(col).type))
            else:
                part = (tp.table.slice(0, 0) if tp.table is not None else
                        pa.table({"video_id": pa.array([], pa.string())}))
            slot = commit_shard(run, t.id, slot, part, ids.tolist(), t.fp) + 1
            shards += 1
            a = b
        summary["shards"][t.id] = shards
    summary["new_videos"] = n_new
    return summary


def table_rows(run, kind, columns):
    """The first stage of `kind`, read as analyze reads it, only `columns`."""
    st = next(s for s in manifest(run)["stages"] if s["type"] == kind)
    return StageTable(run, st, columns)


def status(bin_path, run):
    """`vidcurate status RUN`: its text, and the number of videos it counts pending."""
    rc, out, err, _, _, _ = timed([bin_path, "status", run])
    if rc not in (0, 5):
        raise SystemExit(f"vidcurate status failed (exit {rc}):\n{err or out}")
    pending, header = 0, None
    for line in out.splitlines():
        cols = line.split()
        if "pending" in cols:
            header = cols.index("pending") - len(cols)
        elif header is not None and len(cols) >= -header and cols[header].isdigit():
            pending += int(cols[header])
    return out, pending


# ---------------------------------------------------------------------------------------------
# The DuckDB side (runs as its own process: `analyze.py --duckdb-peer RUN OUT`)

ANALYSES = ["hue_pixels", "hue_regions", "saturation", "value", "position", "area", "aspect_ratio",
            "segments", "shots"]


def duckdb_peer(run, out_dir, by):
    import duckdb

    t0 = time.perf_counter()
    m = manifest(run)
    st = {s["type"]: s for s in reversed(m["stages"])}  # the first stage of each kind
    con = duckdb.connect()
    os.makedirs(out_dir, exist_ok=True)

    def src(kind):
        s = st[kind]
        return f"read_parquet('{os.path.join(run, s['id'])}/*.parquet')", s["fingerprint"]

    ocr, ocr_fp = src("ocr")
    g = f"coalesce(CAST({by} AS VARCHAR), '(null)')"
    regions = f"FROM {ocr} WHERE creator_added AND stage_fingerprint = '{ocr_fp}'"

    def save(name, sql):
        con.execute(f"COPY ({sql}) TO '{os.path.join(out_dir, name)}.csv' (HEADER)")

    # Pixel histograms: the list columns summed element-wise per group, one aggregate per bin.
    for name, col, bins in [("hue_pixels", "hue_hist", 72), ("saturation", "sat_hist", 20), ("value", "val_hist", 20)]:
        sums = ", ".join(f"sum({col}[{i + 1}])::DOUBLE AS b{i}" for i in range(bins))
        save(name, f"SELECT g, CAST(substr(b, 2) AS INTEGER) AS bin, count FROM "
                   f"(UNPIVOT (SELECT {g} AS g, {sums} {regions} GROUP BY 1) ON COLUMNS('^b[0-9]+$') "
                   f"INTO NAME b VALUE count)")
    # Hue with one vote per coloured region (text_s >= MIN_CHROMA = 0.15f32).
    save("hue_regions", f"SELECT {g} AS g, CASE WHEN isnan(text_h) THEN 0 ELSE least(CAST(trunc(greatest(text_h::DOUBLE / 5.0, 0)) AS INTEGER), 71) END AS bin, "
                        f"count(*)::DOUBLE AS count {regions} AND text_s::DOUBLE >= 0.15::FLOAT::DOUBLE GROUP BY ALL")
    # Position on the grid the regions were placed on (the largest cell seen).
    save("position", f"WITH r AS (SELECT {g} AS g, grid_row, grid_col {regions}), "
                     f"grid AS (SELECT greatest(max(grid_col) + 1, 1) AS cols FROM r) "
                     f"SELECT g, (grid_row * cols + grid_col) AS bin, count(*)::DOUBLE AS count FROM r, grid GROUP BY ALL")
    # Area: half-decade bins from 1e-5; aspect ratio split at 2, 5, 10, 15, 20, 30, 50.
    edges = [10.0 ** (-5.0 + 0.5 * i) for i in range(11)]
    area = " ".join(f"WHEN a >= {edges[i]!r} AND a < {edges[i + 1]!r} THEN {i}" for i in range(10))
    save("area", f"SELECT g, bin, count(*)::DOUBLE AS count FROM (SELECT {g} AS g, CASE {area} ELSE 9 END AS bin "
                 f"FROM (SELECT *, CASE WHEN isnan(area_frac::DOUBLE) THEN 1e-5 ELSE greatest(area_frac::DOUBLE, 1e-5) END AS a {regions})) GROUP BY ALL")
    aedges = [0.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0, float("inf")]
    asp = " ".join(f"WHEN aspect_ratio::DOUBLE >= {aedges[i]!r} AND aspect_ratio::DOUBLE < {aedges[i + 1]!r} THEN {i}"
                   for i in range(7))
    save("aspect_ratio", f"SELECT g, bin, count(*)::DOUBLE AS count FROM (SELECT {g} AS g, CASE {asp} "
                         f"ELSE 7 END AS bin {regions}) GROUP BY ALL")
    # Key footage over 8 segments: per video, the share of its sampled frames in each segment
    # with creator-added text; per group, the mean over videos.
    if "frames" in st and "probe" in st:
        frames, frames_fp = src("frames")
        probe, probe_fp = src("probe")
        save("segments", f"""
            WITH wt AS (SELECT DISTINCT video_id, frame_index {regions}),
            d AS (SELECT video_id, video_duration_secs AS d FROM {probe}
                  WHERE stage_fingerprint = '{probe_fp}' AND video_duration_secs > 0),
            f AS (SELECT {g} AS g, f.video_id,
                         least(CAST(trunc(greatest(f.timestamp_secs / d.d * 8.0, 0)) AS INTEGER), 7) AS bin,
                         (wt.video_id IS NOT NULL)::INTEGER AS has
                  FROM {frames} f JOIN d ON f.video_id = d.video_id
                  LEFT JOIN wt ON wt.video_id = f.video_id AND wt.frame_index = f.frame_index
                  WHERE f.stage_fingerprint = '{frames_fp}'),
            pv AS (SELECT g, video_id, bin, sum(has)::DOUBLE / count(*) AS s FROM f GROUP BY ALL)
            SELECT g, bin, avg(s) AS count FROM pv WHERE g IN (SELECT DISTINCT {g} {regions}) GROUP BY ALL""")
    if "shots" in st:
        shots, shots_fp = src("shots")
        save("shots", f"SELECT g, least(greatest(n, 1), 10) - 1 AS bin, count(*)::DOUBLE AS count FROM "
                      f"(SELECT video_id, any_value({g}) AS g, any_value(shots_in_video) AS n FROM {shots} "
                      f"WHERE stage_fingerprint = '{shots_fp}' GROUP BY video_id) GROUP BY ALL")
    n = con.execute(f"SELECT count(*) {regions}").fetchone()[0]
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    print(f"duckdb {duckdb.__version__}: {n} creator-added regions, {threads} threads")
    print(f"in-process: {time.perf_counter() - t0:.4f} s")


def read_counts(path, group_col, bin_col="bin"):
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            out[(row[group_col], int(row[bin_col]))] = float(row["count"])
    return out


def compare(vid_dir, duck_dir):
    """Per analysis: (matches, rows compared, largest difference)."""
    res = {}
    for name in ANALYSES:
        a_path, b_path = os.path.join(vid_dir, f"{name}.csv"), os.path.join(duck_dir, f"{name}.csv")
        if not (os.path.exists(a_path) and os.path.exists(b_path)):
            continue
        a, b = read_counts(a_path, "group"), read_counts(b_path, "g")
        keys = set(a) | set(b)
        diff = max((abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys), default=0.0)
        tol = 1e-9 if name == "segments" else 0.0
        # Bins DuckDB has that analyze lacks (or vice versa) count as mismatches unless both are 0.
        res[name] = (diff <= tol, len(keys), diff)
    return res


# ---------------------------------------------------------------------------------------------

def load():
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def print_table(rows, ratio_label):
    """tool, wall seconds, CPU seconds, seconds after start-up and imports (Python sides), peak RSS."""
    print(f"  {'tool':<36} {'seconds':>8} {'cpu s':>7} {'in-process s':>13} {'peak RSS MiB':>13}")
    for name, r in rows:
        inner = f"{r['inner']:.3f}" if r.get("inner") is not None else "-"
        print(f"  {name:<36} {r['seconds']:>8.3f} {r['cpu']:>7.2f} {inner:>13} {r['rss']:>13.1f}")
    (n0, a), (n1, b) = rows[0], rows[1]
    print(f"  ratio {ratio_label}: {b['seconds'] / a['seconds']:.2f} (seconds, > 1: vidcurate faster), "
          f"{b['rss'] / a['rss']:.2f} (peak RSS, > 1: vidcurate smaller)")
    if b.get("inner") is not None:
        print(f"  ratio without the peer's interpreter start-up and imports: {b['inner'] / a['seconds']:.2f}")


def prepare(a, pipeline, target_kind, what, columns):
    """A genuine run (made now, or a copy of --from-run) grown to a.rows rows of `target_kind`."""
    work = a.work or tempfile.mkdtemp(prefix=f"vidcurate-{what}-bench-", dir="/tmp")
    run = os.path.join(work, "run")
    if os.path.exists(run):
        shutil.rmtree(run)
    if a.from_run:
        shutil.copytree(a.from_run, run, symlinks=True, ignore=shutil.ignore_patterns(".lock"))
        print(f"run: copy of {a.from_run}")
    else:
        make_corpus()
        dt = make_run(a.bin, pipeline, run)
        print(f"run: `vidcurate run {pipeline} --out {run}` in {dt:.1f} s")
    t0 = time.perf_counter()
    s = grow(run, target_kind, a.rows)
    after = table_rows(run, target_kind, columns)
    print(f"grown in {time.perf_counter() - t0:.1f} s: {s['videos_before']} videos ({s['template_videos']} copied, "
          f"rejected ones not) + {s['new_videos']:,} new; {after.id} rows {s['target_rows_before']:,} -> "
          f"{after.rows:,}; new shards per stage: {s['shards']}")
    return work, run, after


def link_copy(src, dst):
    """A copy of run `src` at `dst` that shares its committed shards and frames as hard links
    (they are create-only, never rewritten: the bigger size costs only its new shards on disk);
    every other file copied, the analyses and the lock left out."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d != "analysis"]
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for n in filenames:
            a, b = os.path.join(dirpath, n), os.path.join(dst, rel, n)
            if n == ".lock":
                continue
            if os.path.islink(a):
                os.symlink(os.readlink(a), b)
            elif n.endswith((".parquet", ".jpg")) and not n.startswith("."):
                try:
                    os.link(a, b)
                except OSError:  # another file system
                    shutil.copy2(a, b)
            else:
                shutil.copy2(a, b)


def ocr_rows(run):
    st = next(s for s in manifest(run)["stages"] if s["type"] == "ocr")
    return StageTable(run, st, [], genuine_only=True).rows


def grown_run(a, n, base):
    """work/run-N holding >= n OCR regions: with --reuse one already there as it is, else a
    linked copy of `base` (the previous size's run, or the genuine one) grown to n."""
    run = os.path.join(a.work, f"run-{n}")
    if a.reuse and os.path.exists(os.path.join(run, "manifest.json")):
        have = ocr_rows(run)
        if have >= n:
            print(f"run: {run} reused as it is ({have:,} OCR regions, --reuse)")
            return run, 0.0
        print(f"run: {run} holds {have:,} OCR regions, fewer than {n:,}: grown again")
    if os.path.exists(run):
        shutil.rmtree(run)
    src = base()
    t0 = time.perf_counter()
    link_copy(src, run)
    s = grow(run, "ocr", n)
    dt = time.perf_counter() - t0
    print(f"run: {run}, linked from {src} and grown in {dt:.1f} s: {s['videos_before']:,} videos "
          f"({s['template_videos']} genuine copied, rejected ones not) + {s['new_videos']:,} new; OCR regions "
          f"{s['target_rows_before']:,} -> {ocr_rows(run):,}; new shards per stage: {s['shards']}")
    return run, dt


def bench_size(a, run):
    """One size: both sides timed, their tables compared; the numbers of the growth table."""
    out, pending = status(a.bin, run)
    print(f"vidcurate status ({pending} pending):")
    print("\n".join("  " + l for l in out.strip().splitlines()))
    if pending:
        raise SystemExit(f"{run}: the grown run has pending videos")
    ocr = table_rows(run, "ocr", ["creator_added"])
    added = int(pa.compute.sum(ocr.table.column("creator_added")).as_py())
    vid_dir = os.path.join(run, "analysis", "label")
    shutil.rmtree(vid_dir, ignore_errors=True)
    vid = best_of([a.bin, "analyze", run, "--by", "label"], a.repeat, "vidcurate analyze")
    counted = int(sum(read_counts(os.path.join(vid_dir, "position.csv"), "group").values()))
    print(f"analyze accepted the grown run: {ocr.rows:,} regions in the table, {added:,} creator-added; "
          f"analyze counted {counted:,} -> {'yes' if counted == added else 'NO'}")
    print("\n".join("  " + l for l in vid["stdout"].strip().splitlines()))
    duck_dir = os.path.join(a.work, f"duckdb-{os.path.basename(run)}")
    shutil.rmtree(duck_dir, ignore_errors=True)
    py = READERS_PY if os.path.exists(READERS_PY) else sys.executable
    duck = best_of([py, os.path.abspath(__file__), "--duckdb-peer", run, duck_dir], a.repeat, "duckdb peer")
    print("  " + duck["stdout"].strip())
    res = compare(vid_dir, duck_dir)
    print("same tables (analyze's CSV vs DuckDB's):")
    for name, (ok, n, diff) in res.items():
        print(f"  {name:<13} {'yes' if ok else 'NO ':<4} {n:>4} bins, max |diff| {diff:.3g}")
    same = bool(res) and all(ok for ok, _, _ in res.values()) and counted == added
    print(f"match: {'yes' if same else 'NO'} ({len(res)} of {len(ANALYSES)} tables compared)")
    print(f"analyze over {ocr.rows:,} OCR regions ({added:,} creator-added), best of {a.repeat} ({load()}):")
    print_table([("vidcurate analyze --by label", vid), ("duckdb (same histograms, SQL)", duck)],
                "duckdb / vidcurate")
    return {"rows": ocr.rows, "vid": vid, "peer": duck, "same": same}


def growth_table(sizes, rows_label, peer):
    print("\ngrowth (Markdown):")
    print(f"| {rows_label} | vidcurate s | vidcurate MiB | {peer} s | {peer} MiB | time {peer} / vidcurate "
          f"| RSS vidcurate / {peer} |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        v, p = s["vid"], s["peer"]
        print(f"| {s['rows']:,} | {v['seconds']:.2f} | {v['rss']:.0f} | {p['seconds']:.2f} | {p['rss']:.0f} "
              f"| {p['seconds'] / v['seconds']:.2f} | {v['rss'] / p['rss']:.2f} |")


def growth_plot(sizes, path, rows_label, peer):
    """Wall time and peak RSS against rows, vidcurate and the peer, log-log, as a PNG drawn with
    Pillow (data/venv-readers has no plotting library): drawn at 3x and scaled down to smooth it."""
    import math
    from PIL import Image, ImageDraw, ImageFont
    z, w, h, m = 3, 380, 270, 56
    img = Image.new("RGB", (2 * w * z, h * z), "white")
    d = ImageDraw.Draw(img)
    fonts = [p for p in ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf")
             if os.path.exists(p)]
    font = ImageFont.truetype(fonts[0], 11 * z) if fonts else ImageFont.load_default()
    big = ImageFont.truetype(fonts[0], 13 * z) if fonts else font
    tools = [("vidcurate", "vid", (31, 119, 180)), (peer, "peer", (214, 39, 40))]
    xs = [s["rows"] for s in sizes]
    for k, (title, key) in enumerate([("wall seconds", "seconds"), ("peak RSS MiB", "rss")]):
        ys = [s[t][key] for s in sizes for _, t, _ in tools]
        x0, x1 = math.log10(min(xs)), math.log10(max(xs))
        y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
        px = lambda v: z * (k * w + m + 10 + (math.log10(v) - x0) / (x1 - x0) * (w - 2 * m))
        py = lambda v: z * (h - m - (math.log10(v) - y0) / (y1 - y0) * (h - 1.7 * m))
        d.text((z * (k * w + w / 2), z * 14), title, fill="black", font=big, anchor="mm")
        for e in range(y0, y1 + 1):
            d.line([(z * (k * w + m), py(10 ** e)), (z * ((k + 1) * w - 10), py(10 ** e))], fill=(221, 221, 221), width=z)
            d.text((z * (k * w + m - 6), py(10 ** e)), f"{10 ** e:g}", fill="black", font=font, anchor="rm")
        d.line([(z * (k * w + m), py(10 ** y0)), (z * (k * w + m), py(10 ** y1))], fill="black", width=z)
        for x in xs:
            d.text((px(x), z * (h - m + 12)), f"{x:,}", fill="black", font=font, anchor="mm")
        d.text((z * (k * w + w / 2), z * (h - 16)), rows_label, fill="black", font=font, anchor="mm")
        for j, (name, t, colour) in enumerate(tools):
            pts = [(px(s["rows"]), py(s[t][key])) for s in sizes]
            d.line(pts, fill=colour, width=2 * z)
            for x, y in pts:
                d.ellipse([x - 3 * z, y - 3 * z, x + 3 * z, y + 3 * z], fill=colour)
            d.text((z * (k * w + m + 12), z * (34 + 15 * j)), name, fill=colour, font=font, anchor="lm")
    img.resize((2 * w, h), Image.LANCZOS).save(path)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--rows", default="1000000",
                    help="OCR regions to grow the run to; several, comma-separated, grow it step by step")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side (best wall time)")
    ap.add_argument("--work", help="folder for the runs (default: a new one under /tmp)")
    ap.add_argument("--from-run", help="grow from this genuine run (linked, left unchanged) instead of making one")
    ap.add_argument("--keep", action="store_true", help="leave the runs (with --work they are always left)")
    ap.add_argument("--reuse", action="store_true",
                    help="time the runs a previous --work DIR --keep left (DIR/run-N holding >= N regions) "
                         "instead of growing them again")
    ap.add_argument("--plot", help="write the growth plot here (PNG)")
    ap.add_argument("--duckdb-peer", nargs=2, metavar=("RUN", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.duckdb_peer:
        return duckdb_peer(*a.duckdb_peer, "label")
    counts = sorted({int(r.replace("_", "")) for r in a.rows.split(",")})
    a.bin = os.path.abspath(a.bin)
    check_bin(a.bin)
    if a.reuse and not a.work:
        raise SystemExit("--reuse needs --work DIR (the folder a previous --work DIR --keep left)")
    print(f"vidcurate: {a.bin}; {load()}")
    own_work = not a.work
    a.work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="vidcurate-analyze-bench-", dir="/tmp"))
    os.makedirs(a.work, exist_ok=True)
    prev = []

    def base():
        """The run the next size grows from, made on first need: the previous size's, else the
        genuine one (--from-run, or work/genuine: made, or kept from before with --reuse)."""
        if prev:
            return prev[-1]
        if a.from_run:
            return os.path.abspath(a.from_run)
        genuine = os.path.join(a.work, "genuine")
        if not (a.reuse and os.path.exists(os.path.join(genuine, "manifest.json"))):
            if os.path.exists(genuine):
                shutil.rmtree(genuine)
            make_corpus()
            dt = make_run(a.bin, DEMO_PIPELINE, genuine)
            print(f"genuine run: `vidcurate run {DEMO_PIPELINE} --out {genuine}` in {dt:.1f} s")
        prev.append(genuine)
        return genuine

    try:
        sizes, growing = [], 0.0
        for n in counts:
            print(f"\n=== {n:,} OCR regions")
            run, dt = grown_run(a, n, base)
            growing += dt
            prev.append(run)
            sizes.append(bench_size(a, run))
        if growing:
            print(f"\ngrowing took {growing:.1f} s in all")
        if len(sizes) > 1:
            growth_table(sizes, "OCR regions", "duckdb")
        if a.plot:
            growth_plot(sizes, a.plot, "OCR regions", "duckdb")
        bad = [f"{s['rows']:,}" for s in sizes if not s["same"]]
        print(f"outputs equal at every size: {'yes' if not bad else 'NO (' + ', '.join(bad) + ')'}")
        if bad:
            raise SystemExit("vidcurate analyze and DuckDB disagree")
    finally:
        if a.keep or not own_work:
            print(f"kept: {a.work} (time again with --work {a.work} --reuse)")
        else:
            shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
