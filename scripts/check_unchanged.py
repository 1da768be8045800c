#!/usr/bin/env python3
"""Proves that a vidcurate binary behaves like a recorded baseline (for refactors).

Usage:
  scripts/check_unchanged.py record  --bin PATH --out DIR        # write a baseline
  scripts/check_unchanged.py compare --bin PATH --baseline DIR   # record anew into a temp dir, diff
  scripts/check_unchanged.py diff    DIR_A DIR_B                 # diff two recordings
  scripts/check_unchanged.py tree    RUN_DIR --out DIR           # record one run folder as run/*
                                                                 # (e.g. a questions_demo.py --keep run)

`compare` and `diff` print every difference (a unified diff per item, and items missing on
either side) and exit 1 if there is any; if none, they print one line saying how many items were
compared and exit 0. Run from anywhere: paths are taken relative to the repository root (the
parent of this script's folder), as scripts/demo.sh does.

What is recorded, one deterministic text file per item (the item's name is its path in DIR):

  inputs/*        hashes of the demo corpus and of pipelines/ and queries/: not the binary's
                  behaviour, but a diff here says the *input* changed, not the tool.
  demo/*          the demo chain of scripts/demo.sh into a temp dir: `run pipelines/demo.toml`
                  (exit code, expected 3, and the stderr lines that do not depend on timing),
                  the same run again (a resume that must reuse everything), `run --dry-run`,
                  `analyze --by label`, `split --stratify label`, `release`, and
                  `release --frames bytes`; each with its exit code and normalised stdout/stderr.
  run/*           every file of the run directory after those commands: each Parquet table
                  (a folder of shards, or a single file) as sorted canonical text with its schema
                  and the vidcurate.* footer metadata; JSON, CSV, HTML and Markdown files as
                  normalised text; every binary file (JPEG frames, PNG plots) as a sha256 list
                  sorted by relative path; plus the list of files.
  release/*, release_bytes/*   the same for both release folders.
  validate/*      `validate FILE` for each pipeline and query file, for all pipelines at once,
                  and for broken pipeline files generated into a temp dir (one per kind of
                  mistake tests/config.rs and tests/bad_input.rs cover, and more).
  queries/*       `queries FILE` (text and --json) for every query file, and broken query files.
  help/*          `--help` and `-h` of the top level and of every subcommand, found recursively
                  from the help text itself (the binary is called through a link named
                  `vidcurate`: clap prints argv[0]'s name in `Usage:` lines).
  questions_demo/*, mvfndb_demo/*   scripts/questions_demo.py and mvfndb_demo.py run with the
                  binary to a scored release: their output and every file of both folders
                  (wall times and the corpus line masked). Two things differ between two
                  recordings of one binary: the stand-in's call counts in the question demo
                  (videos asking the same question at once each send it: the base binary
                  gave blind 325 / item_level 106, then 332 / 110, with equal tables),
                  and the card's sha256 in croissant.json (the card names the temp folder,
                  which its recorded text masks).
  misc/*          --version, list-stages, rethreshold, status, cache stats, gc --dry-run, batch status,
                  annotate export, evaluate on the release, ocr on the test fixtures, and the
                  error paths: analyze --where 'bogus', split --stratify nosuchcol, and more.

Normalisation (and why). Values are never dropped silently: everything masked is replaced by a
placeholder so that a value appearing, disappearing or changing its format still shows up.
  * The temp dir of the recording is `<TMP>`, the repository root `<REPO>`: they differ between
    recordings but are not the tool's behaviour.
  * RFC 3339 times (`2026-12-02T05:04:01.123Z`, the log prefix, `rejected_at`, manifest.json's
    `started_at`/`finished_at`) are `<TIME>`; the rethreshold file stamp
    (`rethreshold-20261202T050401.123Z`) is `rethreshold-<STAMP>`.
  * No durations or rates are masked: none of the recorded commands prints one (the run's
    summary is counts only). If one appears after a refactor, that is a change to look at.
  * Shard file numbers (`part-00003`) are `part-<N>` in file listings and in the footer's
    `vidcurate.rejects_file`, the number of shards is not recorded, and the footers'
    `vidcurate.videos`/`rejected`/`reject_rows` are merged over a table's shards: which shard
    holds which video depends on flush timing (`flush_secs`); the rows and their union do not.
    Rows are sorted by their text for the same reason.
  * Per-shard checksums (`vidcurate.data_blake3`) and the commit records of shards
    (`_commits/<table>/part-*.json`) depend on which rows a shard holds: the footers' checksums
    are masked and a table's shard commit records are merged into the union of their videos.
    Checksums of objects holding times (rejects shards, JSON reports) are masked; frames' and
    tables' are kept.
  * Periodic progress lines of `run` ("a log line per stage every 10 s") are dropped: how many
    there are depends on timing. Everything else on stderr is kept.
  * Columns: see TIME_COLUMNS. Columns named like times or paths were checked by recording twice
    with the same binary; only those that differed are masked. Video timestamps (`target_secs`,
    `timestamp_secs`, `start_secs`, `duration_secs`, ...) are deterministic and kept as they are;
    path columns (`path` of source and frames) are kept with <TMP>/<REPO> substituted, because
    they carry real values (the relative frame path holds the stage fingerprint).
  * The response cache (`cache/*.sqlite*`) is not dumped (SQLite pages hold write times); what
    it holds is recorded through `cache stats`.
"""

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent

