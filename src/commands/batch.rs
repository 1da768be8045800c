//! `vidcurate batch`: the batch queues of a run's model services: their status, and the
//! export and import of batch files for services in offline mode. Reads and writes
//! `RUN/batches/` and the run's response cache; calls nothing.

use crate::error::{Exit, RunError};
use crate::store::batch;
use std::path::{Path, PathBuf};

/// Batch mode of the model services: status, export and import of batch files.
#[derive(clap::Subcommand)]
pub enum Cmd {
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

pub fn run(cmd: Cmd) -> Result<Exit, RunError> {
    match cmd {
        Cmd::Status { run_dir } => status(&run_dir),
        Cmd::Export {
            run_dir,
            stage,
            out,
        } => export(&run_dir, &stage, out.as_deref()),
        Cmd::Import {
            run_dir,
            stage,
            file,
        } => import(&run_dir, &stage, &file),
    }
}

fn status(run_dir: &Path) -> Result<Exit, RunError> {
    let root = run_dir.join("batches");
    let mut any = false;
    for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let dir = e.path();
        let q = batch::BatchQueue::default();
        q.attach(&dir)?;
        let jobs = batch::load_jobs(&dir)?;
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
    Ok(Exit::Done)
}

fn export(run_dir: &Path, stage: &str, out: Option<&Path>) -> Result<Exit, RunError> {
    let n = match out {
        Some(p) => {
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(p).map_err(|e| RunError::at(p.display().to_string(), e))?,
            );
            let n = batch::export(run_dir, Some(stage), &mut f)?;
            std::io::Write::flush(&mut f).map_err(|e| RunError::at(p.display().to_string(), e))?;
            n
        }
        None => batch::export(run_dir, Some(stage), &mut std::io::stdout().lock())?,
    };
    eprintln!("{n} requests of stage {stage}");
    Ok(Exit::Done)
}

fn import(run_dir: &Path, stage: &str, file: &Path) -> Result<Exit, RunError> {
    if !run_dir.join("batches").is_dir() {
        return Err(RunError::Internal(format!(
            "{}: no batch queues (batches/): run the pipeline with a service or stage in mode = \"offline\" first, then export its requests",
            run_dir.display()
        )));
    }
    let cache = crate::store::cache::ResponseCache::open(
        &crate::store::cache::ResponseCache::path_in(run_dir),
    )?;
    let r = crate::clients::llm::import(run_dir, stage, &cache, file)?;
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
        return Ok(Exit::Rejected);
    }
    Ok(Exit::Done)
}
