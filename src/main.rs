//! The `vidcurate` command line: clap dispatch to `vidcurate::commands`, and the one table from
//! how a command ended (or the class of its error) to the exit code. The only place `anyhow`
//! would be used; nothing here needs it, since every command returns typed errors.

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;
use vidcurate::commands::{
    analyze, annotate, batch, cache, diff, evaluate, gc, harness, items, ocr, overlap, queries,
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
    Diff(diff::Args),
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
        Cmd::Diff(a) => diff::run(a),
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

/// Every command line the book, the README and the binary's own messages show parses as the
/// binary parses it, placeholders (`RUN`, `{}`, `$DIR`) filled: a hint that names a wrong
/// argument count or a flag that is gone fails here, not in front of a user.
#[cfg(test)]
mod shown_commands {
    use super::Cli;
    use clap::Parser;
    use std::path::{Path, PathBuf};

    fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, ext, out);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }

    /// Shell words up to the first unquoted `|`, `>`, `;`, `&` or ` #`: quotes group, and go.
    fn words(cmd: &str) -> Vec<String> {
        let (mut out, mut cur, mut quote, mut any) = (vec![], String::new(), None, false);
        for c in cmd.chars() {
            match (quote, c) {
                (None, '"' | '\'') => (quote, any) = (Some(c), true),
                (Some(q), c) if c == q => quote = None,
                (None, '|' | '>' | ';' | '&') => break,
                (None, '#') if !any && cur.is_empty() => break,
                (None, c) if c.is_whitespace() => {
                    if any || !cur.is_empty() {
                        out.push(std::mem::take(&mut cur));
                    }
                    any = false;
                }
                (_, c) => cur.push(c),
            }
        }
        if any || !cur.is_empty() {
            out.push(cur);
        }
        out
    }

    /// The arguments of each `vidcurate ...` line of a page's shell blocks (continuations
    /// joined, environment assignments before it skipped), with its line number.
    fn in_markdown(text: &str) -> Vec<(usize, Vec<String>)> {
        let (mut shell, mut out, mut acc) = (false, vec![], String::new());
        for (n, line) in text.lines().enumerate() {
            let t = line.trim();
            if let Some(lang) = t.strip_prefix("```") {
                shell = !shell && matches!(lang, "sh" | "bash" | "console" | "shell");
                continue;
            }
            if !shell {
                continue;
            }
            acc.push_str(t.trim_end_matches('\\'));
            acc.push(' ');
            if t.ends_with('\\') {
                continue;
            }
            let cmd = std::mem::take(&mut acc);
            let ws: Vec<String> = words(cmd.trim_start().trim_start_matches("$ "))
                .into_iter()
                .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                .collect();
            if ws.first().is_some_and(|w| w.ends_with("vidcurate")) {
                out.push((n + 1, ws[1..].to_vec()));
            }
        }
        out
    }

    /// Backquoted `vidcurate ...` in the sources that are whole commands: after the command's
    /// name comes an argument (`RUN`, `{}`), not a flag the text is naming (`release --out`).
    fn in_rust(text: &str) -> Vec<(usize, Vec<String>)> {
        let mut out = vec![];
        for (n, line) in text.lines().enumerate() {
            for span in line.split('`').skip(1).step_by(2) {
                let Some(rest) = span.strip_prefix("vidcurate ") else {
                    continue;
                };
                let ws = words(rest);
                let name = |w: &&String| w.chars().all(|c| c.is_ascii_lowercase() || c == '-');
                let after_name = ws.iter().find(|w| !name(w) || w.starts_with('-'));
                if after_name.is_some_and(|w| is_placeholder(w)) && !rest.contains('…') {
                    out.push((n + 1, ws));
                }
            }
        }
        out
    }

    fn is_placeholder(w: &str) -> bool {
        w.starts_with('{')
            || w.starts_with('$')
            || w.starts_with('<')
            || (w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
    }

    /// The words clap sees, placeholders filled: `[optional parts]` dropped, `a|b` the first.
    fn filled(ws: &[String]) -> Vec<String> {
        let mut out = vec!["vidcurate".to_string()];
        let mut optional = 0;
        for w in ws {
            optional += w.starts_with('[') as i32;
            if optional > 0 {
                optional -= w.ends_with(']') as i32;
                continue;
            }
            out.push(if is_placeholder(w) {
                "x".into()
            } else {
                w.clone()
            });
        }
        out
    }

    #[test]
    fn every_command_line_shown_parses() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut shown = vec![];
        let mut pages = vec![root.join("README.md")];
        files(&root.join("docs/src"), "md", &mut pages);
        for p in pages {
            for (n, c) in in_markdown(&std::fs::read_to_string(&p).unwrap()) {
                shown.push((format!("{}:{n}", p.display()), c));
            }
        }
        let mut sources = vec![];
        files(&root.join("src"), "rs", &mut sources);
        // This file's own format strings are not commands.
        for p in sources.into_iter().filter(|p| !p.ends_with("main.rs")) {
            for (n, c) in in_rust(&std::fs::read_to_string(&p).unwrap()) {
                shown.push((format!("{}:{n}", p.display()), c));
            }
        }
        let mut bad = vec![];
        for (at, ws) in &shown {
            if let Err(e) = Cli::try_parse_from(filled(ws)) {
                use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                    bad.push(format!("{at}: `vidcurate {}`: {}", ws.join(" "), e.kind()));
                }
            }
        }
        assert!(
            shown.len() > 100,
            "only {} command lines found",
            shown.len()
        );
        let n = shown.len();
        assert!(
            bad.is_empty(),
            "{} of {n} shown commands do not parse:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }

    #[test]
    fn placeholders_are_filled_and_optional_parts_dropped() {
        let ws = words("rehydrate RELEASE [--out DIR] {} $RUN --where \"a > 'b c'\" | head # x");
        assert_eq!(
            filled(&ws),
            [
                "vidcurate",
                "rehydrate",
                "x",
                "x",
                "x",
                "--where",
                "a > 'b c'"
            ]
        );
        let md = "```sh\nKEY=1 vidcurate run p.toml \\\n  --dry-run | head # c\nls\n```\n```toml\nvidcurate = 1\n```\n";
        let want: Vec<String> = vec!["run".into(), "p.toml".into(), "--dry-run".into()];
        assert_eq!(in_markdown(md), [(3, want)]);
        assert!(
            in_rust("say `vidcurate release --out` and `vidcurate batch import {} F`").len() == 1
        );
    }
}