# Columns whose values differ between two runs of the same binary on the same input (found by
# recording twice). Masked with the time regex, so a change of format or null-ness still shows.
TIME_COLUMNS = {
    "rejected_at": "wall-clock time the reject was written (docs/src/reference/run-directory.md: RFC 3339 UTC time)",
}

# JSON keys (anywhere in a JSON file) that hold wall-clock times.
TIME_KEYS = {"started_at", "finished_at", "created_at", "updated_at"}

TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
STAMP_RE = re.compile(r"rethreshold-\d{8}T\d{6}(?:\.\d+)?Z")
# tempfile.mkdtemp's folders: a prefix, then 8 characters of [a-z0-9_].
DEMO_TMP_RE = re.compile(r"/tmp/[A-Za-z0-9.-]+-[a-z0-9_]{8}(?=[/\"\s]|$)")
LOCAL_PORT_RE = re.compile(r"127\.0\.0\.1:\d+")
SHARD_RE = re.compile(r"part-\d{5}")

BINARY_EXT = {".jpg", ".jpeg", ".png", ".mp4", ".mkv", ".webm", ".bin", ".gif", ".onnx"}
TEXT_EXT = {".json", ".jsonl", ".csv", ".md", ".html", ".txt", ".toml", ".xml", ".svg", ".tsv"}


# ---------------------------------------------------------------------------------------------
# Normalisation


class Norm:
    """Replaces what depends on where and when a recording ran, nothing else."""

    def __init__(self, tmp: Path):
        # Both the path as given and as resolved: the tool may print either.
        self.subs = []
        for p, name in [(tmp, "<TMP>"), (REPO, "<REPO>")]:
            for s in {str(p), str(p.resolve())}:
                self.subs.append((s, name))
        # Longest first, so /tmp/x/run is not half-replaced by a shorter prefix.
        self.subs.sort(key=lambda x: -len(x[0]))

    def paths(self, s: str) -> str:
        for a, b in self.subs:
            s = s.replace(a, b)
        return s

    def text(self, s: str) -> str:
        """Paths, RFC 3339 times and the rethreshold stamp: for all text the tool writes."""
        s = self.paths(s)
        s = TIME_RE.sub("<TIME>", s)
        s = STAMP_RE.sub("rethreshold-<STAMP>", s)
        # A demo's own temp folder and its fake server's port (questions_demo.py --keep RUN).
        s = DEMO_TMP_RE.sub("<DEMO_TMP>", s)
        s = LOCAL_PORT_RE.sub("127.0.0.1:<PORT>", s)
        return s

    def name(self, rel: str) -> str:
        """A file's relative path in a listing: shard numbers and stamps collapsed."""
        return SHARD_RE.sub("part-<N>", STAMP_RE.sub("rethreshold-<STAMP>", rel))


# ---------------------------------------------------------------------------------------------
# Running the binary


def env() -> dict:
    """A fixed environment: no RUST_LOG (default log level), no RUST_BACKTRACE (a backtrace holds
    addresses and module paths, which a refactor changes), no terminal width, UTC."""
    e = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LANG", "LC_ALL", "VIDCURATE_MODELS", "ORT_DYLIB_PATH")}
    e.update({"TZ": "UTC", "NO_COLOR": "1", "LANG": e.get("LANG", "C.UTF-8")})
    return e


