//! `vidcurate release`: a run and one of its splits as a dataset folder others load with
//! Hugging Face `datasets.load_dataset(DIR)`, pyarrow, DuckDB or Polars (SPEC §9, §10).
//!
//! Reads: the run's manifest, `splits/<name>.parquet` (from `vidcurate split`), the source table
//! and each stage's table as the stage registry's `release` entry says (one-row-per-video
//! columns, named `<stage>_<column>`; the frames; the OCR lines), all under the run's current
//! fingerprints. Writes, into `--out`: `data/<split>-NNNNN-of-NNNNN.parquet` (one row per
//! video), `frames/<video>/NNNNN.jpg` when frames are kept as files,
//! `perturbations/<split>-…parquet` (RiskCue §3.4: the frame order of each variant) and
//! `README.md`, a dataset card whose YAML front matter declares the configs, the features and
//! the split sizes, and last `croissant.json` (Croissant 1.1: each config a RecordSet, every
//! file's SHA-256, the Responsible-AI fields). Calls nothing; caches nothing (reads the response
//! cache's totals for the card's cost).

mod card;
mod cost;
mod croissant;
mod inputs;
mod questions;
mod rows;
mod tasks;
#[cfg(test)]
mod tests;
mod tidy;

use crate::error::RunError;
use crate::store::Store;
use arrow::array::{Array, ListBuilder, RecordBatch, StringBuilder, UInt32Builder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use card::*;
use inputs::*;
use rows::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How frames go into the release.
#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum)]
pub enum FrameMode {
    /// JPEG files under frames/, listed by relative path in a `frames` column.
    Paths,
    /// The JPEG bytes in the Parquet rows, as `datasets` Image values (one self-contained folder).
    Bytes,
    /// No frames.
    None,
}

/// What `release` is asked for (also its command-line flags).
#[derive(Debug, Clone, clap::Args)]
pub struct ReleaseOptions {
    /// The folder to write (created; files of an earlier release there are replaced).
    #[arg(long)]
    pub out: PathBuf,
    /// Which split of the run (`vidcurate split --name`).
    #[arg(long, default_value = "default")]
    pub split: String,
    /// How frames are kept: files listed by path, image bytes in the rows, or none.
    #[arg(long, value_enum, default_value = "paths")]
    pub frames: FrameMode,
    /// Videos per Parquet file.
    #[arg(long, default_value_t = 1000)]
    pub rows_per_file: usize,
    /// Seed of the shuffled perturbation.
    #[arg(long, default_value_t = 13)]
    pub seed: u64,
    /// A TOML file with what only a person can say about the dataset, for README.md and
    /// croissant.json: description, license, url, version, citation, creators, and the
    /// Responsible-AI fields data_limitations, data_biases, personal_sensitive_information,
    /// data_use_cases, data_social_impact, has_synthetic_data (true/false),
    /// annotator_demographics, maintenance_plan. Missing ones get a placeholder and a warning.
    #[arg(long, value_name = "FILE")]
    pub card: Option<PathBuf>,
    /// Also export the items for an evaluation harness (repeat for both): `lmms-eval`
    /// writes harness/lmms_eval/ (questions: a task per level, all items and CircularEval;
    /// benchmark tasks: a task per task scored by its format's metrics; a group each; utils.py)
    /// for `lmms_eval --include_path`, each task scoring the test split (validation as
    /// validation_split, train as fewshot_split only); `vlmevalkit` writes
    /// harness/vlmevalkit/<Name>_<split>.tsv and its CircularEval copy <Name>_<split>_CIRC.tsv
    /// per split for VLMEvalKit's LMUData (questions, and each single-choice task). Both score
    /// as `evaluate` does; judged metrics stay with `evaluate --judge`.
    #[arg(long, value_enum, value_name = "HARNESS")]
    pub harness: Vec<crate::release::harness::Harness>,
    /// The release this one follows (default: the release already at --out, if any): this
    /// one then records what changed (CHANGES.md, the `changes` config), keeps the videos it
    /// took down out, and takes the next version: minor when videos or items were only added,
    /// major when any left, moved, were relabelled or redrafted; a patch when only other values
    /// of the files changed (a column added, metadata refreshed); when nothing changed it is
    /// the previous version again, as that one recorded it.
    #[arg(long, value_name = "DIR")]
    pub previous: Option<PathBuf>,
    /// The version to write instead (MAJOR.MINOR.PATCH); without a previous release the card
    /// file's `version`, else 1.0.0.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
}

/// What a release wrote.
#[derive(Debug)]
pub struct ReleaseReport {
    pub out: PathBuf,
    /// Split name → videos.
    pub splits: Vec<(String, usize)>,
    pub columns: Vec<String>,
    pub files: usize,
    /// Videos of the split the run no longer selects, left out.
    pub left_out: usize,
    /// The version it wrote (croissant.json's `version`).
    pub version: String,
}

/// The frame order of each perturbation variant (RiskCue §3.4), as indices into the frames.
pub fn perturbations(n: usize, seed: u64, video_id: &str) -> Vec<(&'static str, Vec<u32>)> {
    let original: Vec<u32> = (0..n as u32).collect();
    // Seeded by the seed and the video: stable across runs.
    let shuffled: Vec<u32> = crate::benchmark::seeded_permutation(n, &format!("{seed}:{video_id}"))
        .into_iter()
        .map(|i| i as u32)
        .collect();
    let half = n / 2;
    let swapped: Vec<u32> = original[half..]
        .iter()
        .chain(&original[..half])
        .copied()
        .collect();
    let reversed: Vec<u32> = original.iter().rev().copied().collect();
    vec![
        ("original", original.clone()),
        ("shuffled", shuffled),
        ("halves_swapped", swapped),
        ("reversed", reversed),
        (
            "first_frame",
            original.first().copied().into_iter().collect(),
        ),
        ("last_frame", original.last().copied().into_iter().collect()),
    ]
}

fn write_parquet(path: &Path, batch: &RecordBatch) -> Result<(), RunError> {
    let bytes = crate::store::shards::encode_table(batch)?;
    crate::store::write_file(path, &bytes).map_err(crate::error::io(path))
}

/// The split's videos the pipeline still selects: a split is made once, and a rerun since (a
/// video removed or changed, a threshold raised) may have taken some out; a release holds what
/// the run selects now, as `annotate export` does. Returns how many it left out.
fn keep_selected(by_split: &mut BTreeMap<String, Vec<String>>, selected: &[String]) -> usize {
    let mut gone = 0;
    for ids in by_split.values_mut() {
        let before = ids.len();
        // `selected` is sorted (`pipeline_selection`).
        ids.retain(|v| selected.binary_search(v).is_ok());
        gone += before - ids.len();
    }
    gone
}

/// The card's note on a split made before videos left the run's selection.
fn stale_note(gone: usize, split: &str) -> String {
    if gone == 0 {
        return String::new();
    }
    format!(
        "\n## A split older than the run\n\n{gone} videos of split `{split}` are no longer selected by the run (removed, changed or filtered since the split was made) and are not in this release, so the splits' shares may be off their targets. Make the split again (`vidcurate status RUN` prints the command) and release again to rebalance them.\n"
    )
}

/// Writes the release folder.
pub async fn release(run_dir: &Path, opts: &ReleaseOptions) -> Result<ReleaseReport, RunError> {
    if opts.rows_per_file == 0 {
        return Err(RunError::Config(
            "--rows-per-file must be at least 1".into(),
        ));
    }
    let person = croissant::CardSettings::read(opts.card.as_deref())?;
    let run = crate::store::run::RunView::open(run_dir).await?;
    let (store, m) = (&run.store, &run.manifest);
    let (order, mut by_split, split_report) = read_split(store, &opts.split).await?;
    let (selected, funnel) = crate::stages::selection::pipeline_selection(&run).await?;
    let left_out = keep_selected(&mut by_split, &selected);
    // Read before `out` is replaced: it may be the previous version itself.
    let previous = crate::release::versions::previous(opts.previous.as_deref(), &opts.out)?;
    let (taken, takedowns) = takedowns_to_keep(opts)?;
    keep_taken_down_out(&mut by_split, &taken);
    let inputs = read_inputs(store, m).await?;
    let out = &opts.out;
    clear_out(out)?;
    write_takedowns(out, &takedowns)?;
    let data = write_data(store, &inputs, &order, &by_split, opts).await?;
    let schema = data.schema.clone().ok_or_else(|| {
        RunError::Config(format!(
            "splits/{}.parquet holds no video: nothing to release",
            opts.split
        ))
    })?;
    let langs = card::video_languages(m, &inputs);
    let questions = questions::write_questions(
        store,
        m,
        langs.as_ref().map(|l| &l.1),
        &order,
        &by_split,
        out,
    )
    .await?;
    let tasks = tasks::write_tasks(store, m, &order, &by_split, out).await?;
    let card = card(
        m,
        &schema,
        &data.images,
        &data.sizes,
        &data.p_bytes,
        &split_report,
        &funnel,
        &inputs,
        &by_split,
        langs.as_ref(),
        questions.as_ref(),
        &tasks,
        &cost::run_cost(run_dir, m)?,
        &person,
        opts,
    );
    let avail = crate::release::availability::write_manifest(&run, &order, &by_split, out).await?;
    let card = card + &availability(&avail) + &stale_note(left_out, &opts.split);
    let known = croissant::Known {
        m,
        funnel: &funnel,
        langs: langs.as_ref(),
        questions: questions.as_ref(),
        tasks: &tasks,
        videos: data.sizes.iter().map(|(_, n, _)| n).sum(),
    };
    let version = finish(out, card, &known, person, previous, opts)?;
    Ok(ReleaseReport {
        out: out.clone(),
        splits: data.sizes.into_iter().map(|(s, n, _)| (s, n)).collect(),
        columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
        files: data.files,
        left_out,
        version,
    })
}

/// The videos an earlier version took down stay out of every later one.
fn keep_taken_down_out(by_split: &mut BTreeMap<String, Vec<String>>, taken: &BTreeSet<String>) {
    for ids in by_split.values_mut() {
        ids.retain(|v| !taken.contains(v));
    }
}

/// Every takedown recorded by the release at `out` and by the one `--previous` names (read
/// before `out` is replaced): their ids, and the lines of `takedowns.jsonl` to write, out's own
/// first, then the previous one's for the videos out does not record.
fn takedowns_to_keep(opts: &ReleaseOptions) -> Result<(BTreeSet<String>, String), RunError> {
    let (mut ids, mut text) = (BTreeSet::new(), String::new());
    let name = crate::release::availability::TAKEDOWNS_FILE;
    let mut dirs = vec![opts.out.as_path()];
    dirs.extend(opts.previous.as_deref());
    for dir in dirs {
        let Ok(lines) = std::fs::read_to_string(dir.join(name)) else {
            continue;
        };
        let recorded = crate::release::availability::recorded_ids(dir)?;
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            let id = v["video_id"].as_str().unwrap_or_default();
            if recorded.contains(id) && ids.insert(id.to_string()) {
                text += line;
                text.push('\n');
            }
        }
    }
    Ok((ids, text))
}

