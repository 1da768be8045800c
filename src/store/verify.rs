//! What `vidcurate verify RUN [--repair]` does: checks every committed object of a run directory (local or
//! object store) against what its commit recorded, and reports each damaged or missing one with
//! what depends on it.
//!
//! Reads: the commit records (`_commits/`, see `store::commits`), the objects they name (stage
//! shards, their rejects shards, frames' JPEGs, selections), the shards that have no record (a
//! run of an earlier version, a crash right after a commit: checked by their footers alone), and
//! the manifest (stage order, for what depends on a stage's rows). Writes nothing, unless
//! `--repair`: then each damaged shard, and the shard whose frames are damaged or missing, is
//! moved to `_damaged/` with a note (nothing is deleted), so the next `vidcurate run` computes
//! exactly their videos again; a damaged rejects shard is moved and written again from its
//! slot's footer by that run.

use crate::error::RunError;
use crate::store::commits::{self, COMMITS_DIR, CommitRecord, DAMAGED_DIR, ObjectSum};
use crate::store::run::RunView;
use crate::store::shards::{REJECTS_DIR, decode_parquet};
use crate::store::{Access, Store};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// What is wrong with one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    Missing,
    Damaged(String),
}

/// As the report and the repair notes say it: "missing", "damaged: why".
impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Missing => f.write_str("missing"),
            Fault::Damaged(why) => write!(f, "damaged: {why}"),
        }
    }
}

/// One damaged or missing object and what depends on it.
#[derive(Debug, Clone)]
pub struct Problem {
    pub path: String,
    pub fault: Fault,
    /// The shard whose commit this object belongs to (itself for a shard).
    pub shard: Option<String>,
    pub stage: Option<String>,
    /// The videos whose rows are lost with it.
    pub videos: Vec<String>,
    /// What the object is: "shard", "rejects shard", "frame", "selection", "commit record".
    pub kind: &'static str,
}

#[derive(Debug, Default)]
pub struct Report {
    /// Objects checked, by kind.
    pub checked: BTreeMap<&'static str, usize>,
    /// Shards with no commit record (checked by their footer alone).
    pub unrecorded: usize,
    pub problems: Vec<Problem>,
}

/// An object to read and check: its expected sum (None: a shard with no record, checked by its
/// footer), whether it is a Parquet shard, and the problem to report if it is not right.
struct Check {
    sum: Option<ObjectSum>,
    path: String,
    parquet: bool,
    problem: Problem,
}

fn kind_of(path: &str) -> &'static str {
    if path.starts_with(&format!("{REJECTS_DIR}/")) {
        "rejects shard"
    } else if path.starts_with("selections/") {
        "selection"
    } else if path.ends_with(".parquet") {
        "shard"
    } else if path.starts_with("media/") {
        "frame"
    } else {
        "object"
    }
}

/// Reads every committed object and compares it with its record.
pub async fn verify(
    store: &Arc<dyn Store>,
    stages: &[String],
    jobs: usize,
) -> Result<Report, RunError> {
    let listing: HashMap<String, u64> = store
        .list_info("")
        .await
        .map_err(|e| store.io_error("", e))?
        .into_iter()
        .map(|o| (o.path, o.size))
        .collect();
    let mut report = Report::default();
    let (mut checks, recorded) = recorded_checks(store, &listing, &mut report).await?;
    checks.extend(unrecorded_checks(
        &listing,
        stages,
        &checks,
        &recorded,
        &mut report,
    ));
    let results: Vec<Result<(Check, Option<Fault>), RunError>> = futures::stream::iter(checks)
        .map(|c| {
            let exists = listing.contains_key(&c.path);
            check_one(store.clone(), c, exists)
        })
        .buffer_unordered(jobs.max(1))
        .collect()
        .await;
    let mut seen = std::collections::HashSet::new();
    for r in results {
        let (c, fault) = r?;
        *report.checked.entry(c.problem.kind).or_default() += 1;
        if let Some(fault) = fault
            && seen.insert(c.path.clone())
        {
            let mut p = c.problem;
            p.fault = fault;
            // A shard with no record: its videos are in its footer, if that reads.
            report.problems.push(p);
        }
    }
    report.problems.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(report)
}

