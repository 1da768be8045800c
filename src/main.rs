//! The `vidcurate` command line: clap dispatch to `vidcurate::commands`, and the one table from
//! how a command ended (or the class of its error) to the exit code. The only place `anyhow`
//! would be used; nothing here needs it, since every command returns typed errors.

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;
use vidcurate::commands::{
    analyze, annotate, batch, cache, evaluate, gc, harness, items, ocr, overlap, queries,
    questions, reference, rehydrate, release, rethreshold, run, split, status, takedown, tasks,
    validate, verify,
};
use vidcurate::error::{Exit, RunError};

/// `--version`: the version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("VIDCURATE_COMMIT"),
    ")"
);

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
    version = VERSION,
    about,
    long_about,
    after_help = "Logs: set RUST_LOG (e.g. RUST_LOG=debug). Examples:\n  vidcurate validate pipelines/demo.toml\n  vidcurate run pipelines/demo.toml --out data/runs/demo\n  vidcurate list-stages\n  vidcurate queries queries/protest.toml\n  YOUTUBE_API_KEY=... vidcurate run pipelines/riskcue-protest.toml\n  vidcurate rethreshold data/runs/demo --set relevance.min_score=5\n  vidcurate cache stats data/runs/riskcue-protest"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Run(run::Args),
    Validate(validate::Args),
    /// List the stage and source types a pipeline file can use.
    ListStages,
    Rethreshold(rethreshold::Args),
    Split(split::Args),
    Release(release::Args),
    Overlap(overlap::Args),
    Rehydrate(rehydrate::Args),
    Takedown(takedown::Args),
    Harness(harness::Args),
    Evaluate(evaluate::Args),
    /// Human annotation round trip (RiskCue's 8 fields) with Label Studio or a spreadsheet:
    /// `annotate export` writes the tasks, `annotate import` reads the annotations back.
    Annotate {
        #[command(subcommand)]
        cmd: annotate::Cmd,
    },
    Status(status::Args),
    Verify(verify::Args),
    Gc(gc::Args),
    /// The run's response cache: `vidcurate cache stats RUN_DIR`.
    Cache {
        #[command(subcommand)]
        cmd: cache::Cmd,
    },
    /// Batch mode of the model services: status, export and import of batch files.
    Batch {
        #[command(subcommand)]
        cmd: batch::Cmd,
    },
    Queries(queries::Args),
    Questions(questions::Args),
    Tasks(tasks::Args),
    Items(items::Args),
    Analyze(analyze::Args),
    Ocr(ocr::Args),
    Reference(reference::Args),
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

fn dispatch(cmd: Cmd) -> Result<Exit, RunError> {
    match cmd {
        Cmd::Run(a) => run::run(a),
        Cmd::Validate(a) => validate::run(a),
        Cmd::ListStages => validate::list_stages(),
        Cmd::Rethreshold(a) => rethreshold::run(a),
        Cmd::Split(a) => split::run(a),
        Cmd::Release(a) => release::run(a),
        Cmd::Overlap(a) => overlap::run(a),
        Cmd::Rehydrate(a) => rehydrate::run(a),
        Cmd::Takedown(a) => takedown::run(a),
        Cmd::Harness(a) => harness::run(a),
        Cmd::Evaluate(a) => evaluate::run(a),
        Cmd::Annotate { cmd } => annotate::run(cmd),
        Cmd::Status(a) => status::run(a),
        Cmd::Verify(a) => verify::run(a),
        Cmd::Gc(a) => gc::run(a),
        Cmd::Cache { cmd } => cache::run(cmd),
        Cmd::Batch { cmd } => batch::run(cmd),
        Cmd::Queries(a) => queries::run(a),
        Cmd::Questions(a) => questions::run(a),
        Cmd::Tasks(a) => tasks::run(a),
        Cmd::Items(a) => items::run(a),
        Cmd::Analyze(a) => analyze::run(a),
        Cmd::Ocr(a) => ocr::run(a),
        Cmd::Reference(a) => reference::run(a, &Cli::command()),
    }
}

/// The exit-code table (the book: docs/src/reference/exit-codes.md): one place for every command.
fn exit_code(r: &Result<Exit, RunError>) -> u8 {
    match r {
        Ok(Exit::Done) => 0,
        Ok(Exit::Rejected) => 3,
        Ok(Exit::Found) => 1,
        Ok(Exit::Invalid) | Err(RunError::Config(_)) => 2,
        Err(RunError::Stopped(_)) => 4,
        Ok(Exit::Unfinished) => 5,
        Ok(Exit::Interrupted) => 130,
        Err(RunError::Io { .. } | RunError::Internal(_) | RunError::At { .. }) => 1,
    }
}

/// The error and each of its causes, joined by ": " (the file or object first, then why).
fn message(e: &RunError) -> String {
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// A reader that closed early (`vidcurate queries FILE | head -1`) is not an error: a command
/// whose printing finds the pipe closed stops quietly with exit 0, as `head`'s caller expects,
/// instead of panicking with a backtrace. Every other panic is reported as before.
fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    init_logs();
    vidcurate::tls::ensure_provider();
    let r = dispatch(cli.cmd);
    if let Err(e) = &r {
        eprintln!("vidcurate: error: {}", message(e));
    }
    ExitCode::from(exit_code(&r))
}
