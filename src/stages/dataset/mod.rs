//! `dataset` source: an existing benchmark's annotation files read into a run, with its labels,
//! events and splits, so a new benchmark can start from it (MVFNDB from FakeSV, HarmVideoBench
//! from MultiHateClip).
//!
//! Reads: the annotation file(s) of `format` (FakeSV's `data.json`, MultiHateClip's split TSVs:
//! see fakesv.rs and multihateclip.rs for their columns), the dataset's published id lists
//! (split_files.rs) or MultiHateClip's text.json (text_json.rs) when given, and, with
//! `media_dir`, whether `<media_dir>/<id>.<ext>` exists. Writes: the `source` table, one row
//! per video: the media path (or, with `media_url`, only the URL, for a `download` stage),
//! title and description where the dataset has them, the publish time as `published_at` (RFC
//! 3339, UTC), and extra columns carried through every table: `label` (mapped by `labels`),
//! `split`, and FakeSV's `event`, `publish_time` (as written) and `fold`, or MultiHateClip's
//! other columns with its Python-literal lists as JSON arrays (and text.json's
//! `dataset_transcript`, `llm_label`, `language_check`). Calls: nothing. Caches: nothing; `open` reads the files
//! whole, since splits and folds depend on every row, and keeps one entry per row (the datasets
//! hold thousands). Video id: the dataset's own. Rejects, each naming file:line: `bad_line`,
//! `missing_id`, `unsafe_id`, `unknown_label` (never dropped silently), `bad_list`,
//! `no_publish_time` (temporal split only), `duplicate_id` (naming the first line; the first
//! is kept), `listed_twice` (an id twice in the id lists, naming each list's file:line),
//! `bad_text` (a text.json entry of the wrong shape, naming text.json:line and the key), and
//! `missing_file` under `media_dir`; the other rows go on.
//!
//! Splits and folds (FakeSV; computed over the rows without a problem, media aside):
//! - `fold`: events (`keywords`) are placed whole, largest first (ties by event text), each in
//!   the fold holding the fewest videos so far (ties to the lower fold), folds numbered from 1,
//!   as FakeSV's event-based five folds keep one event in one fold. A row without an event is an
//!   event of its own. The result depends on the rows kept, not on their order.
//! - `split_by = "temporal"` (default), FakeSV's temporal split: rows sorted by publish time
//!   (ties in file order) and cut by cumulative share: sorted position i goes to the first split
//!   k with i < round(n · (share_1 + … + share_k) / Σ shares). Default 70/15/15 named train,
//!   valid, test (FakeSV's public split files hold 4002/773/720 of 5495).
//! - `split_by = "event_folds"`: `test` for the videos of fold `test_fold`, `train` for the rest.
//! - The dataset's published id lists (split_files.rs): `fold_files` give the `fold` column
//!   instead of the computed folds; `split_by = "files"` takes `split` from `split_files`
//!   (else from the fold lists, as `event_folds` does). A row in no list keeps an empty split
//!   (or fold); an id listed twice is a `listed_twice` reject naming every file:line.
//!
//! MultiHateClip's split is its file's: `splits` maps a file (as written in `annotations`) to a
//! split name, by default the file's stem; `text` joins its `text.json` (text_json.rs). The
//! settings and their checks are in settings.rs. What the lists and text.json leave unmatched
//! (rows in no list, listed ids or text.json entries without a row, rows without an entry) is
//! counted into the source's tally (the run summary's `source:` line and manifest.json) and
//! named in a warning.

mod fakesv;
mod multihateclip;
mod settings;
mod split_files;
mod text_json;

use crate::config::{ConfigError, Seg};
use crate::error::{RunError, StageError};
use crate::record::{Extras, Slot};
use crate::runtime::stage::{Source, SourceStream, StageContext};
use crate::stages::BuildCx;
use crate::stages::local::{Entry, identify, source_item};
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use settings::{DatasetConfig, Format, SplitBy};
use settings::{Media, Plan};

/// A publish time: what the temporal split orders by, and the source table's `published_at`.
#[derive(Debug, Clone, PartialEq)]
struct Published {
    ms: i64,
    rfc3339: String,
}