/// `takedowns.jsonl` as `takedowns_to_keep` merged it (none when nothing was taken down).
fn write_takedowns(out: &Path, text: &str) -> Result<(), RunError> {
    let path = out.join(crate::release::availability::TAKEDOWNS_FILE);
    if text.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(out).map_err(crate::error::io(out))?;
    std::fs::write(&path, text).map_err(crate::error::io(&path))
}

/// The version and its changes (against `previous`), the card, then croissant.json (last: it
/// lists every file's checksum) and the harness exports (they verify against it). The version.
fn finish(
    out: &Path,
    card: String,
    known: &croissant::Known,
    mut person: croissant::CardSettings,
    previous: Option<crate::release::versions::Previous>,
    opts: &ReleaseOptions,
) -> Result<String, RunError> {
    let asked = opts.version.clone().or_else(|| {
        // The card file's version names the first one; later ones follow from their changes.
        previous.is_none().then(|| person.version.clone()).flatten()
    });
    let r = crate::release::versions::record(out, previous.as_ref(), asked.as_deref())?;
    let card = crate::release::versions::card_with_version(&card, &r, person.live == Some(true));
    let readme = out.join("README.md");
    std::fs::write(&readme, card).map_err(crate::error::io(&readme))?;
    person.version = Some(r.version.clone());
    croissant::write(out, known, &person)?;
    crate::release::harness::export(out, &opts.harness)?;
    Ok(r.version)
}