/// A check of every object each commit record names (an unreadable record is a problem of
/// its own), and the objects recorded.
async fn recorded_checks(
    store: &Arc<dyn Store>,
    listing: &HashMap<String, u64>,
    report: &mut Report,
) -> Result<(Vec<Check>, std::collections::HashSet<String>), RunError> {
    let mut checks = vec![];
    let mut recorded = std::collections::HashSet::new();
    let mut records: Vec<&String> = listing
        .keys()
        .filter(|p| p.starts_with(&format!("{COMMITS_DIR}/")))
        .collect();
    records.sort();
    for rpath in records {
        let Some(object) = commits::object_of_record(rpath) else {
            continue;
        };
        let data = store
            .get(rpath)
            .await
            .map_err(|e| store.io_error(rpath, e))?;
        let rec: CommitRecord = match serde_json::from_slice(&data) {
            Ok(r) => r,
            Err(e) => {
                report.problems.push(Problem {
                    path: rpath.clone(),
                    fault: Fault::Damaged(format!("unreadable commit record: {e}")),
                    shard: Some(object.to_string()),
                    stage: None,
                    videos: vec![],
                    kind: "commit record",
                });
                continue;
            }
        };
        recorded.insert(rec.object.path.clone());
        checks.extend(record_checks(&rec));
    }
    Ok((checks, recorded))
}

/// The checks of one commit record: its shard, then each object it lists.
fn record_checks(rec: &CommitRecord) -> Vec<Check> {
    let problem = |path: &str, kind, videos: Vec<String>| Problem {
        path: path.to_string(),
        fault: Fault::Missing,
        shard: Some(rec.object.path.clone()),
        stage: rec.stage.clone(),
        videos,
        kind,
    };
    let mut checks = vec![Check {
        sum: Some(rec.object.clone()),
        path: rec.object.path.clone(),
        parquet: true,
        problem: problem(
            &rec.object.path,
            kind_of(&rec.object.path),
            rec.videos.clone(),
        ),
    }];
    for o in &rec.objects {
        let videos = o.video.iter().cloned().collect();
        checks.push(Check {
            sum: Some(o.clone()),
            path: o.path.clone(),
            parquet: o.path.ends_with(".parquet"),
            problem: problem(&o.path, kind_of(&o.path), videos),
        });
    }
    checks
}

/// Shards a commit wrote but recorded nowhere: their footer's own check is all there is.
fn unrecorded_checks(
    listing: &HashMap<String, u64>,
    stages: &[String],
    checks: &[Check],
    recorded: &std::collections::HashSet<String>,
    report: &mut Report,
) -> Vec<Check> {
    let mut unrecorded: Vec<&String> = listing
        .keys()
        .filter(|p| p.ends_with(".parquet") && !recorded.contains(*p))
        .filter(|p| {
            let top = p.split('/').next().unwrap_or_default();
            stages.iter().any(|s| s == top) || top == REJECTS_DIR || top == "selections"
        })
        .collect();
    unrecorded.sort();
    // A slot's rejects shard is recorded in its slot's footer and record, not on its own.
    let dependents: std::collections::HashSet<&str> = checks
        .iter()
        .filter(|c| c.problem.shard.as_deref() != Some(c.path.as_str()))
        .map(|c| c.path.as_str())
        .collect();
    let mut out = vec![];
    for p in unrecorded {
        if dependents.contains(p.as_str()) {
            continue;
        }
        report.unrecorded += 1;
        out.push(Check {
            sum: None,
            path: p.clone(),
            parquet: true,
            problem: Problem {
                path: p.clone(),
                fault: Fault::Missing,
                shard: Some(p.clone()),
                stage: Some(p.split('/').next().unwrap_or_default().to_string()),
                videos: vec![],
                kind: kind_of(p),
            },
        });
    }
    out
}

/// Reads one object and compares it with its record (size, BLAKE3), or, for Parquet without
/// one, decodes it to see its footer's own check.
async fn check_one(
    store: Arc<dyn Store>,
    c: Check,
    exists: bool,
) -> Result<(Check, Option<Fault>), RunError> {
    if !exists {
        return Ok((c, Some(Fault::Missing)));
    }
    let data = match store.get(&c.path).await {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((c, Some(Fault::Missing)));
        }
        Err(e) => return Err(store.io_error(&c.path, e)),
    };
    let mut fault = c.sum.as_ref().and_then(|s| s.mismatch(&data));
    if c.parquet && fault.is_none() {
        fault = decode_parquet(data, false)
            .err()
            .map(|e| format!("unreadable: {e}"));
    }
    Ok((c, fault.map(Fault::Damaged)))
}

/// Up to four ids, then how many more.
fn some_ids(ids: &[String]) -> String {
    let mut s = ids.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
    if ids.len() > 4 {
        s += &format!(", +{}", ids.len() - 4);
    }
    s
}