/// Why a row has no publish time.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum TimeProblem {
    /// The format gives none.
    #[error("no publish time")]
    NotGiven,
    /// The row has no `publish_time` field.
    #[error("no `publish_time`")]
    Missing,
    /// The value as the file shows it.
    #[error("cannot read publish_time `{0}` as a time")]
    Unreadable(String),
}

/// One annotation row as a format reader read it, before the checks every format shares.
#[derive(Debug)]
struct Row {
    /// `file:line`, for messages.
    origin: String,
    line: u32,
    id: Option<String>,
    /// The label as the dataset writes it.
    raw_label: Option<String>,
    title: Option<String>,
    description: Option<String>,
    /// The split the dataset gives (MultiHateClip: the file's).
    split: Option<String>,
    time: Result<Published, TimeProblem>,
    /// Aligned with the format's column names; `label`, `split` and `fold` are filled here.
    extra: Vec<Option<String>>,
    problem: Option<StageError>,
}

impl Row {
    fn new(origin: String, line: u32, n_extra: usize) -> Self {
        Self {
            origin,
            line,
            id: None,
            raw_label: None,
            title: None,
            description: None,
            split: None,
            time: Err(TimeProblem::NotGiven),
            extra: vec![None; n_extra],
            problem: None,
        }
    }

    fn broken(
        origin: String,
        line: u32,
        n_extra: usize,
        reason: &str,
        why: impl std::fmt::Display,
    ) -> Self {
        let mut row = Self::new(origin, line, n_extra);
        row.reject(reason, why);
        row
    }

    /// The row's first problem is the one reported.
    fn reject(&mut self, reason: &str, why: impl std::fmt::Display) {
        if self.problem.is_none() {
            let detail = format!("{}: {why}", self.origin);
            self.problem = Some(StageError::data(reason, detail));
        }
    }
}

/// The folds and splits the dataset's id lists give, per row (aligned with the rows); `None`:
/// no lists of that kind.
#[derive(Debug, Default)]
struct Listed {
    folds: Option<Vec<Option<u32>>>,
    splits: Option<Vec<Option<String>>>,
}

pub struct DatasetSource {
    cfg: DatasetConfig,
    /// Resolved annotation files and the split each gives (MultiHateClip).
    files: Vec<(PathBuf, String)>,
    labels: BTreeMap<String, String>,
    media: Media,
    plan: Plan,
    /// MultiHateClip's text.json.
    text: Option<PathBuf>,
    /// After `open`: one entry per row, with its publish time (RFC 3339).
    entries: Vec<(Entry, Option<String>)>,
    extras: Extras,
    /// After `open`: what the id lists and text.json left unmatched, for the tally.
    unmatched: Vec<(String, u64)>,
}

