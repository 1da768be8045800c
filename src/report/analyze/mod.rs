//! `vidcurate analyze`: the papers' empirical analyses of on-screen text (MVFNDB §3.1–3.2, A.1,
//! A.1.1, A.2.2), from a run directory's Parquet alone, grouped by a column (e.g. `label`).
//!
//! Every analysis is a long table (group, bin, lo, hi, label, count, share) written as Parquet and
//! CSV; `stats` holds, for each comparison of the first two groups, a KS or chi-square test with
//! n, p and an effect size. Creator-added regions only, as the paper counts them.
//! Each analysis is also a PNG plot, and `report.html` shows them all with the statistics.

mod answers;
mod figures;
mod regions;
mod spill;
mod stats;
mod tables;
mod text_frames;

use answers::{AnswerField, FieldKind, answer_fields};
use regions::Regions;
use stats::Sample;
use tables::{BatchFilter, RunTables, col_f64, col_u32, segment_rows, shot_rows};

use crate::error::RunError;
use crate::record::COL_VIDEO_ID;
pub use crate::report::{DistRow, StatRow};
use crate::store::filter;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, UInt32Type};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub struct Analysis {
    pub out_dir: PathBuf,
    pub groups: Vec<String>,
    pub tables: BTreeMap<String, Vec<DistRow>>,
    pub stats: Vec<StatRow>,
}

/// The shots-per-video analysis is named after the stage whose table it reads.
const SHOTS: &str = crate::stages::shots::KIND.name;

