//! `vidcurate run`: plan a pipeline file and run it (or, with `--dry-run`, estimate it), then
//! print the per-stage summary.

use crate::error::{Exit, RunError};
use crate::runtime::runner::{self, RunOptions, RunStatus};
use std::path::PathBuf;

/// Several workers on one run directory (docs/src/cluster.md).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RankArgs {
    /// This worker's rank, 0..WORLD: it does the videos whose id hashes to it
    /// (blake3(video_id) mod WORLD). Default: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, or
    /// Kubernetes' JOB_COMPLETION_INDEX; else one process does every video.
    #[arg(long, requires = "world")]
    pub rank: Option<u32>,
    /// Number of ranks [default: SLURM_ARRAY_TASK_COUNT]. Pinned in RUN/run.json by the first
    /// worker; a worker with another world (or pipeline, or tool version) is refused.
    #[arg(long)]
    pub world: Option<u32>,
    /// Replace the run's pin (run.json) with this worker's settings: start the run over with a
    /// new world size or pipeline. Shards of the old settings are kept and set aside as usual.
    #[arg(long)]
    pub repin: bool,
    /// Local working folder for a run on an object store (media being decoded, the response
    /// cache) [default: a folder under the system temp dir].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

/// Run a pipeline (resumes an earlier run in the same directory).
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline file (TOML).
    pub file: PathBuf,
    /// Run directory [default: output.dir of the file, else data/runs/<name>]: a folder, or
    /// an object store: s3://bucket/prefix, gs://bucket/prefix, az://container/prefix
    /// (credentials and endpoint from the environment: AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP=true for http, …).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress bars (log lines are still written to stderr).
    #[arg(long, short)]
    pub quiet: bool,
    /// Pay for nothing: print what the run would do and cost, per stage and in total (YouTube
    /// calls and days of quota, model calls, tokens and USD live and in batch mode, frames
    /// and disk), counting what the run directory and its cache already hold as free. It only
    /// asks the model list of each service a stage sends frames to, and warns where it says
    /// the model takes text only.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub ranks: RankArgs,
    /// Serve the run's metrics for Prometheus at http://ADDR/metrics (e.g. 0.0.0.0:9464): per
    /// stage the funnel, videos computing and records queued; per service the answers, cache
    /// hits and misses, and tokens; every series labelled with the rank (docs/src/cluster.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// After the run, keep the endpoint up until Prometheus has read the final counts, at most
    /// this long.
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "metrics")]
    pub metrics_hold: u64,
    /// After the run, print where its time went on this machine: per stage and step (open,
    /// decode, rgb, jpeg, resize, det.resize, det, det.boxes, crop, cls, rec, reuse, colour,
    /// colour.lab, colour.clusters, layout, parquet, digest, models) the wall and CPU seconds
    /// and CPU per video, and how the CPU pool's time and the process's CPU add up
    /// (docs/src/benchmarks/e2e.md).
    #[arg(long, conflicts_with = "dry_run")]
    pub profile: bool,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    let rank = crate::runtime::ranks::Rank::resolve(a.ranks.rank, a.ranks.world, &|k| {
        std::env::var(k).ok()
    })
    .map_err(|e| RunError::Config(e.to_string()))?;
    // Bound before anything else: a bad address or a port in use stops here, before any work.
    let endpoint = match &a.metrics {
        Some(addr) => Some(crate::runtime::metrics::bind(addr)?),
        None => None,
    };
    let plan = crate::plan::load(&a.file)?;
    let summaries = crate::plan::summaries(&plan);
    let rt = crate::runtime::tokio_runtime()?;
    let opts = RunOptions {
        out: a.out,
        quiet: a.quiet,
        rank,
        repin: a.ranks.repin,
        work_dir: a.ranks.work_dir,
        metrics: endpoint
            .is_some()
            .then(|| crate::runtime::metrics::Hub::new(rank.rank, rank.world)),
    };
    if a.dry_run {
        let d = rt.block_on(crate::report::estimate::dry_run(plan, &opts))?;
        print!("{}", crate::report::estimate::render(&d));
        return Ok(Exit::Done);
    }
    let (file, text) = (plan.file.clone(), plan.text.clone());
    let replan = || crate::plan::plan_text(&file, text.clone()).map_err(RunError::from);
    let hold = std::time::Duration::from_secs(a.metrics_hold);
    if a.profile {
        crate::profile::enable();
    }
    let report = rt.block_on(runner::run_watched(plan, opts, endpoint, hold, &replan))?;
    print_summary(&report, &summaries);
    if let Some(p) = crate::profile::snapshot() {
        print!(
            "{}",
            crate::report::profile::render(&p, &report.order, &report.counts)
        );
    }
    if report.status == RunStatus::Interrupted {
        eprintln!("interrupted: rerun the same command to resume");
        return Ok(Exit::Interrupted);
    }
    let rejected = report.rejected();
    if rejected > 0 {
        eprintln!(
            "{rejected} rejected: see {}/rejects/",
            report.run_dir.display()
        );
        return Ok(Exit::Rejected);
    }
    Ok(Exit::Done)
}

fn print_summary(report: &runner::RunReport, summaries: &[crate::plan::SummaryLine]) {
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
    // What a rerun found changed in the inputs, per source and stage.
    for id in &report.order {
        if let Some(line) = report
            .counts
            .get(id)
            .and_then(|c| crate::runtime::rerun::summary_line(id, c))
        {
            eprintln!("{line}");
        }
    }
    for (id, line) in summaries {
        if let Some(text) = report.counts.get(id).map(|c| line(id, c))
            && !text.is_empty()
        {
            eprintln!("{text}");
        }
    }
    for (service, model, refused) in &report.dialects {
        eprintln!(
            "{}",
            crate::clients::llm::learnt_line(service, model, refused)
        );
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
}