class Recorder:
    def __init__(self, binary: Path, out: Path, tmp: Path):
        # clap prints the file name of argv[0] in `Usage:` lines, so the binary is called through
        # a link named `vidcurate`, whatever the file given is called (/tmp/vidcurate-base).
        link = tmp / "bin" / "vidcurate"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(binary.resolve())
        self.bin = str(link)
        self.out = out
        self.tmp = tmp
        self.norm = Norm(tmp)
        self.items = 0

    def write(self, name: str, text: str):
        p = self.out / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if not text.endswith("\n"):
            text += "\n"
        p.write_text(text, encoding="utf-8")
        self.items += 1

    def call(self, args, cwd=REPO, timeout=900):
        r = subprocess.run(
            [self.bin, *args],
            cwd=cwd,
            env=env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def cmd(self, name: str, args, cwd=REPO, log=False, stderr_filter=None):
        """Runs the binary and records `$ args`, the exit code, stdout and stderr, normalised.
        log=True: stderr is a run's log; its periodic progress lines are left out."""
        code, out, err = self.call(args, cwd=cwd)
        if log:
            err = "\n".join(l for l in err.splitlines() if not is_progress(l))
        if stderr_filter:
            err = stderr_filter(err)
        shown = " ".join(self.norm.paths(a) for a in args)
        self.write(
            name,
            f"$ vidcurate {shown}\nexit: {code}\n--- stdout\n{self.norm.text(out)}\n--- stderr\n{self.norm.text(err)}",
        )
        return code, out, err


def is_progress(line: str) -> bool:
    """The periodic per-stage progress lines of a run without a terminal (one per stage every
    10 s, src/runtime/progress.rs `Progress.`): how many there are depends on how long it takes."""
    return " Progress. " in f"{line} "


# ---------------------------------------------------------------------------------------------
# Canonical dumps of files


def cell(v, norm: Norm, mask_time: bool) -> str:
    """One value as stable text: JSON-like, floats by repr (exact, shortest round trip)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        s = norm.paths(v)
        if mask_time:
            s = TIME_RE.sub("<TIME>", s)
        return json.dumps(s, ensure_ascii=False)
    if isinstance(v, (bytes, bytearray)):
        return f"<bytes {len(v)} sha256:{hashlib.sha256(v).hexdigest()}>"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {cell(x, norm, mask_time)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(cell(x, norm, mask_time) for x in v) + "]"
    return json.dumps(norm.text(str(v)))  # dates, decimals: their str is stable


def dump_parquet(files, norm: Norm) -> str:
    """One table (the shards of a folder, or a single file) as canonical text: the schema, the
    footer's vidcurate.* keys merged over shards, and the rows sorted by their text."""
    schemas, rows, meta = set(), [], {}
    for f in files:
        pf = pq.ParquetFile(f)
        t = pf.read()
        schemas.add(str(t.schema.remove_metadata()))
        for k, v in (pf.metadata.metadata or {}).items():
            k = k.decode()
            if k.startswith("vidcurate."):
                meta.setdefault(k, []).append(v.decode())
        names = t.schema.names
        for r in t.to_pylist():
            rows.append("\t".join(f"{c}={cell(r[c], norm, c in TIME_COLUMNS)}" for c in names))
    rows.sort()
    # Not the number of shards: it depends on flush timing (flush_secs), the rows do not.
    out = ["schema:"] + [f"  {l}" for s in sorted(schemas) for l in s.splitlines()]
    out += ["footer (vidcurate.* keys, merged over shards):"] + footer_lines(meta, norm)
    out += [f"rows: {len(rows)}"] + rows
    return "\n".join(out)


def footer_lines(meta: dict, norm: Norm):
    """Shard footers say which videos a shard completes and rejects. Which shard holds which
    video depends on timing, so the lists are merged (union, sorted) over the table's shards;
    the rejects file name has its shard number collapsed."""
    lines = []
    for k in sorted(meta):
        vals = meta[k]
        merged = []
        for v in vals:
            try:
                j = json.loads(v)
            except ValueError:
                j = v
            if k == "vidcurate.data_blake3":
                # A checksum of one shard's rows: which rows a shard holds depends on timing.
                merged.append("<per-shard checksums>")
            elif k == "vidcurate.objects" and isinstance(j, dict):
                merged.append(json.dumps(timed_object(j), sort_keys=True))
            elif k == "vidcurate.reject_rows" and isinstance(j, dict):
                merged += reject_rows(j)
            elif isinstance(j, list):
                merged += [json.dumps(timed_object(x) if isinstance(x, dict) else x, sort_keys=True)
                           if not isinstance(x, str) else x for x in j]
            else:
                merged.append(norm.name(j if isinstance(j, str) else json.dumps(j, sort_keys=True)))
        merged = sorted(set(TIME_RE.sub("<TIME>", norm.paths(m)) for m in merged))
        lines.append(f"  {k}: {merged}")
    return lines


def timed_object(o: dict) -> dict:
    """An object a commit or footer records (path, size, blake3): a rejects shard and a JSON
    report hold their own times, so their checksum is masked; frames and tables keep theirs."""
    path = o.get("path", "")
    if isinstance(path, str) and (path.startswith("rejects/") or path.endswith(".json")) and "blake3" in o:
        # Its shard number depends on timing too, as in file listings.
        return {**o, "blake3": "<checksum of timed bytes>", "path": re.sub(r"part-\d+", "part-<N>", path)}
    return o


def commit_record(j: dict, norm: "Norm") -> dict:
    """A `_commits/` record with its timed objects' checksums masked."""
    out = dict(j)
    if isinstance(out.get("object"), dict):
        out["object"] = timed_object(out["object"])
    for k, v in list(out.items()):
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            out[k] = [timed_object(x) for x in v]
    return out


def reject_rows(j: dict):
    """A shard's `vidcurate.reject_rows` ({ids, extras, extra, rows}) as one entry per reject, so
    that the same rejects spread over shards differently merge to the same list."""
    try:
        return [
            json.dumps({"id": i, "extra": dict(zip(j["extras"], x)), **r}, sort_keys=True, ensure_ascii=False)
            for i, x, r in zip(j["ids"], j["extra"], j["rows"], strict=True)
        ]
    except (KeyError, TypeError, ValueError):
        return [json.dumps(j, sort_keys=True, ensure_ascii=False)]  # another layout: as it is


def canon_json(v, norm: Norm, key=None):
    if isinstance(v, dict):
        return {k: canon_json(x, norm, k) for k, x in v.items()}
    if isinstance(v, list):
        return [canon_json(x, norm) for x in v]
    if isinstance(v, str):
        if key in TIME_KEYS:
            return TIME_RE.sub("<TIME>", v)
        return norm.text(v)
    return v


def dump_text_file(p: Path, norm: Norm) -> str:
    raw = p.read_text(encoding="utf-8", errors="replace")
    if p.suffix == ".json":
        try:
            return json.dumps(canon_json(json.loads(raw), norm), indent=1, ensure_ascii=False)
        except ValueError:
            pass
    return norm.text(raw)


def dump_tree(rec: Recorder, root: Path, prefix: str):
    """Every file under root: Parquet tables, text files, and a hash list of binary files."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    rel = lambda p: p.relative_to(root).as_posix()
    rec.write(f"{prefix}/files.txt", "\n".join(sorted({rec.norm.name(rel(p)) for p in files})))
    # Parquet: a folder of shards is one table; other Parquet files are tables of their own.
    tables = {}
    for p in files:
        if p.suffix != ".parquet" or p.name.startswith("."):
            continue
        r = rel(p)
        if "part-" in p.name:
            tables.setdefault(rel(p.parent), []).append(p)
        else:
            tables[rec.norm.name(r)] = [p]
    for name, fs in sorted(tables.items()):
        rec.write(f"{prefix}/tables/{name.replace('/', '__')}.txt", dump_parquet(fs, rec.norm))
    hashes = []
    # Commit records of shards: which videos a shard commits depends on timing, so a table's
    # records are merged into the union of their videos (the rest of each record, sizes and
    # checksums of one shard, is the shard's and is left out).
    shard_commits = {}
    for p in files:
        r = rel(p)
        if p.suffix == ".parquet" or p.name.startswith(".") or "/cache/" in f"/{r}":
            continue
        if r.startswith("_commits/") and "part-" in p.name and p.suffix == ".json":
            j = json.loads(p.read_text())
            table = rel(p.parent)
            shard_commits.setdefault(table, set()).update(
                norm_v for norm_v in (rec.norm.text(v) for v in j.get("videos", [])))
            continue
        if r.startswith("_commits/") and p.suffix == ".json":
            j = commit_record(json.loads(p.read_text()), rec.norm)
            text = json.dumps(canon_json(j, rec.norm), indent=1, ensure_ascii=False)
            rec.write(f"{prefix}/text/{rec.norm.name(r).replace('/', '__')}", text)
            continue
        if p.suffix in TEXT_EXT:
            rec.write(f"{prefix}/text/{rec.norm.name(r).replace('/', '__')}", dump_text_file(p, rec.norm))
        else:
            hashes.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {rec.norm.name(r)}")
    for table, videos in sorted(shard_commits.items()):
        rec.write(f"{prefix}/text/{table.replace('/', '__')}__shard_commits.txt",
                  "videos committed (all shards): " + ", ".join(sorted(videos)))
    rec.write(f"{prefix}/binary_sha256.txt", "\n".join(sorted(hashes, key=lambda l: l.split("  ", 1)[1])))


def hash_tree(root: Path, skip=lambda r: False) -> str:
    lines = []
    for p in sorted(root.rglob("*")):
        r = p.relative_to(root).as_posix()
        if p.is_file() and not skip(r):
            lines.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {r}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Broken inputs for validate / queries

HEAD = 'name = "t"\n[source]\ntype = "local"\ndir = "v"\n'
PROBE = '[[stages]]\nid = "probe"\ntype = "probe"\n'
FRAMES = '[[stages]]\nid = "frames"\ntype = "frames"\n'
GOOD_QUERIES = (REPO / "queries" / "protest.toml").read_text() if (REPO / "queries" / "protest.toml").exists() else ""

# name -> pipeline text. Each is one mistake; the expected kind of message is in the name.
BROKEN_PIPELINES = {
    "unknown_key_in_compute": f'{HEAD}\n{PROBE}\n{FRAMES}[stages.compute]\nmode = "uniform"\ncuont = 16\n',
    "wrong_type": f'{HEAD}\n{PROBE}\n{FRAMES}compute = {{ count = "sixteen" }}\n',
    "negative_count": f"{HEAD}\n{PROBE}\n{FRAMES}compute = {{ count = -1 }}\n",
    "jpeg_quality_out_of_range": f"{HEAD}\n{PROBE}\n{FRAMES}compute = {{ count = 4, jpeg_quality = 101 }}\n",
    "unknown_frames_mode": f'{HEAD}\n{PROBE}\n{FRAMES}compute = {{ mode = "random" }}\n',
    "unknown_service_api": f'{HEAD}\n[services.llm]\nbase_url = "http://127.0.0.1:9/v1/"\napi = "claude"\n',
    "batch_mode_typo": f'{HEAD}\n[services.llm]\nbase_url = "http://127.0.0.1:9/v1/"\nmode = "bach"\n'
    '[[stages]]\nid = "relevance"\ntype = "relevance"\ncompute = { service = "llm", model = "m", event = "e" }\n',
    "batch_max_requests_zero": f'{HEAD}\n[services.llm]\nbase_url = "http://127.0.0.1:9/v1/"\nmode = "batch"\nbatch_max_requests = 0\n'
    '[[stages]]\nid = "relevance"\ntype = "relevance"\ncompute = { service = "llm", model = "m", event = "e" }\n',
    "unknown_service_reference": f'{HEAD}[[stages]]\nid = "relevance"\ntype = "relevance"\n'
    'compute = { service = "nosuch", model = "m", event = "e" }\n',
    "secret_in_file": f'{HEAD}\n[services.llm]\nbase_url = "http://127.0.0.1:9/v1/"\napi_key = "sk-123"\n',
    "top_level_unknown_key": f"{HEAD}\n[output]\nflush_sec = 3\n",
    "missing_name": '[source]\ntype = "local"\ndir = "v"\n',
    "missing_stage_id": f'{HEAD}[[stages]]\ntype = "probe"\n',
    "missing_stage_type": f'{HEAD}[[stages]]\nid = "probe"\n',
    "stage_order_requires": f"{HEAD}{FRAMES}",
    "stage_order_ocr_before_frames": f'{HEAD}{PROBE}[[stages]]\nid = "ocr"\ntype = "ocr"\n{FRAMES}',
    "unknown_stage_type": f'{HEAD}[[stages]]\nid = "x"\ntype = "teleport"\n',
    "duplicate_id": f'{HEAD}[[stages]]\nid = "p"\ntype = "probe"\n[[stages]]\nid = "p"\ntype = "probe"\n',
    "id_not_snake_case": f'{HEAD}[[stages]]\nid = "Probe-1"\ntype = "probe"\n',
    "select_on_stage_without_select": f'{HEAD}[[stages]]\nid = "p"\ntype = "probe"\nselect = {{ min = 1 }}\n',
    "bad_select_threshold_range": f'{HEAD}[[stages]]\nid = "relevance"\ntype = "relevance"\n'
    'compute = { service = "local", queries = "q.toml" }\nselect = { min_score = 11 }\n',
    "bad_select_threshold_type": f'{HEAD}[[stages]]\nid = "relevance"\ntype = "relevance"\n'
    'compute = { service = "local", queries = "q.toml" }\nselect = { min_score = "high" }\n',
    "bad_select_key": f'{HEAD}[[stages]]\nid = "relevance"\ntype = "relevance"\n'
    'compute = { service = "local", queries = "q.toml" }\nselect = { min_scor = 9 }\n',
    "prescreen_min_twos_too_high": f'{HEAD}{PROBE}{FRAMES}[[stages]]\nid = "ocr"\ntype = "ocr"\n'
    '[[stages]]\nid = "shots"\ntype = "shots"\n[[stages]]\nid = "prescreen"\ntype = "prescreen"\nselect = { min_twos = 13 }\n',
    "source_without_dir_or_manifest": 'name = "t"\n[source]\ntype = "local"\n',
    "source_dir_and_manifest": 'name = "t"\n[source]\ntype = "local"\ndir = "v"\nmanifest = "m.csv"\n',
    "unknown_source_type": 'name = "t"\n[source]\ntype = "ftp"\ndir = "v"\n',
    "missing_source_dir": 'name = "t"\n[source]\ntype = "local"\ndir = "nonexistent"\n',
    "missing_manifest_file": 'name = "t"\n[source]\ntype = "local"\nmanifest = "nope.csv"\n',
    "manifest_column_named_like_stage_column": 'name = "t"\n[source]\ntype = "local"\nmanifest = "m.csv"\n' + PROBE,
    "missing_query_file": f'{HEAD}[[stages]]\nid = "relevance"\ntype = "relevance"\ncompute = {{ service = "local", queries = "missing.toml" }}\n',
    "bad_query_file": f'{HEAD}[[stages]]\nid = "relevance"\ntype = "relevance"\ncompute = {{ service = "local", queries = "bad-q.toml" }}\n',
    "youtube_source_without_queries": 'name = "t"\n[source]\ntype = "youtube"\n',
    "bad_toml_syntax": 'name = "t\n[source]\ntype = "local"\ndir = "v"\n',
    "bad_toml_duplicate_key": 'name = "t"\nname = "u"\n[source]\ntype = "local"\ndir = "v"\n',
    "empty_file": "",
    "runtime_zero_threads": f"{HEAD}[runtime]\ncpu_threads = 0\n{PROBE}",
}

# name -> query file text, for `queries FILE` and `validate FILE`.
BROKEN_QUERIES = {
    "unknown_key": GOOD_QUERIES + "\nbogus = 1\n",
    "bad_toml_syntax": "domain = \n",
    "template_unknown_placeholder": 'domain = "x"\nkind = "micro"\n[event]\nname = "e"\n[[groups]]\nname = "g"\n'
    'template = "{actor} {nope}"\ncross = { actor = ["a"] }\n',
    "empty_cross": 'domain = "x"\nkind = "micro"\n[event]\nname = "e"\n[[groups]]\nname = "g"\n'
    'template = "{actor}"\ncross = { actor = [] }\n',
    "missing_event": 'domain = "x"\nkind = "micro"\n[[groups]]\nname = "g"\ntemplate = "{a}"\ncross = { a = ["x"] }\n',
    "bad_kind": 'domain = "x"\nkind = "nano"\n[event]\nname = "e"\n[[groups]]\nname = "g"\ntemplate = "{a}"\ncross = { a = ["x"] }\n',
    "missing_groups": 'domain = "x"\nkind = "micro"\n[event]\nname = "e"\n',
    "empty_file": "",
}


def record_validate(rec: Recorder):
    for f in sorted((REPO / "pipelines").glob("*")) + sorted((REPO / "queries").glob("*")):
        rel = f.relative_to(REPO).as_posix()
        rec.cmd(f"validate/shipped__{rel.replace('/', '__')}.txt", ["validate", rel])
    rec.cmd("validate/shipped__all_pipelines.txt",
            ["validate", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "pipelines").glob("*.toml"))])
    # Broken pipeline files, each in a folder of its own with what the good parts point at (a
    # video folder, a manifest, a query file), run with that folder as cwd as tests/config.rs
    # does, so messages show the relative file name.
    for name, text in BROKEN_PIPELINES.items():
        d = rec.tmp / "validate" / name
        (d / "v").mkdir(parents=True)
        (d / "v" / "a.mp4").write_text("not read")
        (d / "m.csv").write_text("path,label,width\nv/a.mp4,fake,640\n")
        (d / "q.toml").write_text(GOOD_QUERIES)
        (d / "bad-q.toml").write_text(BROKEN_QUERIES["unknown_key"])
        (d / "bad.toml").write_text(text)
        rec.cmd(f"validate/broken__{name}.txt", ["validate", "bad.toml"], cwd=d)
    # One absolute path, to see how the file name is printed then.
    d = rec.tmp / "validate" / "duplicate_id"
    rec.cmd("validate/broken__absolute_path.txt", ["validate", str(d / "bad.toml")])
    rec.cmd("validate/missing_file.txt", ["validate", "no/such/file.toml"])
    rec.cmd("validate/no_arguments.txt", ["validate"])


def record_queries(rec: Recorder):
    qs = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "queries").glob("*.toml"))
    rec.cmd("queries/all.txt", ["queries", *qs])
    for q in qs:
        n = Path(q).stem
        rec.cmd(f"queries/{n}.txt", ["queries", q])
        rec.cmd(f"queries/{n}.json.txt", ["queries", "--json", q])
    d = rec.tmp / "queries"
    d.mkdir()
    for name, text in BROKEN_QUERIES.items():
        (d / f"{name}.toml").write_text(text)
        rec.cmd(f"queries/broken__{name}.txt", ["queries", f"{name}.toml"], cwd=d)
    rec.cmd("queries/missing_file.txt", ["queries", "no/such.toml"])


# ---------------------------------------------------------------------------------------------
# --help, recursively


def subcommands(help_text: str):
    """Names in the `Commands:` section of clap's help (the `help` pseudo-command aside)."""
    names, inside = [], False
    for line in help_text.splitlines():
        if line.strip() == "Commands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)", line)
            if m:
                if m.group(1) != "help":
                    names.append(m.group(1))
            elif line and not line.startswith(" "):
                inside = False
    return names