/// What can stop an analysis, with the table, column or file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    /// A table lacks a column (or a stage) an analysis needs, or has it in another shape.
    #[error("{0}")]
    Column(String),
    #[error("the run has no `ocr` stage: nothing to analyse")]
    NoOcrStage,
    /// `--where` that does not parse, names a column the regions table lacks, or compares
    /// text with a number: the message quotes it with a caret under the part at fault.
    #[error("{0}")]
    Filter(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("{0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Drawing a figure or writing the report.
    #[error("{0}")]
    Plot(#[from] crate::report::PlotError),
    /// Reading the run: its store, manifest or tables.
    #[error("{0}")]
    Run(#[from] RunError),
}

impl AnalyzeError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        AnalyzeError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

impl From<filter::FilterError> for AnalyzeError {
    fn from(e: filter::FilterError) -> Self {
        match e {
            filter::FilterError::Invalid(m) => AnalyzeError::Filter(m),
            filter::FilterError::Arrow(e) => AnalyzeError::Arrow(e),
        }
    }
}

impl From<AnalyzeError> for RunError {
    /// A bad `--where` is invalid input (exit 2); the run's own errors keep their class.
    fn from(e: AnalyzeError) -> Self {
        match e {
            AnalyzeError::Run(e) => e,
            AnalyzeError::Filter(m) => RunError::Config(m),
            other => RunError::Internal(other.to_string()),
        }
    }
}

fn dist(group: &str, bins: &[(f64, f64, String)], counts: &[f64]) -> Vec<DistRow> {
    let total: f64 = counts.iter().sum();
    bins.iter()
        .zip(counts)
        .enumerate()
        .map(|(i, ((lo, hi, label), c))| DistRow {
            group: group.to_string(),
            bin: i as u32,
            lo: *lo,
            hi: *hi,
            label: label.clone(),
            count: *c,
            share: if total > 0.0 { c / total } else { 0.0 },
        })
        .collect()
}

fn uniform_bins(n: usize, lo: f64, hi: f64, unit: &str) -> Vec<(f64, f64, String)> {
    let w = (hi - lo) / n as f64;
    let decimals = if unit.is_empty() { 2 } else { 0 };
    (0..n)
        .map(|i| {
            let (a, b) = (lo + i as f64 * w, lo + (i + 1) as f64 * w);
            (a, b, format!("{a:.decimals$}{unit}"))
        })
        .collect()
}

fn bin_of(edges: &[f64], v: f64) -> usize {
    edges
        .windows(2)
        .position(|w| v >= w[0] && v < w[1])
        .unwrap_or(edges.len() - 2)
}

/// Runs every analysis on `run`, grouped by `by`, and writes the tables under `out`.
pub fn analyze(
    run: &Path,
    by: &str,
    out: Option<&Path>,
    filter: Option<&filter::Filter>,
) -> Result<Analysis, RunError> {
    let mut run_tables = RunTables::open(run)?;
    run_tables.filter_columns = filter
        .map(|f| f.columns().into_iter().map(String::from).collect())
        .unwrap_or_default();
    analyze_tables(&run_tables, run, by, out, filter).map_err(RunError::from)
}

fn analyze_tables(
    run_tables: &RunTables,
    run: &Path,
    by: &str,
    out: Option<&Path>,
    filter: Option<&filter::Filter>,
) -> Result<Analysis, AnalyzeError> {
    let filtered = |b: RecordBatch| apply_where(filter, b);
    use crate::stages::{frames, ocr, probe, shots};
    let ocr = run_tables
        .stage_id(ocr::KIND.name)
        .ok_or(AnalyzeError::NoOcrStage)?;
    let frames_id = run_tables.stage_id(frames::KIND.name);
    let probe_id = run_tables.stage_id(probe::KIND.name);
    let shots_id = run_tables.stage_id(shots::KIND.name);
    let (staging, out_dir) = out_folder(run_tables, run, by, out)?;
    let mut regions = regions::read_regions(run_tables, &ocr, by, filter)?;
    let groups: Vec<String> = regions.groups.keys().cloned().collect();
    let mut tables = region_tables(&mut regions);

    // Key footage over 8 equal segments, and shots per video.
    if let (Some(fid), Some(pid)) = (&frames_id, &probe_id) {
        let rows = segment_rows(
            run_tables,
            fid,
            pid,
            by,
            &filtered,
            &regions.text_frames,
            &groups,
        )?;
        tables
            .rows
            .entry("segments".into())
            .or_default()
            .extend(rows);
    }
    if let Some(sid) = &shots_id {
        shots_table(run_tables, sid, by, &filtered, &mut tables)?;
    }

    let answers = ask_answers(run_tables, by, &filtered, &mut tables)?;

    let ks_read = |e| AnalyzeError::io(&std::env::temp_dir(), e);
    let mut stats_rows = compare_first_two(&groups, &mut tables).map_err(ks_read)?;
    stats_rows.extend(compare_answers(&answers, &mut tables).map_err(ks_read)?);
    std::fs::create_dir_all(&out_dir).map_err(|e| AnalyzeError::io(&out_dir, e))?;
    for (name, rows) in &tables.rows {
        write_table(&out_dir, name, rows)?;
    }
    write_table(&out_dir, "stats", &stats_rows)?;
    figures::draw(
        &out_dir,
        &tables.rows,
        &groups,
        &regions,
        &stats_rows,
        &answers,
    )?;
    let out_dir = match staging {
        Some(_) => run_tables.publish(&out_dir, &format!("analysis/{by}"))?,
        None => out_dir,
    };
    Ok(Analysis {
        out_dir,
        groups,
        tables: tables.rows,
        stats: stats_rows,
    })
}

/// Where the analysis is written: a run on an object store gets it in the store (written to a
/// local staging folder first: the plots and tables are files), unless --out names a local
/// folder.
fn out_folder(
    run_tables: &RunTables,
    run: &Path,
    by: &str,
    out: Option<&Path>,
) -> Result<(Option<tempfile::TempDir>, PathBuf), AnalyzeError> {
    let remote = run_tables.store.local_path("").is_none() && out.is_none();
    let staging = if remote {
        Some(tempfile::tempdir().map_err(|e| AnalyzeError::io(&std::env::temp_dir(), e))?)
    } else {
        None
    };
    let out_dir = match (&staging, out) {
        (Some(t), _) => t.path().to_path_buf(),
        (None, Some(o)) => o.to_path_buf(),
        (None, None) => run.join("analysis").join(by),
    };
    Ok((staging, out_dir))
}

/// Shots per video, as a table and as the values its test compares.
fn shots_table(
    run_tables: &RunTables,
    sid: &str,
    by: &str,
    filtered: BatchFilter,
    tables: &mut Tables,
) -> Result<(), AnalyzeError> {
    let (rows, values) = shot_rows(run_tables, sid, by, filtered)?;
    tables.rows.entry(SHOTS.into()).or_default().extend(rows);
    for (g, vals) in values {
        tables.values.insert((SHOTS.into(), g), Sample::F64(vals));
    }
    Ok(())
}

/// Each `ask` stage's answer fields (MVFNDB A.1.2 emotion scores, A.2.1 identities), added to
/// the tables.
fn ask_answers(
    run_tables: &RunTables,
    by: &str,
    filtered: BatchFilter,
    tables: &mut Tables,
) -> Result<Vec<AnswerField>, AnalyzeError> {
    let mut answers: Vec<AnswerField> = vec![];
    for st in &run_tables.manifest.stages {
        if st.kind == crate::stages::ask::KIND.name {
            answers.extend(answer_fields(run_tables, &st.id, by, filtered)?);
        }
    }
    for a in &answers {
        tables.rows.insert(a.name.clone(), a.rows.clone());
        for (g, v) in &a.values {
            tables
                .values
                .insert((a.name.clone(), g.clone()), Sample::F64(v.clone()));
        }
        for (g, c) in &a.counts {
            tables.counts.insert((a.name.clone(), g.clone()), c.clone());
        }
    }
    Ok(answers)
}

/// `--where` applied to a batch; None when the table lacks one of its columns.
fn apply_where(
    filter: Option<&filter::Filter>,
    b: RecordBatch,
) -> Result<Option<RecordBatch>, AnalyzeError> {
    match filter {
        Some(f) => Ok(f.apply(&b)?),
        None => Ok(Some(b)),
    }
}

/// The analyses' tables, with the samples the statistics compare.
#[derive(Default)]
struct Tables {
    rows: BTreeMap<String, Vec<DistRow>>,
    /// Binned counts per (analysis, group), for the chi-square tests.
    counts: BTreeMap<(String, String), Vec<f64>>,
    /// Raw values per (analysis, group), for the KS tests (which take them: each is tested once).
    values: BTreeMap<(String, String), Sample>,
}

/// The bins of the region analyses.
struct RegionBins {
    hue: Vec<(f64, f64, String)>,
    sv: Vec<(f64, f64, String)>,
    area_edges: Vec<f64>,
    area: Vec<(f64, f64, String)>,
    aspect_edges: [f64; 9],
    aspect: Vec<(f64, f64, String)>,
    cells: Vec<(f64, f64, String)>,
}

impl RegionBins {
    fn new((grid_rows, grid_cols): (u32, u32)) -> Self {
        // Region areas span orders of magnitude: half-decade bins from 1e-5 of the frame.
        let area_edges: Vec<f64> = (0..=10)
            .map(|i| 10f64.powf(-5.0 + 0.5 * i as f64))
            .collect();
        let area = area_edges
            .windows(2)
            .map(|w| (w[0], w[1], format!("{:.0e}-{:.0e}", w[0], w[1])))
            .collect();
        let aspect_edges = [0.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0, f64::INFINITY];
        let aspect = aspect_edges
            .windows(2)
            .map(|w| (w[0], w[1], format!("{}-{}", w[0], w[1])))
            .collect();
        let cells = (0..grid_rows * grid_cols)
            .map(|i| {
                (
                    i as f64,
                    (i + 1) as f64,
                    crate::stages::ocr::layout::cell_name(
                        i / grid_cols,
                        i % grid_cols,
                        grid_rows,
                        grid_cols,
                    ),
                )
            })
            .collect();
        Self {
            hue: uniform_bins(72, 0.0, 360.0, "°"),
            sv: uniform_bins(20, 0.0, 1.0, ""),
            area_edges,
            area,
            aspect_edges,
            aspect,
            cells,
        }
    }
}

/// The region analyses (hue, saturation, value, position, area, aspect ratio), per group. The
/// raw values move into the tables (the largest part of `analyze`'s memory: four numbers a
/// region), so they are never held twice.
fn region_tables(regions: &mut Regions) -> Tables {
    let spilled = std::mem::take(&mut regions.spill).into_shared();
    let bins = RegionBins::new(regions.grid);
    let grid_cols = regions.grid.1;
    let mut t = Tables::default();
    for (g, r) in regions.groups.iter_mut() {
        let mut cell = vec![0f64; bins.cells.len()];
        for ((row, col), n) in &r.cells {
            cell[(row * grid_cols + col) as usize] += n;
        }
        let [hue_px, sat_px, val_px] = r.pixels.clone();
        for (name, bins, counts) in [
            ("hue_pixels", &bins.hue, hue_px),
            ("hue_regions", &bins.hue, r.hue_regions.clone()),
            ("saturation", &bins.sv, sat_px),
            ("value", &bins.sv, val_px),
            ("position", &bins.cells, cell),
            ("area", &bins.area, r.area.clone()),
            ("aspect_ratio", &bins.aspect, r.aspect.clone()),
        ] {
            t.rows
                .entry(name.into())
                .or_default()
                .extend(dist(g, bins, &counts));
            t.counts.insert((name.into(), g.clone()), counts);
        }
        if r.untested {
            continue;
        }
        for (name, vals) in ["saturation", "value", "area", "aspect_ratio"]
            .into_iter()
            .zip(std::mem::take(&mut r.values))
        {
            let sample = match &spilled {
                Some(file) if vals.has_runs() => Sample::Spilled(vals, file.clone()),
                _ => {
                    let mut vals = vals.held;
                    vals.shrink_to_fit();
                    Sample::F32(vals)
                }
            };
            t.values.insert((name.into(), g.clone()), sample);
        }
    }
    t
}

/// The statistics, for the first two groups: chi-square on every binned analysis, KS on every
/// one with raw values.
fn compare_first_two(groups: &[String], t: &mut Tables) -> std::io::Result<Vec<StatRow>> {
    let mut stats_rows = vec![];
    let [a, b, ..] = groups else {
        return Ok(stats_rows);
    };
    for name in [
        "hue_pixels",
        "hue_regions",
        "saturation",
        "value",
        "position",
        "area",
        "aspect_ratio",
    ] {
        if let (Some(x), Some(y)) = (
            t.counts.get(&(name.into(), a.clone())),
            t.counts.get(&(name.into(), b.clone())),
        ) {
            if let Some(r) = stats::chi_square(x, y) {
                stats_rows.push(stat_row(name, a, b, &r));
            }
        }
    }
    for name in ["saturation", "value", "area", "aspect_ratio", SHOTS] {
        if let (Some(mut x), Some(mut y)) = (
            t.values.remove(&(name.into(), a.clone())),
            t.values.remove(&(name.into(), b.clone())),
        ) {
            if let Some(r) = stats::ks_two_sample(&mut x, &mut y)? {
                stats_rows.push(stat_row(name, a, b, &r));
            }
        }
    }
    Ok(stats_rows)
}

/// The first two groups compared on each answer field: KS on numbers, chi-square on categories.
fn compare_answers(answers: &[AnswerField], t: &mut Tables) -> std::io::Result<Vec<StatRow>> {
    let mut out = vec![];
    for a in answers {
        let [g1, g2, ..] = &a.videos.keys().cloned().collect::<Vec<_>>()[..] else {
            continue;
        };
        let key = |g: &String| (a.name.clone(), g.clone());
        let r = match a.kind {
            FieldKind::Number => match (t.values.remove(&key(g1)), t.values.remove(&key(g2))) {
                (Some(mut x), Some(mut y)) => stats::ks_two_sample(&mut x, &mut y)?,
                _ => None,
            },
            FieldKind::Category => match (t.counts.get(&key(g1)), t.counts.get(&key(g2))) {
                (Some(x), Some(y)) => stats::chi_square(x, y),
                _ => None,
            },
            FieldKind::Multi => None,
        };
        if let Some(r) = r {
            out.push(stat_row(&a.name, g1, g2, &r));
        }
    }
    Ok(out)
}

fn stat_row(name: &str, a: &str, b: &str, t: &stats::TestResult) -> StatRow {
    StatRow {
        analysis: name.into(),
        group_a: a.into(),
        group_b: b.into(),
        test: t.test.into(),
        n_a: t.n_a,
        n_b: t.n_b,
        statistic: t.statistic,
        p_value: t.p_value,
        effect_size: t.effect_size,
    }
}

/// `<name>.parquet` and `<name>.csv` in `dir`.
fn write_table<T: Serialize + for<'de> Deserialize<'de>>(
    dir: &Path,
    name: &str,
    rows: &[T],
) -> Result<(), AnalyzeError> {
    let fields = crate::store::shards::fields_of::<T>()?;
    let batch = serde_arrow::to_record_batch(&fields, &rows)
        .map_err(|e| AnalyzeError::Column(e.to_string()))?;
    // Written as the store writes its objects (beside, synced, renamed): a reader never sees
    // half a table, and a crash leaves the previous analysis whole.
    let path = dir.join(format!("{name}.parquet"));
    let parquet = crate::store::shards::encode_table(&batch)?;
    crate::store::write_file(&path, &parquet).map_err(|e| AnalyzeError::io(&path, e))?;
    let path = dir.join(format!("{name}.csv"));
    let mut csv = vec![];
    arrow::csv::Writer::new(&mut csv).write(&batch)?;
    crate::store::write_file(&path, &csv).map_err(|e| AnalyzeError::io(&path, e))?;
    Ok(())
}
