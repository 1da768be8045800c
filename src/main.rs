//! The `vidcurate` command line. The only place `anyhow` is used.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vidcurate::error::RunError;
use vidcurate::plan;
use vidcurate::runtime::runner::{self, RunOptions, RunStatus};

/// Build video benchmark dataset splits from a pipeline file.
///
/// A pipeline file (TOML, see pipelines/) names a source of videos and an ordered list of stages.
/// `vidcurate run` writes one folder of Parquet shards per stage, a `rejects` table and a
/// manifest.json into a run directory. Running the same command again does only the missing
/// work: after a crash, Ctrl-C, or a change of one stage's settings (which redoes that stage and
/// the ones after it, nothing before).
///
/// Exit codes: 0 done, nothing rejected; 3 done, some videos rejected (see <run>/rejects/);
/// 2 the pipeline file or its inputs are invalid (or an API key is refused); 4 stopped cleanly
/// before the end (a spent API quota: rerun after it resets to continue, nothing is repeated);
/// 130 interrupted (rerun to resume); 1 other errors.
#[derive(Parser)]
#[command(
    name = "vidcurate",
    version,
    about,
    long_about,
    after_help = "Logs: set RUST_LOG (e.g. RUST_LOG=debug). Examples:\n  vidcurate validate pipelines/demo.toml\n  vidcurate run pipelines/demo.toml --out data/runs/demo\n  vidcurate list-stages\n  vidcurate queries queries/protest.toml\n  YOUTUBE_API_KEY=... vidcurate run pipelines/riskcue-protest.toml\n  vidcurate rethreshold data/runs/demo --set relevance.min_score=5\n  vidcurate cache stats data/runs/riskcue-protest"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Several workers on one run directory (see README, "Running on a cluster").