/// Removes the folders an earlier release wrote into `out`: files of it must not linger.
/// `croissant.json` goes first: a release cut short after this is no release, so the next one
/// does not take the half-written folder for the version it follows.
fn clear_out(out: &Path) -> Result<(), RunError> {
    let croissant = out.join("croissant.json");
    if croissant.exists() {
        std::fs::remove_file(&croissant).map_err(crate::error::io(&croissant))?;
    }
    for sub in [
        "data",
        "frames",
        "perturbations",
        "questions",
        "tasks",
        "harness",
        "changes",
    ] {
        let d = out.join(sub);
        if d.exists() {
            std::fs::remove_dir_all(&d).map_err(crate::error::io(&d))?;
        }
    }
    let changes = out.join("CHANGES.md");
    if changes.exists() {
        std::fs::remove_file(&changes).map_err(crate::error::io(&changes))?;
    }
    Ok(())
}

/// What the data files of every split came to.
struct DataFiles {
    /// The rows' schema (none when no split holds a video).
    schema: Option<SchemaRef>,
    /// The columns of the rows that hold images.
    images: Vec<String>,
    files: usize,
    /// Split → videos, bytes of the rows.
    sizes: Vec<(String, usize, usize)>,
    /// Split → bytes of its perturbations file.
    p_bytes: HashMap<String, usize>,
}