def record_help(rec: Recorder, path=()):
    name = "__".join(path) or "top"
    _, out, _ = rec.cmd(f"help/{name}.txt", [*path, "--help"])
    rec.cmd(f"help/{name}.short.txt", [*path, "-h"])
    for sub in subcommands(out):
        record_help(rec, (*path, sub))


# ---------------------------------------------------------------------------------------------
# The demo chain and the commands that read its run


def record_demo(rec: Recorder):
    # The corpus (scripts/demo.sh's step; idempotent: an up-to-date corpus is left alone).
    subprocess.run([sys.executable, "scripts/make_demo_corpus.py", "data/demo"], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    corpus = REPO / "data" / "demo"
    rec.write("inputs/corpus_sha256.txt", hash_tree(corpus, skip=lambda r: r.startswith(".")))
    rec.write("inputs/pipelines_queries_sha256.txt",
              hash_tree(REPO / "pipelines") + "\n" + hash_tree(REPO / "queries"))

    run, release = rec.tmp / "run", rec.tmp / "release"
    code, _, _ = rec.cmd("demo/01_run.txt", ["run", "pipelines/demo.toml", "--out", str(run)], log=True)
    if code not in (0, 3):
        print(f"check_unchanged: the demo run exited {code} (see demo/01_run.txt)", file=sys.stderr)
    rec.cmd("demo/02_run_again.txt", ["run", "pipelines/demo.toml", "--out", str(run)], log=True)
    rec.cmd("demo/03_dry_run.txt", ["run", "pipelines/demo.toml", "--out", str(run), "--dry-run"], log=True)
    rec.cmd("demo/04_analyze.txt", ["analyze", str(run), "--by", "label"])
    rec.cmd("demo/05_split.txt", ["split", str(run), "--stratify", "label"])
    rec.cmd("demo/06_release.txt", ["release", str(run), "--out", str(release)])
    rec.cmd("demo/07_release_bytes.txt",
            ["release", str(run), "--out", str(rec.tmp / "release_bytes"), "--frames", "bytes"])

    # Item 4 of the brief and more commands that read the run (after the release, so the
    # release above is exactly demo.sh's).
    m = "misc"
    rec.cmd(f"{m}/list_stages.txt", ["list-stages"])
    rec.cmd(f"{m}/version.txt", ["--version"])
    rec.cmd(f"{m}/rethreshold_min_score_5.txt", ["rethreshold", str(run), "--set", "relevance.min_score=5"])
    rec.cmd(f"{m}/rethreshold_unknown_stage.txt", ["rethreshold", str(run), "--set", "nosuch.min_score=5"])
    rec.cmd(f"{m}/rethreshold_bad_syntax.txt", ["rethreshold", str(run), "--set", "relevance"])
    rec.cmd(f"{m}/status.txt", ["status", str(run)])
    rec.cmd(f"{m}/cache_stats.txt", ["cache", "stats", str(run)])
    rec.cmd(f"{m}/batch_status.txt", ["batch", "status", str(run)])
    rec.cmd(f"{m}/gc_dry_run.txt", ["gc", str(run), "--dry-run", "--older-than", "30m"])
    rec.cmd(f"{m}/analyze_bad_where.txt", ["analyze", str(run), "--by", "label", "--where", "bogus"])
    rec.cmd(f"{m}/analyze_where_unknown_column.txt",
            ["analyze", str(run), "--by", "label", "--where", "nosuch = 1", "--out", str(rec.tmp / "a-bad")])
    rec.cmd(f"{m}/analyze_where_text_len.txt",
            ["analyze", str(run), "--by", "label", "--where", "text_len >= 10", "--out", str(rec.tmp / "analysis_where")])
    rec.cmd(f"{m}/analyze_by_unknown_column.txt", ["analyze", str(run), "--by", "nosuchcol", "--out", str(rec.tmp / "a-bad2")])
    rec.cmd(f"{m}/split_bad_stratify.txt", ["split", str(run), "--stratify", "nosuchcol"])
    rec.cmd(f"{m}/split_seed_7_two_way.txt",
            ["split", str(run), "--ratios", "80/20", "--names", "train,test", "--stratify", "label", "--seed", "7", "--name", "two-way"])
    rec.cmd(f"{m}/split_bad_ratios.txt", ["split", str(run), "--ratios", "70/10"])
    rec.cmd(f"{m}/release_unknown_split.txt", ["release", str(run), "--out", str(rec.tmp / "r-bad"), "--split", "nosuch"])
    rec.cmd(f"{m}/status_not_a_run.txt", ["status", str(rec.tmp / "nothing-here")])
    rec.cmd(f"{m}/annotate_export.txt",
            ["annotate", "export", str(run), "--out", str(rec.tmp / "annot"), "--media-url", "http://media.invalid:8000"])
    # evaluate: predictions that say "fake" for every video of the release, as CSV.
    preds = rec.tmp / "preds.csv"
    ids = []
    for f in sorted((release / "data").glob("*.parquet")):
        ids += pq.read_table(f, columns=["video_id"]).column("video_id").to_pylist()
    preds.write_text("video_id,prediction\n" + "".join(f"{i},fake\n" for i in sorted(ids)))
    rec.cmd(f"{m}/evaluate.txt", ["evaluate", str(release), str(preds), "--positive", "fake", "--by", "label"])
    rec.cmd(f"{m}/evaluate_json.txt", ["evaluate", str(release), str(preds), "--positive", "fake", "--json"])
    bad = rec.tmp / "preds-bad.csv"
    bad.write_text("video_id,prediction\nnosuch,fake\n")
    rec.cmd(f"{m}/evaluate_unknown_id.txt", ["evaluate", str(release), str(bad), "--positive", "fake"])
    rec.cmd(f"{m}/evaluate_unknown_positive.txt", ["evaluate", str(release), str(preds)])
    ocr = sorted((REPO / "tests/fixtures/ocr").glob("*.jpg"))
    rec.cmd(f"{m}/ocr_fixtures.txt", ["ocr", "--threads", "1", *(p.relative_to(REPO).as_posix() for p in ocr)])
    rec.cmd(f"{m}/ocr_no_det.txt", ["ocr", "--threads", "1", "--no-det", "tests/fixtures/ocr/en_rec.jpg"])
    rec.cmd(f"{m}/ocr_not_an_image.txt", ["ocr", "--threads", "1", "README.md"])

    dump_tree(rec, run, "run")
    dump_tree(rec, release, "release")
    dump_tree(rec, rec.tmp / "release_bytes", "release_bytes")
    dump_tree(rec, rec.tmp / "annot", "annot")
    dump_tree(rec, rec.tmp / "analysis_where", "analysis_where")


# ---------------------------------------------------------------------------------------------
# record / diff / compare


def record_other_demos(rec: Recorder):
    """The question demo and the MVFNDB demo (scripts/questions_demo.py, mvfndb_demo.py), each
    run to a scored release with this binary: their printed tables, and every file of their
    run and release folders, normalised as the demo's are."""
    for name in ("questions_demo", "mvfndb_demo"):
        run, rel = rec.tmp / name / "run", rec.tmp / name / "release"
        r = subprocess.run(
            [sys.executable, str(REPO / "scripts" / f"{name}.py"), "--bin", rec.bin,
             "--keep", str(run), "--release", str(rel)],
            cwd=REPO, env=env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=1800,
        )
        out = r.stdout.decode("utf-8", "replace")
        # The demos print their wall time and whether the corpus had to be made: not the binary's.
        out = re.sub(r"\b\d+\.\d s, exit", "<SECS> s, exit", out)
        out = re.sub(r"(?m)^corpus: .*$", "corpus: <MADE OR UP TO DATE>", out)
        err = "\n".join(l for l in r.stderr.decode("utf-8", "replace").splitlines() if not is_progress(l))
        rec.write(f"{name}/output.txt",
                  f"exit: {r.returncode}\n--- stdout\n{rec.norm.text(out)}\n--- stderr\n{rec.norm.text(err)}")
        for folder, prefix in ((run, "run"), (rel, "release")):
            if folder.exists():
                dump_tree(rec, folder, f"{name}/{prefix}")


def record(binary: Path, out: Path):
    if out.exists() and any(out.iterdir()):
        sys.exit(f"check_unchanged: {out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="vidcurate-check-"))
    try:
        rec = Recorder(binary, out, tmp)
        record_help(rec)
        record_validate(rec)
        record_queries(rec)
        record_demo(rec)
        record_other_demos(rec)
        rec.write("README.txt", f"Recorded by scripts/check_unchanged.py: {rec.items} items.\n"
                  "Columns masked as times: " + ", ".join(sorted(TIME_COLUMNS)))
        return rec.items
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def diff(a: Path, b: Path) -> int:
    fa = {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
    fb = {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()}
    ndiff = 0
    for n in sorted(fa - fb):
        print(f"only in {a}: {n}")
        ndiff += 1
    for n in sorted(fb - fa):
        print(f"only in {b}: {n}")
        ndiff += 1
    for n in sorted(fa & fb):
        ta = (a / n).read_text(encoding="utf-8").splitlines(keepends=True)
        tb = (b / n).read_text(encoding="utf-8").splitlines(keepends=True)
        if ta != tb:
            ndiff += 1
            sys.stdout.writelines(difflib.unified_diff(ta, tb, f"baseline/{n}", f"new/{n}"))
    n = len(fa & fb)
    if ndiff:
        print(f"check_unchanged: {ndiff} of {len(fa | fb)} items differ")
        return 1
    print(f"check_unchanged: identical: {n} items compared")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record a baseline")
    r.add_argument("--bin", required=True, type=Path)
    r.add_argument("--out", required=True, type=Path)
    c = sub.add_parser("compare", help="record with BIN into a temp dir and diff with BASELINE")
    c.add_argument("--bin", required=True, type=Path)
    c.add_argument("--baseline", required=True, type=Path)
    c.add_argument("--keep", type=Path, help="record into this folder instead of a temp dir")
    t = sub.add_parser("tree", help="record the files of one run folder (tables, texts, hashes)")
    t.add_argument("run", type=Path)
    t.add_argument("--out", required=True, type=Path)
    d = sub.add_parser("diff", help="diff two recordings")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        n = record(args.bin, args.out)
        print(f"check_unchanged: recorded {n} items into {args.out}")
    elif args.cmd == "tree":
        if args.out.exists() and any(args.out.iterdir()):
            sys.exit(f"check_unchanged: {args.out} exists and is not empty")
        tmp = Path(tempfile.mkdtemp(prefix="vidcurate-tree-"))
        try:
            # No binary is run: the recorder only normalises and writes (its paths are the run's).
            rec = Recorder(Path(sys.executable), args.out, tmp)
            rec.norm = Norm(args.run)
            dump_tree(rec, args.run, "run")
            print(f"check_unchanged: recorded {rec.items} items of {args.run} into {args.out}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    elif args.cmd == "diff":
        sys.exit(diff(args.a, args.b))
    else:
        if not args.baseline.is_dir():
            sys.exit(f"check_unchanged: no baseline at {args.baseline}")
        new = args.keep or Path(tempfile.mkdtemp(prefix="vidcurate-compare-")) / "new"
        try:
            record(args.bin, new)
            sys.exit(diff(args.baseline, new))
        finally:
            if not args.keep:
                shutil.rmtree(new.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
