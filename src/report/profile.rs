//! The table `run --profile` prints: per stage and step, calls, wall and CPU seconds and CPU
//! per video, then how the CPU pool's threads' time and the process's CPU time add up
//! (`crate::profile` counts them).

use crate::profile::{ASYNC, Acc, Profile};
use crate::runtime::StageCounts;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The CPU's model name (the numbers depend on it), from /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The profile as a table, stages in chain order (`order`), each stage's steps by CPU time.
pub fn render(p: &Profile, order: &[String], counts: &BTreeMap<String, StageCounts>) -> String {
    let secs = |d: std::time::Duration| d.as_secs_f64();
    let mut out = format!(
        "profile ({}; {} CPU-pool threads; wall {:.2} s; process CPU {:.2} s):\n",
        cpu_model(),
        p.pool_threads,
        secs(p.wall),
        secs(p.process_cpu)
    );
    let _ = writeln!(
        out,
        "{:<16} {:<16} {:>7} {:>9} {:>9} {:>13}",
        "stage", "step", "calls", "wall s", "CPU s", "CPU ms/video"
    );
    let rank = |s: &str| order.iter().position(|o| o == s).unwrap_or(usize::MAX);
    let mut rows: Vec<(&(String, String), &Acc)> = p.steps.iter().collect();
    rows.sort_by(|a, b| {
        (rank(&a.0.0), &a.0.0)
            .cmp(&(rank(&b.0.0), &b.0.0))
            .then(b.1.cpu.cmp(&a.1.cpu))
    });
    for ((stage, step), a) in rows {
        let videos = counts.get(stage).map_or(0, |c| c.computed);
        let per = match videos {
            0 => "-".to_string(),
            n => format!("{:.1}", secs(a.cpu) * 1e3 / n as f64),
        };
        let _ = writeln!(
            out,
            "{stage:<16} {step:<16} {:>7} {:>9.2} {:>9.2} {per:>13}",
            a.calls,
            secs(a.wall),
            secs(a.cpu)
        );
    }
    let (busy, idle, life) = (
        secs(p.pool_busy()),
        secs(p.pool_idle),
        secs(p.pool_lifetime),
    );
    let _ = writeln!(
        out,
        "CPU pool: {life:.2} thread-s ({} threads over the run): in steps {busy:.2} s + idle {idle:.2} s = {:.1} % of it",
        p.pool_threads,
        pct(busy + idle, life)
    );
    let (steps, process) = (secs(p.steps_cpu()), secs(p.process_cpu));
    let _ = writeln!(
        out,
        "CPU: {steps:.2} s in steps of the process's {process:.2} s ({:.1} %); the rest ran outside any step ({ASYNC} threads between steps, the engines' own threads, model compilation)",
        pct(steps, process)
    );
    out
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}