/// Writes every split's Parquet files, frames and perturbations into `opts.out`.
async fn write_data(
    store: &Arc<dyn Store>,
    inputs: &Inputs,
    order: &[String],
    by_split: &BTreeMap<String, Vec<String>>,
    opts: &ReleaseOptions,
) -> Result<DataFiles, RunError> {
    let out = &opts.out;
    let mut schema = None;
    let mut images = vec![];
    let mut files = 0;
    let mut sizes = vec![];
    let mut p_bytes = HashMap::new();
    for split in order {
        let ids = &by_split[split];
        let mut bytes = 0;
        let chunks: Vec<&[String]> = ids.chunks(opts.rows_per_file).collect();
        for (n, chunk) in chunks.iter().enumerate() {
            let jpegs = if opts.frames == FrameMode::Bytes {
                fetch_frames(store, inputs, chunk).await?
            } else {
                HashMap::new()
            };
            let read = |rel: &str| {
                jpegs
                    .get(rel)
                    .cloned()
                    .ok_or_else(|| RunError::Internal(format!("{rel}: not fetched")))
            };
            let (batch, imgs) = build_rows(inputs, split, chunk, opts, &read)?;
            let name = format!("data/{split}-{n:05}-of-{:05}.parquet", chunks.len());
            write_parquet(&out.join(&name), &batch)?;
            // What `datasets` calls num_bytes: the size of the rows in Arrow.
            bytes += batch.get_array_memory_size();
            files += 1;
            images = imgs;
            schema.get_or_insert(batch.schema());
        }
        if opts.frames == FrameMode::Paths {
            copy_frames(store, inputs, ids, out).await?;
        }
        let pb = write_perturbations(inputs, split, ids, opts.seed, out)?;
        p_bytes.insert(split.clone(), pb);
        sizes.push((split.clone(), ids.len(), bytes));
    }
    Ok(DataFiles {
        schema,
        images,
        files,
        sizes,
        p_bytes,
    })
}

/// The JPEG bytes of the videos' frames, by their path in the run.
async fn fetch_frames(
    store: &Arc<dyn Store>,
    inputs: &Inputs,
    ids: &[String],
) -> Result<HashMap<String, Vec<u8>>, RunError> {
    let mut out = HashMap::new();
    for id in ids {
        for (_, path) in inputs.frames.get(id).into_iter().flatten() {
            let data = store.get(path).await.map_err(|e| store.io_error(path, e))?;
            out.insert(path.clone(), data);
        }
    }
    Ok(out)
}

async fn copy_frames(
    store: &Arc<dyn Store>,
    inputs: &Inputs,
    ids: &[String],
    out: &Path,
) -> Result<(), RunError> {
    for id in ids {
        let jpegs = fetch_frames(store, inputs, std::slice::from_ref(id)).await?;
        for (k, (_, path)) in inputs.frames.get(id).into_iter().flatten().enumerate() {
            let dest = out.join(format!("frames/{id}/{k:05}.jpg"));
            let io = || crate::error::io(&dest);
            std::fs::create_dir_all(dest.parent().unwrap_or(out)).map_err(io())?;
            std::fs::write(&dest, &jpegs[path]).map_err(io())?;
        }
    }
    Ok(())
}

fn write_perturbations(
    inputs: &Inputs,
    split: &str,
    ids: &[String],
    seed: u64,
    out: &Path,
) -> Result<usize, RunError> {
    let (mut vid, mut variant) = (StringBuilder::new(), StringBuilder::new());
    let mut order = ListBuilder::new(UInt32Builder::new());
    for id in ids {
        let n = inputs.frames.get(id).map_or(0, Vec::len);
        for (name, o) in perturbations(n, seed, id) {
            vid.append_value(id);
            variant.append_value(name);
            order.values().append_slice(&o);
            order.append(true);
        }
    }
    let order = order.finish();
    let schema = Schema::new(vec![
        Field::new("video_id", DataType::Utf8, false),
        Field::new("variant", DataType::Utf8, false),
        Field::new("frame_order", order.data_type().clone(), true),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(vid.finish()),
            Arc::new(variant.finish()),
            Arc::new(order),
        ],
    )
    .map_err(|e| RunError::Internal(e.to_string()))?;
    write_parquet(
        &out.join(format!("perturbations/{split}-00000-of-00001.parquet")),
        &batch,
    )?;
    Ok(batch.get_array_memory_size())
}