#[derive(clap::Args, Debug, Clone, Default)]
struct RankArgs {
    /// This worker's rank, 0..WORLD: it does the videos whose id hashes to it
    /// (blake3(video_id) mod WORLD). Default: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, or
    /// Kubernetes' JOB_COMPLETION_INDEX; else one process does every video.
    #[arg(long, requires = "world")]
    rank: Option<u32>,
    /// Number of ranks [default: SLURM_ARRAY_TASK_COUNT]. Pinned in RUN/run.json by the first
    /// worker; a worker with another world (or pipeline, or tool version) is refused.
    #[arg(long)]
    world: Option<u32>,
    /// Replace the run's pin (run.json) with this worker's settings: start the run over with a
    /// new world size or pipeline. Shards of the old settings are kept and set aside as usual.
    #[arg(long)]
    repin: bool,
    /// Local working folder for a run on an object store (media being decoded, the response
    /// cache) [default: a folder under the system temp dir].
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a pipeline (resumes an earlier run in the same directory).
    Run {
        /// The pipeline file (TOML).
        file: PathBuf,
        /// Run directory [default: output.dir of the file, else data/runs/<name>]: a folder, or
        /// an object store: s3://bucket/prefix, gs://bucket/prefix, az://container/prefix
        /// (credentials and endpoint from the environment: AWS_ACCESS_KEY_ID,
        /// AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP=true for http, …).
        #[arg(long)]
        out: Option<PathBuf>,
        /// No progress bars (log lines are still written to stderr).
        #[arg(long, short)]
        quiet: bool,
        /// Call nothing: print what the run would do and cost, per stage and in total (YouTube
        /// calls and days of quota, model calls, tokens and USD live and in batch mode, frames
        /// and disk), counting what the run directory and its cache already hold as free.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        ranks: RankArgs,
    },
    /// Check a pipeline file without running it: keys, types, stage order, paths.
    Validate {
        /// The pipeline file(s) (TOML).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// List the stage and source types a pipeline file can use.
    ListStages,
    /// Re-apply the scoring stages' thresholds to stored scores, with no model call.
    ///
    /// Prints the funnel (videos in / done / rejected / pending / out per stage) under the
    /// pipeline's own `select` settings and under the new ones, and writes both selections to
    /// RUN_DIR/selections/ (video_id, kept per stage, selected). `pending` videos passed a lowered
    /// threshold upstream but were never scored downstream: rerun the pipeline with the new
    /// thresholds to score them.
    Rethreshold {
        /// A run directory (with manifest.json).
        run_dir: PathBuf,
        /// STAGE.KEY=VALUE, e.g. relevance.min_score=8, quality.min_twos=9,
        /// committee.rule=entropy, committee.min_entropy=0.9 (repeatable).
        #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
        set: Vec<vidcurate::rethreshold::Override>,
    },
    /// Split the videos the pipeline selected into train/validation/test, at video level.
    ///
    /// Deterministic for a seed; stratified so every split has each stratum's share (e.g. of
    /// fake and real); grouped so the videos of one channel (or event, or near-duplicate
    /// cluster) never sit in two splits. Reads the run's tables under the pipeline's own
    /// thresholds (no model call); writes RUN_DIR/splits/NAME.parquet (video_id, split, stratum,
    /// group) and NAME.json (counts per split and stratum, the largest deviation), and prints
    /// the counts.
    #[command(
        after_help = "Examples:\n  vidcurate split data/runs/demo --stratify label --group channel_id\n  vidcurate split data/runs/x --ratios 80/20 --names train,test --stratify domain,label --seed 7"
    )]
    Split {
        /// A run directory or object-store URL (s3://bucket/prefix, …).
        run_dir: PathBuf,
        #[command(flatten)]
        opts: vidcurate::split::SplitOptions,
    },
    /// Write a split run as a dataset folder: Parquet files per split, frames, perturbations
    /// and a dataset card, loadable with `datasets.load_dataset(DIR)`, pyarrow, DuckDB, Polars.
    ///
    /// One row per selected video: ids, the source's metadata and manifest columns, every
    /// one-row-per-video stage's columns (`<stage>_<column>`: scores, votes, probe), the frames
    /// (files or image bytes), the OCR text, the split. `perturbations/` gives each video's frame
    /// order for the variants of RiskCue §3.4. README.md is the card: YAML for `datasets`
    /// (configs, features, split sizes), the funnel, the settings, licence notes, provenance.
    #[command(
        after_help = "Examples:\n  vidcurate split data/runs/demo --stratify label\n  vidcurate release data/runs/demo --out data/releases/demo\n  vidcurate release data/runs/demo --out /tmp/demo-hf --frames bytes --split default"
    )]
    Release {
        /// A run directory or object-store URL (s3://bucket/prefix, …).
        run_dir: PathBuf,
        #[command(flatten)]
        opts: vidcurate::release::ReleaseOptions,
    },
    /// Score a model's predictions on a release: per group (--by) and overall, positive-class
    /// F1, accuracy, specificity, balanced accuracy, MCC and the always-positive F1; per
    /// perturbation variant when the predictions have a `variant` column, with the F1 drop
    /// from the original order.
    ///
    /// PREDICTIONS is CSV, JSONL or Parquet with `video_id`, `prediction` (a label value of the
    /// release) and optionally `variant` (original, shuffled, halves_swapped, reversed,
    /// first_frame, last_frame). An unknown video id or label is an error naming its line.
    #[command(
        after_help = "Examples:\n  vidcurate evaluate data/releases/riskcue preds.csv --by domain\n  vidcurate evaluate data/releases/demo preds.jsonl --positive fake --json"
    )]
    Evaluate {
        /// A release folder (vidcurate release --out).
        release: PathBuf,
        /// The predictions file.
        predictions: PathBuf,
        #[command(flatten)]
        opts: vidcurate::evaluate::EvaluateOptions,
    },
    /// Human annotation round trip (RiskCue's 8 fields) with Label Studio or a spreadsheet:
    /// `annotate export` writes the tasks, `annotate import` reads the annotations back.
    Annotate {
        #[command(subcommand)]
        cmd: AnnotateCmd,
    },
    /// Per rank and stage: videos done, rejected, pending, and how each rank's last run ended;
    /// the last line lists the ranks to run again (exit 0 when every rank is complete, 5 when
    /// some are not), for scripts that resubmit only those.
    Status {
        /// A run directory or object-store URL (s3://bucket/prefix, …).
        run: PathBuf,
    },
    /// Remove leftovers no reader uses: partial downloads, temp files of a crashed writer, and
    /// with --superseded the shards of old settings set aside in RUN/_superseded/. Committed
    /// shards are never touched.
    Gc {
        /// A run directory or object-store URL (s3://bucket/prefix, …).
        run: String,
        /// Only what is at least this old (30m, 2h, 7d): younger leftovers may belong to a worker
        /// that is committing right now.
        #[arg(long, default_value = "1h", value_parser = vidcurate::gc::parse_age)]
        older_than: std::time::Duration,
        /// Also remove shards of superseded settings (RUN/_superseded/).
        #[arg(long)]
        superseded: bool,
        /// Print what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The run's response cache: `vidcurate cache stats RUN_DIR`.
    Cache {
        #[command(subcommand)]
        cmd: CacheCmd,
    },
    /// Batch mode of the model services: status, export and import of batch files.
    Batch {
        #[command(subcommand)]
        cmd: BatchCmd,
    },
    /// Expand a query file (queries/*.toml) and print every search query with its parameters.
    ///
    /// One line per query: the text sent as `q`, then its search parameters; the count last.
    /// Nothing is sent to YouTube.
    Queries {
        /// The query file(s).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per query instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Reproduce the papers' analyses of on-screen text from a run's Parquet, grouped by a column.
    ///
    /// Writes, for each group of COLUMN (e.g. label = fake/real), the hue distribution of
    /// creator-added text pixels (pixel- and region-weighted), saturation, value, position on a
    /// grid, area, aspect ratio, text over 8 time segments and shots per video, each as Parquet and
    /// CSV, and `stats` (KS / chi-square with n, p and effect size) comparing the first two groups.
    Analyze {
        /// The run directory.
        run_dir: PathBuf,
        /// Column to group by (any source column carried through, e.g. `label`).
        #[arg(long)]
        by: String,
        /// Output folder [default: RUN_DIR/analysis/<by>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only rows passing these conditions, e.g. `domain = demo-news and score >= 0.8` or
        /// `language in (en, fr)`: `and`-joined `column op value`, op one of = != < <= > >= in.
        #[arg(long = "where", value_name = "EXPR")]
        filter: Option<String>,
    },
    /// Read the text in images or videos (PP-OCRv4, RapidOCR 1.4.4's procedure).
    ///
    /// Prints one JSON object per image or sampled video frame:
    /// {"source", "frame", "timestamp_secs", "regions": [{"text", "score", "box": [[x,y] x4], "angle"}]}.
    /// Images are read by content (any extension), with EXIF orientation applied.
    Ocr {
        /// Images or videos.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// No detection: recognise each whole image as one text line (word crops).
        #[arg(long)]
        no_det: bool,
        /// No angle classification.
        #[arg(long)]
        no_cls: bool,
        /// Frames sampled uniformly from each video.
        #[arg(long, default_value_t = 16)]
        frames: u32,
        /// ONNX Runtime threads [default: the number of cores].
        #[arg(long)]
        threads: Option<usize>,
        /// Treat the inputs as consecutive frames and reuse what earlier ones found, as the
        /// `ocr` stage does: `on`, `verify` (read everything, count differences), or `off`.
        /// The inputs are cut into one run of consecutive items per thread.
        #[arg(long, value_enum, default_value_t = ReuseArg::Off)]
        reuse: ReuseArg,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ReuseArg {
    Off,
    On,
    Verify,
}

#[derive(Subcommand)]
enum AnnotateCmd {
    /// Write tasks.json (Label Studio import format, with the committee's label as a
    /// pre-annotation and the OCR text as a hint), label_config.xml (risk signal and accident
    /// spans on the video timeline, indicators, the first/then/afterwards description, the
    /// accident description, the yes/no risk label) and tasks.csv for the selected videos.
    #[command(
        after_help = "Example:\n  vidcurate annotate export data/runs/riskcue --out annot/ --media-url http://media.lab:8000\n  (create a Label Studio project with annot/label_config.xml, import annot/tasks.json)"
    )]
    Export {
        /// A run directory or object-store URL.
        run_dir: PathBuf,
        #[command(flatten)]
        opts: vidcurate::annotate::ExportOptions,
    },
    /// Read a Label Studio JSON export (or the filled-in tasks.csv) into
    /// RUN_DIR/annotations/annotations.parquet: one row per video and annotator plus the
    /// adjudicated row. Invalid annotations (end before start, times outside the video, a label
    /// not yes/no, a yes without a description, unknown tasks) are kept out with the task id and
    /// field; cancelled ones are counted. Importing the same export again changes nothing; a
    /// newer annotation of the same annotator replaces the older. Prints the agreement (Cohen's
    /// or Fleiss' kappa on the label, IoU of the risk-signal spans).
    Import {
        /// A run directory or object-store URL.
        run_dir: PathBuf,
        /// The export: Label Studio JSON, or the CSV from `annotate export` filled in.
        export: PathBuf,
        /// How a video with several annotators is decided: single, majority, reviewer:NAME.
        #[arg(long, default_value = "majority")]
        rule: vidcurate::annotate::Rule,
        /// Whose annotations a CSV holds.
        #[arg(long)]
        annotator: Option<String>,
    },
}

#[derive(Subcommand)]
enum BatchCmd {
    /// The batches of a run: per service, requests waiting, batches sent and their status.
    Status {
        /// A run directory (for a run on an object store: its --work-dir).
        run_dir: PathBuf,
    },
    /// Write the requests waiting for a batch as OpenAI batch input lines (JSONL), e.g. for
    /// `vllm run-batch -i FILE -o RESULTS -m MODEL`.
    ///
    /// The requests are those of services with `mode = "offline"` (or "batch") that the last
    /// run deferred; `custom_id` is each request's cache key. A Gemini service's lines are
    /// Gemini's `{key, request}` instead.
    Export {
        /// A run directory (for a run on an object store: its --work-dir).
        run_dir: PathBuf,
        /// Only this stage's requests (its id in the pipeline file).
        stage: String,
        /// Where to write [default: stdout].
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Read batch results (OpenAI's output format, which `vllm run-batch` writes) into the
    /// run's response cache; rerun the pipeline to use them.
    Import {
        /// A run directory (for a run on an object store: its --work-dir).
        run_dir: PathBuf,
        /// The stage whose requests the file answers (lines of other stages are ignored).
        stage: String,
        /// The results file (JSONL).
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum CacheCmd {
    /// Entries, hits, misses, tokens and estimated cost per service and model.
    ///
    /// Cost uses `usd_per_mtok_input` / `usd_per_mtok_output` of the run's `[services.*]`.
    Stats { run_dir: PathBuf },
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,vidcurate=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour only on a terminal: log files and CI output stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs();
    vidcurate::tls::ensure_provider();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vidcurate: error: {e:#}");
            let config = e.downcast_ref::<vidcurate::config::ConfigError>().is_some()
                || matches!(e.downcast_ref::<RunError>(), Some(RunError::Config(_)));
            let stopped = matches!(e.downcast_ref::<RunError>(), Some(RunError::Stopped(_)));
            ExitCode::from(if config {
                2
            } else if stopped {
                4
            } else {
                1
            })
        }
    }
}

/// One image to read: a file, or a frame already decoded from a video.
enum OcrItem {
    File(PathBuf),
    Frame {
        source: String,
        index: usize,
        timestamp_secs: f64,
        image: image::RgbImage,
    },
}

fn ocr_cmd(
    files: &[PathBuf],
    no_det: bool,
    no_cls: bool,
    frames: u32,
    threads: Option<usize>,
    reuse: ReuseArg,
) -> anyhow::Result<ExitCode> {
    use vidcurate::ocr::{FrameMemory, OcrEngine, OcrParams, Reuse, ReuseCounts, imgops};
    let reuse = match reuse {
        ReuseArg::Off => Reuse::Off,
        ReuseArg::On => Reuse::On,
        ReuseArg::Verify => Reuse::Verify,
    };
    let threads = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    let params = OcrParams {
        use_cls: !no_cls,
        ..Default::default()
    };
    let engine = OcrEngine::load(&vidcurate::paths::models_dir(), threads, params)
        .map_err(anyhow::Error::msg)?;
    let reused = std::sync::Mutex::new(ReuseCounts::default());
    let read = |img: &image::RgbImage,
                memory: &mut FrameMemory|
     -> Result<Vec<vidcurate::ocr::Region>, String> {
        if no_det {
            Ok(vec![engine.ocr_line(img)?])
        } else {
            let (regions, c) = engine.ocr_frame(img, memory, reuse)?;
            reused.lock().unwrap_or_else(|e| e.into_inner()).add(&c);
            Ok(regions)
        }
    };
    // Images that do not decode as images are tried as videos (sampled uniformly).
    let mut items = vec![];
    let mut failed = 0;
    for f in files {
        if image::ImageReader::open(f)
            .and_then(|r| r.with_guessed_format())
            .is_ok_and(|r| r.format().is_some())
        {
            items.push(OcrItem::File(f.clone()));
            continue;
        }
        let source = f.display().to_string();
        let probe = match vidcurate::clients::ffmpeg::probe(f) {
            Ok(p) => p,
            Err(e) => {
                eprintln!(
                    "vidcurate: {source}: neither an image nor a video ({}: {})",
                    e.reason, e.detail
                );
                failed += 1;
                continue;
            }
        };
        let n = frames.max(1);
        let targets: Vec<f64> = (0..n)
            .map(|i| probe.video_duration_secs * (i as f64 + 0.5) / n as f64)
            .collect();
        match vidcurate::clients::ffmpeg::grab_at(f, &targets, None) {
            Ok(grabs) => {
                items.extend(
                    grabs
                        .into_iter()
                        .enumerate()
                        .map(|(index, g)| OcrItem::Frame {
                            source: source.clone(),
                            index,
                            timestamp_secs: g.timestamp_secs,
                            image: g.image,
                        }),
                )
            }
            Err(e) => {
                eprintln!("vidcurate: {source}: {}", e.detail);
                failed += 1;
            }
        }
    }
    // One thread per OCR worker; results are printed in input order as they arrive.
    in_order_on_threads(
        &items,
        engine.workers(),
        reuse != Reuse::Off && !no_det,
        |item, memory: &mut FrameMemory| {
            match item {
            OcrItem::File(p) => imgops::load_image(p).and_then(|img| read(&img, memory)).map(|regions| {
                serde_json::json!({ "source": p.display().to_string(), "frame": null, "timestamp_secs": null, "regions": regions }).to_string()
            }),
            OcrItem::Frame { source, index, timestamp_secs, image } => read(image, memory).map(|regions| {
                serde_json::json!({ "source": source, "frame": index, "timestamp_secs": timestamp_secs, "regions": regions }).to_string()
            }),
        }
        },
        |r| match r {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("vidcurate: {e}");
                failed += 1;
            }
        },
    );
    if reuse != Reuse::Off && !no_det {
        let c = reused.into_inner().unwrap_or_else(|e| e.into_inner());
        eprintln!(
            "reuse: detection reused on {}/{} images; recognition reused on {}/{} lines",
            c.det_reused, c.frames, c.rec_reused, c.lines
        );
        if reuse == Reuse::Verify {
            eprintln!(
                "verify: {} images read differently than from scratch, {} reused texts differ, {} images' boxes moved more than {} px",
                c.text_mismatch,
                c.rec_mismatch,
                c.det_mismatch,
                vidcurate::ocr::reuse::QUAD_PX
            );
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// Runs `work` on every item with `threads` threads and hands the results to `emit` in input
/// order, as soon as each one's turn comes. `chained`: each thread takes one run of consecutive
/// items and carries its state `S` from one to the next; else items go to whichever thread is
/// free, each with a fresh state. A panic in `work` is that item's error (the printer must never
/// wait for a slot a dead thread would have filled).
fn in_order_on_threads<T: Sync, S: Default>(
    items: &[T],
    threads: usize,
    chained: bool,
    work: impl Fn(&T, &mut S) -> Result<String, String> + Sync,
    mut emit: impl FnMut(Result<String, String>),
) {
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<String, String>)>();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = threads.max(1);
    let per_chain = items.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let tx = tx.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || {
                let mut state = S::default();
                let mut k = 0;
                loop {
                    let i = if chained {
                        k += 1;
                        if k > per_chain {
                            break;
                        }
                        t * per_chain + k - 1
                    } else {
                        state = S::default();
                        next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    };
                    let Some(item) = items.get(i) else { break };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        work(item, &mut state)
                    }))
                    .unwrap_or_else(|p| {
                        let msg = vidcurate::error::panic_message(p.as_ref());
                        Err(format!("item {}: OCR failed: {msg}", i + 1))
                    });
                    if tx.send((i, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut waiting = std::collections::BTreeMap::new();
        let mut printed = 0;
        for (i, r) in rx {
            waiting.insert(i, r);
            while let Some(r) = waiting.remove(&printed) {
                emit(r);
                printed += 1;
            }
        }
    });
}

fn real_main(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Analyze {
            run_dir,
            by,
            out,
            filter,
        } => analyze_cmd(&run_dir, &by, out.as_deref(), filter.as_deref()),
        Cmd::Ocr {
            files,
            no_det,
            no_cls,
            frames,
            threads,
            reuse,
        } => ocr_cmd(&files, no_det, no_cls, frames, threads, reuse),
        Cmd::Queries { files, json } => queries_cmd(&files, json),
        Cmd::Rethreshold { run_dir, set } => rethreshold_cmd(&run_dir, &set),
        Cmd::Split { run_dir, opts } => split_cmd(&run_dir, opts),
        Cmd::Release { run_dir, opts } => release_cmd(&run_dir, opts),
        Cmd::Evaluate {
            release,
            predictions,
            opts,
        } => {
            let r = vidcurate::evaluate::evaluate(&release, &predictions, &opts)?;
            if opts.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", vidcurate::evaluate::render(&r));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Status { run } => status_cmd(&run),
        Cmd::Gc {
            run,
            older_than,
            superseded,
            dry_run,
        } => gc_cmd(&run, older_than, superseded, dry_run),
        Cmd::Cache {
            cmd: CacheCmd::Stats { run_dir },
        } => cache_stats_cmd(&run_dir),
        Cmd::Batch { cmd } => batch_cmd(cmd),
        Cmd::Annotate {
            cmd: AnnotateCmd::Export { run_dir, opts },
        } => {
            let rt = tokio::runtime::Runtime::new()?;
            let n = rt.block_on(vidcurate::annotate::export(&run_dir, &opts))?;
            println!(
                "{n} tasks: {}/tasks.json, label_config.xml, tasks.csv",
                opts.out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Annotate {
            cmd:
                AnnotateCmd::Import {
                    run_dir,
                    export,
                    rule,
                    annotator,
                },
        } => {
            let rt = tokio::runtime::Runtime::new()?;
            let r = rt.block_on(vidcurate::annotate::import(
                &run_dir,
                &export,
                &rule,
                annotator.as_deref(),
            ))?;
            print!("{}", vidcurate::annotate::render(&r));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::ListStages => list_stages_cmd(),
        Cmd::Validate { files } => validate_cmd(&files),
        Cmd::Run {
            file,
            out,
            quiet,
            dry_run,
            ranks,
        } => run_cmd(&file, out, quiet, dry_run, ranks),
    }
}

fn analyze_cmd(
    run_dir: &Path,
    by: &str,
    out: Option<&Path>,
    filter: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let filter = filter
        .map(vidcurate::analyze::filter::Filter::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let a = vidcurate::analyze::analyze(run_dir, by, out, filter.as_ref())
        .map_err(anyhow::Error::msg)?;
    println!("groups: {}", a.groups.join(", "));
    for (name, rows) in &a.tables {
        println!("{name}: {} rows", rows.len());
    }
    for s in &a.stats {
        println!("{}", s.cells().join("  "));
    }
    println!("tables: {}", a.out_dir.display());
    Ok(ExitCode::SUCCESS)
}

fn queries_cmd(files: &[PathBuf], json: bool) -> anyhow::Result<ExitCode> {
    for f in files {
        let (qf, _) = vidcurate::queries::QueryFile::load(f)?;
        let qs = qf.expand();
        for q in &qs {
            if json {
                println!("{}", serde_json::to_string(q)?);
            } else {
                let params: Vec<String> =
                    q.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
                if params.is_empty() {
                    println!("{}", q.text);
                } else {
                    println!("{}\t[{}]", q.text, params.join(" "));
                }
            }
        }
        eprintln!(
            "{}: {} queries (domain {}, {})",
            f.display(),
            qs.len(),
            qf.domain,
            qf.kind
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn rethreshold_cmd(
    run_dir: &Path,
    set: &[vidcurate::rethreshold::Override],
) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let r = rt.block_on(vidcurate::rethreshold::rethreshold(run_dir, set))?;
    println!("funnel with the pipeline's thresholds:");
    print!("{}", vidcurate::rethreshold::render(&r.before));
    println!("funnel with the new thresholds:");
    print!("{}", vidcurate::rethreshold::render(&r.after));
    println!("selection: {}", r.selection_file.display());
    if r.after.iter().any(|f| f.pending > 0) {
        println!(
            "pending videos were never scored by that stage: run the pipeline with the new select settings to score them"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn split_cmd(run_dir: &Path, opts: vidcurate::split::SplitOptions) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    let r = rt.block_on(vidcurate::split::split(run_dir, &opts))?;
    print!("{}", r.render());
    println!("split: {}", r.file);
    Ok(ExitCode::SUCCESS)
}

fn release_cmd(
    run_dir: &Path,
    opts: vidcurate::release::ReleaseOptions,
) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    let r = rt.block_on(vidcurate::release::release(run_dir, &opts))?;
    for (split, n) in &r.splits {
        println!("{split:<12} {n:>8} videos");
    }
    println!(
        "{} files, {} columns; card: {}",
        r.files,
        r.columns.len(),
        r.out.join("README.md").display()
    );
    Ok(ExitCode::SUCCESS)
}

fn status_cmd(run: &Path) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    let s = rt.block_on(vidcurate::status::status(run))?;
    print!("{}", vidcurate::status::render(&s));
    Ok(if s.ranks.iter().any(|r| r.unfinished()) {
        ExitCode::from(5)
    } else {
        ExitCode::SUCCESS
    })
}

fn gc_cmd(
    run: &str,
    older_than: std::time::Duration,
    superseded: bool,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
    let store = vidcurate::runtime::store::open_run(run, vidcurate::runtime::store::Access::Read)
        .with_context(|| run.to_string())?;
    let rt = tokio::runtime::Runtime::new()?;
    let r = rt.block_on(vidcurate::gc::gc(
        store.as_ref(),
        older_than,
        superseded,
        dry_run,
    ))?;
    let verb = if dry_run { "would remove" } else { "removed" };
    for (path, size) in &r.removed {
        println!("{verb} {path} ({size} bytes)");
    }
    let bytes: u64 = r.removed.iter().map(|(_, s)| s).sum();
    println!(
        "{verb} {} objects, {bytes} bytes; kept {} younger than {}s",
        r.removed.len(),
        r.young,
        older_than.as_secs()
    );
    Ok(ExitCode::SUCCESS)
}

fn cache_stats_cmd(run_dir: &Path) -> anyhow::Result<ExitCode> {
    use vidcurate::runtime::cache::{CacheHandle, ResponseCache};
    let location = run_dir.to_string_lossy().to_string();
    // A run on an object store: the answers every worker published, gathered in a temp cache.
    let gathered = tempfile::tempdir()?;
    let (path, manifest, shared) = if vidcurate::runtime::objects::is_url(&location) {
        let store =
            vidcurate::runtime::store::open_run(&location, vidcurate::runtime::store::Access::Read)
                .map_err(|e| RunError::io(location.clone(), e))?;
        let rt = tokio::runtime::Runtime::new()?;
        let handle = CacheHandle::shared(gathered.path(), store.clone(), 0);
        rt.block_on(handle.import_parts())?;
        let m = rt.block_on(vidcurate::runtime::manifest::load_at(
            store.as_ref(),
            vidcurate::runtime::manifest::MANIFEST,
        ));
        (ResponseCache::path_in(gathered.path()), m, true)
    } else {
        let m = vidcurate::runtime::manifest::read_local(run_dir);
        (ResponseCache::path_in(run_dir), m, false)
    };
    let Some(cache) = ResponseCache::open_existing(&path).map_err(|e| anyhow::anyhow!(e.detail))?
    else {
        println!(
            "{location}: no response cache (no API stage has run{})",
            if shared {
                ", or no worker published its answers yet"
            } else {
                ""
            }
        );
        return Ok(ExitCode::SUCCESS);
    };
    // Prices from the run's pipeline (its [services.*] tables), when it names them.
    #[derive(serde::Deserialize)]
    struct Services {
        #[serde(default)]
        services: std::collections::BTreeMap<String, vidcurate::config::ServiceConfig>,
    }
    let prices: std::collections::BTreeMap<String, vidcurate::config::Prices> = manifest
        .and_then(|m| toml::from_str::<Services>(&m.pipeline_toml).ok())
        .map(|s| {
            s.services
                .into_iter()
                .map(|(k, v)| (k, v.prices()))
                .collect()
        })
        .unwrap_or_default();
    println!(
        "{:<12} {:<28} {:>8} {:>8} {:>8} {:>8} {:>12} {:>12} {:>10}",
        "service",
        "method",
        "entries",
        "batch",
        "hits",
        "misses",
        "tokens_in",
        "tokens_out",
        "est_usd"
    );
    let (mut total, mut saved) = (0.0, 0.0);
    for s in cache.stats().map_err(|e| anyhow::anyhow!(e.detail))? {
        let p = prices.get(&s.service).copied().unwrap_or_default();
        let (live_in, live_out) = (
            s.input_tokens - s.batch_input_tokens,
            s.output_tokens - s.batch_output_tokens,
        );
        let usd = p.cost(live_in, live_out, false)
            + p.cost(s.batch_input_tokens, s.batch_output_tokens, true);
        saved += p.cost(s.batch_input_tokens, s.batch_output_tokens, false)
            - p.cost(s.batch_input_tokens, s.batch_output_tokens, true);
        total += usd;
        println!(
            "{:<12} {:<28} {:>8} {:>8} {:>8} {:>8} {:>12} {:>12} {:>10.4}",
            s.service,
            s.method,
            s.entries,
            s.batch_entries,
            s.hits,
            s.misses,
            s.input_tokens,
            s.output_tokens,
            usd
        );
    }
    if saved > 0.0 {
        println!(
            "batch answers are priced at the batch rate (usd_per_mtok_*_batch, default half): ${saved:.4} less than live"
        );
    }
    println!("estimated cost of the cached answers: ${total:.4} (hits cost nothing)");
    if shared {
        println!(
            "(answers every worker published to {location}/{}; hits and misses are counted in each worker's own --work-dir cache)",
            vidcurate::runtime::cache::PARTS
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn batch_cmd(cmd: BatchCmd) -> anyhow::Result<ExitCode> {
    use vidcurate::runtime::batch;
    match cmd {
        BatchCmd::Status { run_dir } => {
            let root = run_dir.join("batches");
            let mut any = false;
            for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                let dir = e.path();
                let q = batch::BatchQueue::default();
                q.attach(&dir).map_err(|e| anyhow::anyhow!(e.detail))?;
                let jobs = batch::load_jobs(&dir).map_err(|e| anyhow::anyhow!(e.detail))?;
                any = true;
                println!(
                    "service {}: {} requests waiting, {} batches",
                    e.file_name().to_string_lossy(),
                    q.pending(),
                    jobs.len()
                );
                for j in jobs {
                    println!(
                        "  {} {:<24} {:>6} requests  {:<12} {}",
                        j.name,
                        j.batch_id.as_deref().unwrap_or("(not created)"),
                        j.requests,
                        if j.status.is_empty() {
                            "new"
                        } else {
                            &j.status
                        },
                        if j.imported {
                            format!("imported: {} answers, {} errors", j.answered, j.errors)
                        } else {
                            String::new()
                        }
                    );
                }
            }
            if !any {
                println!(
                    "{}: no batches (no service in batch or offline mode has run)",
                    run_dir.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        BatchCmd::Export {
            run_dir,
            stage,
            out,
        } => {
            let n = match &out {
                Some(p) => {
                    let mut f = std::io::BufWriter::new(
                        std::fs::File::create(p).with_context(|| p.display().to_string())?,
                    );
                    let n = batch::export(&run_dir, Some(&stage), &mut f)
                        .map_err(|e| anyhow::anyhow!(e.detail))?;
                    std::io::Write::flush(&mut f)?;
                    n
                }
                None => batch::export(&run_dir, Some(&stage), &mut std::io::stdout().lock())
                    .map_err(|e| anyhow::anyhow!(e.detail))?,
            };
            eprintln!("{n} requests of stage {stage}");
            Ok(ExitCode::SUCCESS)
        }
        BatchCmd::Import {
            run_dir,
            stage,
            file,
        } => {
            if !run_dir.join("batches").is_dir() {
                anyhow::bail!(
                    "{}: no batch queues (batches/): run the pipeline with a service or stage in mode = \"offline\" first, then export its requests",
                    run_dir.display()
                );
            }
            let cache = vidcurate::runtime::cache::ResponseCache::open(
                &vidcurate::runtime::cache::ResponseCache::path_in(&run_dir),
            )
            .map_err(|e| anyhow::anyhow!(e.detail))?;
            let r = batch::import(&run_dir, &stage, &cache, &file)
                .map_err(|e| anyhow::anyhow!(e.detail))?;
            println!(
                "{}: {} answers into the response cache, {} errors{}",
                file.display(),
                r.answered,
                r.errors,
                if r.not_this_stage > 0 {
                    format!(
                        ", {} lines that are not requests of stage {stage} (ignored)",
                        r.not_this_stage
                    )
                } else {
                    String::new()
                }
            );
            if !r.unreadable.is_empty() {
                let shown: Vec<String> = r
                    .unreadable
                    .iter()
                    .take(10)
                    .map(|n| n.to_string())
                    .collect();
                eprintln!(
                    "{}: {} lines are not batch result lines (no custom_id or key) and were ignored: line {}{}",
                    file.display(),
                    r.unreadable.len(),
                    shown.join(", "),
                    if r.unreadable.len() > 10 { ", …" } else { "" }
                );
                return Ok(ExitCode::from(3));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list_stages_cmd() -> anyhow::Result<ExitCode> {
    println!("sources ([source] type = ...):");
    for (t, d) in vidcurate::stages::SOURCE_TYPES {
        println!("  {t:<10} {d}");
    }
    println!("stages ([[stages]] type = ...):");
    for k in vidcurate::stages::STAGE_KINDS {
        let (t, d) = (k.name, k.about);
        println!("  {t:<10} {d}");
    }
    Ok(ExitCode::SUCCESS)
}

fn validate_cmd(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut bad = 0;
    for f in files {
        match plan::load(f) {
            Ok(p) => {
                let chain: Vec<String> = p
                    .stages
                    .iter()
                    .map(|s| format!("{} ({})", s.id, s.kind))
                    .collect();
                println!(
                    "{}: ok: source {} -> {}",
                    f.display(),
                    p.source_kind,
                    chain.join(" -> ")
                );
            }
            Err(e) => {
                eprintln!("{e}");
                bad += 1;
            }
        }
    }
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn run_cmd(
    file: &Path,
    out: Option<PathBuf>,
    quiet: bool,
    dry_run: bool,
    ranks: RankArgs,
) -> anyhow::Result<ExitCode> {
    let rank = vidcurate::runtime::ranks::Rank::resolve(ranks.rank, ranks.world, &|k| {
        std::env::var(k).ok()
    })
    .map_err(RunError::Config)?;
    let plan = plan::load(file)?;
    // Stages with a line of their own for the summary (the prescreen's saved calls, OCR reuse).
    let summaries: Vec<(String, fn(&str, &vidcurate::runtime::StageCounts) -> String)> = plan
        .stages
        .iter()
        .filter_map(|s| {
            let f = vidcurate::stages::stage_kind(&s.kind)?.summary?;
            Some((s.id.clone(), f))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let opts = RunOptions {
        out,
        quiet,
        rank,
        repin: ranks.repin,
        work_dir: ranks.work_dir,
    };
    if dry_run {
        let d = rt.block_on(vidcurate::estimate::dry_run(plan, &opts))?;
        print!("{}", vidcurate::estimate::render(&d));
        return Ok(ExitCode::SUCCESS);
    }
    let report = rt.block_on(runner::run(plan, opts))?;
    eprintln!("run directory: {}", report.run_dir.display());
    eprintln!(
        "{:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "stage", "received", "computed", "reused", "rejected", "filtered", "forwarded"
    );
    for id in &report.order {
        if let Some(c) = report.counts.get(id) {
            eprintln!(
                "{:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                id,
                c.received,
                c.computed,
                c.reused,
                c.rejected + c.rejected_before,
                c.filtered,
                c.forwarded
            );
        }
    }
    for (id, line) in &summaries {
        if let Some(text) = report.counts.get(id).map(|c| line(id, c)) {
            if !text.is_empty() {
                eprintln!("{text}");
            }
        }
    }
    if report.passes > 1 {
        let b = report.batches;
        eprintln!(
            "{} passes: {} batches answered {} requests ({} with an error; see `vidcurate batch status`)",
            report.passes,
            b.jobs,
            b.answered + b.errors,
            b.errors
        );
    }
    if report.status == RunStatus::Interrupted {
        eprintln!("interrupted: rerun the same command to resume");
        return Ok(ExitCode::from(130));
    }
    let rejected = report.rejected();
    if rejected > 0 {
        eprintln!(
            "{rejected} rejected: see {}/rejects/",
            report.run_dir.display()
        );
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::in_order_on_threads;

    #[test]
    fn ordered_results_survive_a_panicking_worker() {
        for chained in [false, true] {
            let items: Vec<u32> = (0..20).collect();
            let mut got = vec![];
            in_order_on_threads(
                &items,
                3,
                chained,
                // The state counts the items this thread has seen in its current run.
                |&n, seen: &mut u32| {
                    *seen += 1;
                    if n == 7 {
                        panic!("model exploded");
                    }
                    std::thread::sleep(std::time::Duration::from_millis((20 - n as u64) % 5));
                    Ok(format!("{n}/{seen}"))
                },
                |r| got.push(r),
            );
            assert_eq!(got.len(), 20);
            for (i, r) in got.iter().enumerate() {
                if i == 7 {
                    let e = r.as_ref().unwrap_err();
                    assert!(e.contains("model exploded"), "{e}");
                    continue;
                }
                let (n, seen) = r.as_deref().unwrap().split_once('/').unwrap();
                assert_eq!(n, i.to_string());
                // Chained: runs of 7, 7 and 6 items, the state carried along each run.
                let want = if chained { i % 7 + 1 } else { 1 };
                assert_eq!(seen, want.to_string(), "item {i}, chained {chained}");
            }
        }
    }
}
