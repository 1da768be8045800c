//! Helpers: the binary, ffmpeg-made media with exact ground truth, and table reading.

#![allow(dead_code)]

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vidcurate"))
}

/// Recorded bodies and media from third parties, in the repository (see tests/fixtures/README.md).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The real fixture videos.
pub fn fixture_video(name: &str) -> PathBuf {
    let p = fixtures().join("video").join(name);
    assert!(p.exists(), "fixture {} missing", p.display());
    p
}

/// Runs scripts/make_demo_corpus.py into `dest` with `args` (profile, clips, seconds, seed).
pub fn make_corpus(dest: &Path, args: &[&str]) {
    let made = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/make_demo_corpus.py"))
        .arg(dest)
        .args(args)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "corpus generator: {}",
        String::from_utf8_lossy(&made.stderr)
    );
}

/// `pipeline(...)` followed by extra `[[stages]]` given as (id, type) pairs.
pub fn pipeline_with(source: &str, frames_compute: &str, stages: &[(&str, &str)]) -> String {
    let mut s = pipeline(source, frames_compute, "");
    for (id, kind) in stages {
        s += &format!("\n[[stages]]\nid = \"{id}\"\ntype = \"{kind}\"\n");
    }
    s
}

/// A port nothing listens on now (for a server a test starts on 127.0.0.1).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn has_ffmpeg() -> bool {
    Command::new("ffmpeg")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The tests that make media need the ffmpeg CLI: without it they fail, unless
/// `VIDCURATE_TESTS_WITHOUT_FFMPEG=1` says to skip them (with a note).
#[macro_export]
macro_rules! need_ffmpeg {
    () => {
        if !$crate::util::has_ffmpeg() {
            if std::env::var_os("VIDCURATE_TESTS_WITHOUT_FFMPEG").is_some_and(|v| v == "1") {
                eprintln!("skipped: ffmpeg CLI not installed (VIDCURATE_TESTS_WITHOUT_FFMPEG=1)");
                return;
            }
            panic!(
                "the ffmpeg CLI is not installed: run scripts/setup.sh, or set VIDCURATE_TESTS_WITHOUT_FFMPEG=1 to skip the tests that need it"
            );
        }
    };
}

pub fn ffmpeg(args: &[&str]) {
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ffmpeg {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A clip whose frame N shows luma 16 + 6·(N mod 32) on its left half and 16 + 6·⌊N/32⌋ on the right,
/// H.264 lossless with B-frames and a GOP of `gop`, 25 fps: any decoded frame names its number.
pub fn numbered_clip(path: &Path, secs: f64, gop: u32) {
    let src = format!(
        "color=c=black:s=128x72:r=25:d={secs},format=yuv420p,geq=lum='16+6*if(lt(X\\,W/2)\\,mod(N\\,32)\\,floor(N/32))':cb=128:cr=128"
    );
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        &src,
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-qp",
        "0",
        "-bf",
        "2",
        "-g",
        &gop.to_string(),
        "-pix_fmt",
        "yuv420p",
        path.to_str().unwrap(),
    ]);
}

/// The frame number a JPEG of `numbered_clip` shows.
pub fn frame_number(jpeg: &Path) -> u32 {
    let img = image::open(jpeg).unwrap().to_luma8();
    let (w, h) = img.dimensions();
    let mean = |x0: u32, x1: u32| {
        let mut s = 0f64;
        let mut n = 0f64;
        for y in h / 4..3 * h / 4 {
            for x in x0..x1 {
                s += img.get_pixel(x, y).0[0] as f64;
                n += 1.0;
            }
        }
        s / n
    };
    // Limited-range luma: decoding to RGB maps Y to (Y - 16)·255/219.
    let step = 6.0 * 255.0 / 219.0;
    let lo = (mean(w / 8, 3 * w / 8) / step).round() as u32;
    let hi = (mean(5 * w / 8, 7 * w / 8) / step).round() as u32;
    hi * 32 + lo
}

/// A testsrc2 clip with audio.
pub fn plain_clip(path: &Path, secs: f64, size: &str) {
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        &format!("testsrc2=s={size}:r=25:d={secs}"),
        "-f",
        "lavfi",
        "-i",
        &format!("sine=d={secs}"),
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-g",
        "50",
        "-c:a",
        "aac",
        "-shortest",
        path.to_str().unwrap(),
    ]);
}

/// `n` clips `dir/v/c{i}.mp4` of 64x36, 0.6 s and 0.2 s longer each (so no two are alike).
pub fn small_clips(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir.join("v")).unwrap();
    for i in 0..n {
        let path = dir.join(format!("v/c{i}.mp4"));
        plain_clip(&path, 0.6 + 0.2 * i as f64, "64x36");
    }
}