/// What depends on one problem object, in words.
fn depends(p: &Problem, later: &HashMap<String, Vec<String>>) -> String {
    let stage = p.stage.as_deref().unwrap_or("?");
    let after = later
        .get(stage)
        .filter(|l| !l.is_empty())
        .map(|l| format!(" and what later stages made from them ({})", l.join(", ")))
        .unwrap_or_default();
    match p.kind {
        "frame" => format!(
            "the frame of video {} in {}: its {stage} rows{after}",
            some_ids(&p.videos),
            p.shard.as_deref().unwrap_or("?")
        ),
        "rejects shard" => format!(
            "the reject rows of {} (written again from that slot's footer by the next run)",
            p.shard.as_deref().unwrap_or("?")
        ),
        "commit record" => "nothing is lost: the shard is then checked by its footer alone".into(),
        "selection" => "the selection's rows (write it again with `vidcurate rethreshold`)".into(),
        _ if p.videos.is_empty() => format!("the rows of its {stage} videos{after}"),
        _ => format!(
            "{} of stage {stage} ({}){after}",
            commits::videos(p.videos.len()),
            some_ids(&p.videos)
        ),
    }
}

/// The report as printed.
pub fn render(location: &str, r: &Report, later: &HashMap<String, Vec<String>>) -> String {
    let total: usize = r.checked.values().sum();
    let kinds: Vec<String> = r.checked.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let mut t = format!(
        "verify {location}: {total} objects checked ({}){}\n",
        kinds.join(", "),
        if r.unrecorded > 0 {
            format!(
                "; {} shards have no commit record (written by an earlier version, or committed right before a crash) and were checked by their footer alone",
                r.unrecorded
            )
        } else {
            String::new()
        }
    );
    if r.problems.is_empty() {
        t += "every object is as committed\n";
        return t;
    }
    t += &format!("{} damaged or missing:\n", r.problems.len());
    for p in &r.problems {
        t += &format!("  {} ({}): {}\n", p.path, p.kind, p.fault);
        t += &format!("      depends on it: {}\n", depends(p, later));
    }
    t
}

/// Sets aside what the report found, so the next run computes it again; returns the lines saying
/// what was moved.
pub async fn repair(store: &dyn Store, r: &Report) -> Result<Vec<String>, RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let mut lines = vec![];
    let mut shards_done = std::collections::HashSet::new();
    for p in &r.problems {
        let why = p.fault.to_string();
        // Moves one object aside; the line saying so.
        let aside = |path: String, why: String| async move {
            let to = commits::set_aside_damaged(store, &path, &why)
                .await
                .map_err(|e| io(&path, e))?;
            Ok::<_, RunError>(format!("moved {path} to {to}"))
        };
        let on_its_own = p.kind == "commit record" || p.kind == "rejects shard";
        if (on_its_own || p.kind == "frame") && p.fault != Fault::Missing {
            lines.push(aside(p.path.clone(), why.clone()).await?);
        }
        if on_its_own {
            continue;
        }
        // The shard itself, or the one whose rows refer to the damaged frame: its videos are
        // then not done, and the next run computes exactly them again.
        let Some(shard) = p.shard.clone() else {
            continue;
        };
        if !shards_done.insert(shard.clone()) {
            continue;
        }
        let cause = if shard == p.path {
            why.clone()
        } else {
            format!("{} is {why}", p.path)
        };
        let record = commits::record_path(&shard);
        for path in [shard, record] {
            if store.exists(&path).await.map_err(|e| io(&path, e))? {
                lines.push(aside(path, cause.clone()).await?);
            }
        }
    }
    Ok(lines)
}

/// A run directory checked: where it is, what is damaged, and the report to print.
pub struct Inspected {
    pub location: String,
    pub report: Report,
    pub text: String,
}

/// Checks every committed object of the run at `run`, `jobs` at once.
pub async fn inspect(run: &Path, jobs: usize) -> Result<Inspected, RunError> {
    let view = RunView::open(run).await?;
    let stages: Vec<String> = view.manifest.stages.iter().map(|s| s.id.clone()).collect();
    // What each stage's rows feed: every stage after it in the chain.
    let later: HashMap<String, Vec<String>> = stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), stages[i + 1..].to_vec()))
        .collect();
    let report = verify(&view.store, &stages, jobs).await?;
    let location = view.store.location();
    let text = render(&location, &report, &later);
    Ok(Inspected {
        location,
        report,
        text,
    })
}

/// Sets aside everything `report` found damaged and says what was moved, and what the next
/// run computes again.
pub async fn repair_run(run: &Path, location: &str, report: &Report) -> Result<String, RunError> {
    let store = crate::store::open_run(&run.to_string_lossy(), Access::Share)
        .map_err(|e| RunError::io(location.to_string(), e))?;
    let mut out = String::new();
    for line in repair(store.as_ref(), report).await? {
        out += &format!("{line}\n");
    }
    let videos: usize = report
        .problems
        .iter()
        .filter(|p| p.kind == "shard")
        .map(|p| p.videos.len())
        .sum();
    out += &format!(
        "repaired: everything damaged is under {DAMAGED_DIR}/ with a note beside it (nothing was deleted); the next `vidcurate run` computes the affected videos again{}\n",
        if videos > 0 {
            format!(" ({videos} recorded in the shards set aside)")
        } else {
            String::new()
        }
    );
    Ok(out)
}