pub fn build(
    table: &toml::Table,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(Box<dyn Source>, serde_json::Value), ConfigError> {
    let mut cfg: DatasetConfig = bcx.src.typed(table, at)?;
    let settings::Resolved {
        files,
        labels,
        media,
        plan,
        text,
    } = settings::resolve(&mut cfg, at, bcx)?;
    let json = serde_json::to_value(&cfg).unwrap_or_default();
    let source = DatasetSource {
        cfg,
        files,
        labels,
        media,
        plan,
        text,
        entries: vec![],
        extras: Arc::new(vec![]),
        unmatched: vec![],
    };
    Ok((Box::new(source), json))
}

/// Where the column `name` is among the extras.
fn col(names: &[String], name: &str) -> Option<usize> {
    names.iter().position(|n| n == name)
}

/// The checks every format shares, in order (a row's first problem is reported): an id, one
/// that can name a file, a label in the map, a publish time when the split needs one, and an
/// id not kept before (the first row of an id without a problem is kept).
fn check_rows(rows: &mut [Row], labels: &BTreeMap<String, String>, needs_time: bool) {
    let known = labels.keys().cloned().collect::<Vec<_>>().join(", ");
    let mut first: HashMap<String, String> = HashMap::new();
    for row in rows.iter_mut().filter(|r| r.problem.is_none()) {
        let Some(id) = row.id.clone() else {
            row.reject("missing_id", "no video id");
            continue;
        };
        if let Some(why) = crate::record::video_id_problem(&id) {
            row.reject("unsafe_id", why);
            continue;
        }
        let raw = row.raw_label.as_deref().map(str::trim);
        match raw.and_then(|l| labels.get(l)) {
            Some(ours) => row.extra[0] = Some(ours.clone()),
            None => {
                let why = match raw {
                    Some(l) => format!("label {l:?} is not one of `labels` ({known})"),
                    None => "no label".into(),
                };
                row.reject("unknown_label", why);
                continue;
            }
        }
        if needs_time && let Err(why) = &row.time {
            let why =
                format!("{why}; the temporal split needs it (or set split_by = \"event_folds\")");
            row.reject("no_publish_time", why);
            continue;
        }
        match first.get(&id) {
            Some(at) => row.reject(
                "duplicate_id",
                format!("id {id:?} is listed before at {at}; the first is kept"),
            ),
            None => {
                first.insert(id, row.origin.clone());
            }
        }
    }
}

impl DatasetSource {
    /// A checked row as the entry the local source's machinery identifies and records.
    fn entry(&self, row: Row) -> (Entry, Option<String>) {
        let published = row.time.ok().map(|p| p.rfc3339);
        let mut e = Entry {
            origin: row.origin,
            line: row.line,
            id: row.id,
            title: row.title,
            description: row.description,
            extra: row.extra,
            problem: row.problem,
            ..Default::default()
        };
        if let (None, Some(id)) = (&e.problem, e.id.as_deref()) {
            match &self.media {
                Media::Dir { dir, exts } => e.path = Some(media_file(dir, exts, id)),
                Media::Url(t) => e.url = Some(t.replace("{id}", &url_escape(id))),
            }
        }
        (e, published)
    }
}

/// The first `<dir>/<id>.<ext>` that exists, else the first extension's (which `identify`
/// then rejects as `missing_file`).
fn media_file(dir: &Path, exts: &[String], id: &str) -> PathBuf {
    let at = |ext: &String| dir.join(format!("{id}.{ext}"));
    exts.iter()
        .map(at)
        .find(|p| p.is_file())
        .unwrap_or_else(|| at(&exts[0]))
}

/// An id as one URL path or query segment: bytes outside RFC 3986's unreserved set escaped.
fn url_escape(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The formats' extra columns must not be named like a source table column (MultiHateClip's
/// full release may have more columns than the public one).
fn check_names(names: &[String], files: &[(PathBuf, String)]) -> Result<(), RunError> {
    let source_cols = crate::stages::local::source_columns()?;
    match names.iter().find(|n| source_cols.contains(n)) {
        Some(bad) => Err(RunError::Config(format!(
            "{}: column `{bad}` has the name of a source table column",
            files[0].0.display()
        ))),
        None => Ok(()),
    }
}

#[async_trait]
impl Source for DatasetSource {
    fn provides(&self) -> &'static [Slot] {
        match self.media {
            Media::Dir { .. } => &[Slot::Source, Slot::Media],
            // Records with only a URL: a download stage must come first.
            Media::Url(_) => &[Slot::Source],
        }
    }

    async fn open(&mut self, _cx: &StageContext) -> Result<(), RunError> {
        let (names, mut rows) = self.read()?;
        check_names(&names, &self.files)?;
        let fakesv = self.cfg.format == Format::Fakesv;
        let temporal = self.plan.split_by == SplitBy::Temporal;
        check_rows(&mut rows, &self.labels, fakesv && temporal);
        self.unmatched.clear();
        if fakesv {
            let listed = self.listed(&mut rows)?;
            fakesv::place(&names, &mut rows, &self.plan, &listed);
        } else {
            if let Some(c) = col(&names, "split") {
                for r in &mut rows {
                    r.extra[c] = r.split.clone();
                }
            }
            if let Some(t) = self.text.clone() {
                self.join_text(&t, &names, &mut rows)?;
            }
        }
        self.entries = rows.into_iter().map(|r| self.entry(r)).collect();
        self.extras = Arc::new(names);
        Ok(())
    }

    fn extras(&self) -> Extras {
        self.extras.clone()
    }

    fn total(&self) -> Option<u64> {
        Some(self.entries.len() as u64)
    }

    fn run(self: Box<Self>, cx: StageContext) -> SourceStream {
        let (cpu, digests) = (cx.cpu.clone(), cx.media_digests.clone());
        let this = *self;
        // Every rank lists every row: one rank's counts are the run's.
        if cx.rank.rank == 0 {
            for (name, n) in &this.unmatched {
                cx.tally.add(name, *n);
            }
        }
        // Duplicates are found (and named with both lines) in `open`; this map stays empty.
        let mut seen = HashMap::new();
        futures::stream::iter(this.entries)
            .map(move |(e, published)| {
                let (cpu, digests) = (cpu.clone(), digests.clone());
                async move { (identify(cpu, digests, e).await, published) }
            })
            .buffered(cx.cpu.threads().max(2))
            .map(move |(e, published)| {
                source_item(e, &mut seen, true).map(|mut rec| {
                    rec.source.published_at = published;
                    rec
                })
            })
            .map(Ok)
            .boxed()
    }
}

impl DatasetSource {
    /// The annotation rows as the format reads them, with its extra columns (MultiHateClip's
    /// text.json ones after the TSVs'), once the files are there.
    fn read(&self) -> Result<(Vec<String>, Vec<Row>), RunError> {
        if let Media::Dir { dir, .. } = &self.media
            && !dir.is_dir()
        {
            let msg = format!("source media_dir {}: not a folder", dir.display());
            return Err(RunError::Config(msg));
        }
        if let Some((f, _)) = self.files.iter().find(|(f, _)| !f.is_file()) {
            let msg = format!("source annotations {}: no such file", f.display());
            return Err(RunError::Config(msg));
        }
        let file = &self.files[0].0;
        match self.cfg.format {
            Format::Fakesv => {
                let rows = fakesv::read(file)?;
                let temporal = self.plan.split_by == SplitBy::Temporal;
                if temporal && !rows.is_empty() && rows.iter().all(|r| r.time.is_err()) {
                    return Err(RunError::Config(format!(
                        "{}: no row has a publish_time, which the temporal split needs (FakeSV's public data.json has none); set split_by = \"event_folds\" or \"files\"",
                        file.display()
                    )));
                }
                Ok((fakesv::COLUMNS.map(String::from).to_vec(), rows))
            }
            Format::Multihateclip => {
                let (mut names, mut rows) = multihateclip::read(&self.files)?;
                if self.text.is_some() {
                    if let Some(c) = text_json::COLUMNS.iter().find(|c| col(&names, c).is_some()) {
                        return Err(RunError::Config(format!(
                            "{}: column `{c}` is also a column text.json gives",
                            file.display()
                        )));
                    }
                    names.extend(text_json::COLUMNS.map(String::from));
                    for r in &mut rows {
                        r.extra.resize(names.len(), None);
                    }
                }
                Ok((names, rows))
            }
        }
    }

    /// The folds and splits FakeSV's published id lists give (rows listed twice rejected).
    /// The rows in no list are counted once both kinds have rejected theirs.
    fn listed(&mut self, rows: &mut [Row]) -> Result<Listed, RunError> {
        let data = self.files[0].0.display().to_string();
        let named_lists = self.plan.split_lists.iter().map(|(_, f)| f.clone());
        let lists = [
            ("fold_files", "fold", self.plan.fold_lists.clone()),
            ("split_files", "split", named_lists.collect()),
        ];
        let mut got = vec![];
        for (what, column, files) in lists {
            if !files.is_empty() {
                got.push((what, column, split_files::assign(&files, what, rows)?));
            }
        }
        let mut listed = Listed::default();
        for (what, column, got) in got {
            let unlisted = (got.of_row.iter().zip(rows.iter()))
                .filter(|(k, r)| k.is_none() && r.problem.is_none())
                .count();
            self.note(&format!("{what}_unlisted"), unlisted, || {
                format!("rows of {data} are in no list of {what}: their {column} is empty")
            });
            self.note(&format!("{what}_no_row"), got.no_row.len(), || {
                let named = split_files::named(&got.no_row);
                format!("ids listed in {what} have no row in {data}: {named}")
            });
            if what == "fold_files" {
                let of = got.of_row.iter().map(|k| k.map(|k| k as u32 + 1));
                listed.folds = Some(of.collect());
            } else {
                let name = |k: usize| self.plan.split_lists[k].0.clone();
                listed.splits = Some(got.of_row.iter().map(|k| k.map(name)).collect());
            }
        }
        Ok(listed)
    }

    /// MultiHateClip's text.json joined to the rows by id; what matches nothing is counted.
    fn join_text(
        &mut self,
        file: &Path,
        names: &[String],
        rows: &mut [Row],
    ) -> Result<(), RunError> {
        let joined = text_json::read(file)?.join(names, rows);
        let shown = file.display();
        self.note("text_no_entry", joined.no_entry, || {
            format!("rows have no entry in {shown}: their text columns are empty")
        });
        self.note("text_no_row", joined.no_row.len(), || {
            let named = split_files::named(&joined.no_row);
            format!("entries of {shown} have no row in the annotations: {named}")
        });
        Ok(())
    }

    /// Keeps a count for the tally; one above zero is also a warning (`what` says of what).
    fn note(&mut self, name: &str, n: usize, what: impl FnOnce() -> String) {
        if n > 0 {
            tracing::warn!("source: {n} {}", what());
        }
        self.unmatched.push((name.to_string(), n as u64));
    }
}

/// The run summary's line for a dataset source: what its id lists and text.json left
/// unmatched (empty when it has neither).
pub fn summary(stage_id: &str, counts: &crate::runtime::StageCounts) -> String {
    let n = |k: &str| counts.tally.get(k).copied();
    let mut parts = vec![];
    for what in ["split_files", "fold_files"] {
        let unlisted = n(&format!("{what}_unlisted"));
        if let (Some(u), Some(x)) = (unlisted, n(&format!("{what}_no_row"))) {
            parts.push(format!(
                "{what}: {u} videos in no list, {x} listed ids without a row"
            ));
        }
    }
    if let (Some(a), Some(b)) = (n("text_no_entry"), n("text_no_row")) {
        parts.push(format!(
            "text: {a} videos without an entry, {b} entries without a row"
        ));
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!("{stage_id}: {}", parts.join("; ")),
    }
}

/// A format's own label map (raw label → label), for a source that names none.
fn default_labels(format: settings::Format) -> Vec<(&'static str, &'static str)> {
    match format {
        settings::Format::Fakesv => fakesv::default_labels(),
        settings::Format::Multihateclip => multihateclip::default_labels(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, label: &str) -> Row {
        let mut r = Row::new(format!("f:{id}"), 1, 2);
        r.id = Some(id.into());
        r.raw_label = Some(label.into());
        r
    }

    #[test]
    fn shared_checks_reject_with_the_first_problem_and_keep_the_first_of_an_id() {
        let labels: BTreeMap<String, String> = [("假".to_string(), "fake".to_string())].into();
        let mut rows = vec![
            row("a", "假"),
            row("../x", "假"),
            row("b", "真"),
            row("a", "假"),
            row("b", "假"),
            Row::new("f:6".into(), 6, 2),
        ];
        check_rows(&mut rows, &labels, false);
        let reason = |i: usize| rows[i].problem.as_ref().map(|p| p.reason.as_str());
        assert_eq!(reason(0), None);
        assert_eq!(rows[0].extra[0].as_deref(), Some("fake"));
        assert_eq!(reason(1), Some("unsafe_id"));
        assert_eq!(reason(2), Some("unknown_label"));
        assert!(rows[2].problem.as_ref().unwrap().detail.contains("\"真\""));
        assert_eq!(reason(3), Some("duplicate_id"));
        let dup = &rows[3].problem.as_ref().unwrap().detail;
        assert!(dup.starts_with("f:a: ") && dup.contains("at f:a;"), "{dup}");
        // The first `b` was rejected, so the second is the one kept.
        assert_eq!(reason(4), None);
        assert_eq!(reason(5), Some("missing_id"));
        let mut timed = vec![row("c", "假")];
        check_rows(&mut timed, &labels, true);
        assert_eq!(timed[0].problem.as_ref().unwrap().reason, "no_publish_time");
    }

    #[test]
    fn media_urls_escape_the_id() {
        assert_eq!(url_escape("BV1a-_.~"), "BV1a-_.~");
        assert_eq!(url_escape("a b/é"), "a%20b%2F%C3%A9");
    }
}