pub fn run(args: &[&str], cwd: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// `vidcurate run P --out OUT -q`, not yet started.
pub fn run_command(p: &Path, out: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args([
        "run",
        p.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ])
    .env("RUST_LOG", "warn");
    c
}

/// Runs pipeline `p` into run directory `out`.
pub fn run_into(p: &Path, out: &Path, cwd: &Path) -> Output {
    run_command(p, out).current_dir(cwd).output().unwrap()
}

pub fn write(path: &Path, text: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// A pipeline over a folder or manifest with probe and frames (given compute table).
pub fn pipeline(source: &str, frames_compute: &str, extra: &str) -> String {
    format!(
        "name = \"t\"\n{extra}\n[source]\ntype = \"local\"\n{source}\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\ncompute = {frames_compute}\n"
    )
}

pub fn read_batches(dir: &Path) -> Vec<RecordBatch> {
    let mut out = vec![];
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut files: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    for f in files {
        let file = std::fs::File::open(&f).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            out.push(b.unwrap());
        }
    }
    out
}

/// A table as sorted rows of `column=value` strings, without the columns in `skip`.
pub fn table_rows(dir: &Path, skip: &[&str]) -> Vec<String> {
    let mut rows = vec![];
    let opts = FormatOptions::default().with_null("null");
    for b in read_batches(dir) {
        let schema = b.schema();
        let cols: Vec<(String, ArrayFormatter)> = schema
            .fields()
            .iter()
            .zip(b.columns())
            .filter(|(f, _)| !skip.contains(&f.name().as_str()))
            .map(|(f, c)| {
                (
                    f.name().clone(),
                    ArrayFormatter::try_new(c.as_ref(), &opts).unwrap(),
                )
            })
            .collect();
        for i in 0..b.num_rows() {
            rows.push(
                cols.iter()
                    .map(|(n, f)| format!("{n}={}", f.value(i)))
                    .collect::<Vec<_>>()
                    .join(" | "),
            );
        }
    }
    rows.sort();
    rows
}

/// The rows of one Parquet file as column → value maps (values formatted as strings).
pub fn table_rows_file(path: &Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let opts = FormatOptions::default().with_null("null");
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut out = vec![];
    for b in reader {
        let b = b.unwrap();
        let schema = b.schema();
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            out.push(
                schema
                    .fields()
                    .iter()
                    .zip(&fmts)
                    .map(|(f, x)| (f.name().clone(), x.value(i).to_string()))
                    .collect(),
            );
        }
    }
    out
}

/// Column values of a table as strings, in file order.
pub fn column(dir: &Path, name: &str) -> Vec<String> {
    let opts = FormatOptions::default().with_null("null");
    let mut out = vec![];
    for b in read_batches(dir) {
        let c = b
            .column_by_name(name)
            .unwrap_or_else(|| panic!("no column {name} in {}", dir.display()));
        let f = ArrayFormatter::try_new(c.as_ref(), &opts).unwrap();
        for i in 0..b.num_rows() {
            out.push(f.value(i).to_string());
        }
    }
    out
}

pub fn manifest(run_dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(run_dir.join("manifest.json")).unwrap()).unwrap()
}

/// Counts of the last invocation for one stage.
pub fn counts(run_dir: &Path, stage: &str) -> serde_json::Value {
    let m = manifest(run_dir);
    m["invocations"].as_array().unwrap().last().unwrap()["counts"][stage].clone()
}

/// How many videos `stage` computed in the last invocation.
pub fn computed(run_dir: &Path, stage: &str) -> u64 {
    counts(run_dir, stage)["computed"].as_u64().unwrap()
}

/// The rows of every Parquet file of a table folder, as column → value maps.
pub fn table_rows_file_all(dir: &Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut files: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    files.iter().flat_map(|f| table_rows_file(f)).collect()
}

/// A run's tables as sorted rows (without `skip` columns), then every frame JPEG as
/// "path blake3": what two runs must share to be the same.
pub fn snapshot(run: &Path, tables: &[&str], skip: &[&str]) -> Vec<Vec<String>> {
    let mut all: Vec<Vec<String>> = tables
        .iter()
        .map(|t| table_rows(&run.join(t), skip))
        .collect();
    let mut jpegs = vec![];
    for row in column(&run.join("frames"), "path") {
        jpegs.push(format!(
            "{row} {}",
            blake3::hash(&std::fs::read(run.join(&row)).unwrap()).to_hex()
        ));
    }
    jpegs.sort();
    all.push(jpegs);
    all
}

/// Runs pipeline `p` into `dir/ref` as one local process (exit 3: the test corpora hold a broken
/// file) and returns the snapshot of `tables`: what a run elsewhere must equal.
pub fn reference_run(p: &Path, dir: &Path, tables: &[&str], skip: &[&str]) -> Vec<Vec<String>> {
    let reference = dir.join("ref");
    let o = run_into(p, &reference, dir);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    snapshot(&reference, tables, skip)
}

/// A copy of a folder tree (files and folders only).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// The number that follows the first `marker` in `text` (up to the next space): a count a
/// command prints (`total: 3 model calls (7 requests at most)` after `"model calls ("`).
pub fn number_after(text: &str, marker: &str) -> f64 {
    let rest = text
        .split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("no {marker:?} in: {text}"));
    let word = rest.split_whitespace().next().unwrap_or_default();
    word.parse()
        .unwrap_or_else(|e| panic!("{word:?} after {marker:?}: {e}: {text}"))
}
