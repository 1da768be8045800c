//! Reading a CSV or JSONL manifest: its layout once (`open`), then its entries line by line.

use super::{Entries, Entry, Layout, LocalConfig, json_text};
use crate::error::{RunError, StageError};
use std::path::Path;

impl Layout {
    pub(super) fn csv(cfg: &LocalConfig, m: &Path) -> Result<(Self, u64), RunError> {
        let cfgerr = |msg: String| RunError::Config(format!("{}: {msg}", m.display()));
        let mut rdr = csv::ReaderBuilder::new()
            .flexible(true)
            .from_path(m)
            .map_err(|e| cfgerr(e.to_string()))?;
        let headers: Vec<String> = rdr
            .headers()
            .map_err(|e| cfgerr(e.to_string()))?
            .iter()
            .map(|h| h.trim().to_string())
            .collect();
        let pcol = headers
            .iter()
            .position(|h| *h == cfg.path_column)
            .ok_or_else(|| {
                cfgerr(format!(
                    "line 1: no `{}` column (columns: {})",
                    cfg.path_column,
                    headers.join(", ")
                ))
            })?;
        let icol = headers.iter().position(|h| *h == cfg.id_column);
        let extra_cols: Vec<usize> = (0..headers.len())
            .filter(|i| *i != pcol && Some(*i) != icol)
            .collect();
        let names = extra_cols.iter().map(|i| headers[*i].clone()).collect();
        // Counting only: a broken row counts too (it becomes a reject).
        let total = rdr.byte_records().count() as u64;
        let layout = Self {
            file: m.to_path_buf(),
            csv: true,
            pcol,
            icol,
            extra_cols,
            names,
            ..Default::default()
        };
        Ok((layout, total))
    }

    pub(super) fn jsonl(cfg: &LocalConfig, m: &Path) -> Result<(Self, u64), RunError> {
        use std::io::BufRead;
        let file = std::fs::File::open(m)
            .map_err(|e| RunError::Config(format!("{}: {e}", m.display())))?;
        let (mut names, mut total) = (Vec::<String>::new(), 0u64);
        for line in std::io::BufReader::new(file).lines() {
            let line = line.map_err(|e| RunError::Config(format!("{}: {e}", m.display())))?;
            if line.trim().is_empty() {
                continue;
            }
            total += 1;
            if let Ok(serde_json::Value::Object(o)) = serde_json::from_str(&line) {
                for k in o.keys() {
                    if *k != cfg.path_column && *k != cfg.id_column && !names.contains(k) {
                        names.push(k.clone());
                    }
                }
            }
        }
        let layout = Self {
            file: m.to_path_buf(),
            names,
            ..Default::default()
        };
        Ok((layout, total))
    }

    /// Manifest columns `title` and `description` fill the source table's columns of the same
    /// name (the judging stages read them there); other extra columns must not shadow a source
    /// column, or the tables would have two columns of one name. Returns the extras left.
    pub(super) fn take_metadata_columns(&mut self) -> Result<Vec<String>, RunError> {
        let source_cols = super::source_columns()?;
        if let Some(bad) = self
            .names
            .iter()
            .find(|n| source_cols.contains(n) && *n != "title" && *n != "description")
        {
            return Err(RunError::Config(format!(
                "{}: column `{bad}` has the name of a source table column; rename it",
                self.file.display()
            )));
        }
        let pos = |n: &str| self.names.iter().position(|x| x == n);
        (self.title, self.description) = (pos("title"), pos("description"));
        Ok(self
            .names
            .iter()
            .filter(|n| *n != "title" && *n != "description")
            .cloned()
            .collect())
    }

    fn split_metadata(&self, mut e: Entry) -> Entry {
        let (ti, di) = (self.title, self.description);
        if ti.is_none() && di.is_none() {
            return e;
        }
        e.title = ti.and_then(|i| e.extra.get(i).cloned().flatten());
        e.description = di.and_then(|i| e.extra.get(i).cloned().flatten());
        let mut i = 0;
        e.extra.retain(|_| {
            i += 1;
            Some(i - 1) != ti && Some(i - 1) != di
        });
        e
    }

    /// The manifest's entries, read as they are needed.
    pub(super) fn entries(self, cfg: LocalConfig) -> Result<Entries, RunError> {
        let m = self.file.clone();
        let base = m.parent().unwrap_or(Path::new(".")).to_path_buf();
        let cfgerr = move |msg: String| RunError::Config(format!("{}: {msg}", m.display()));
        let shown = self.file.display().to_string();
        if self.csv {
            let rdr = csv::ReaderBuilder::new()
                .flexible(true)
                .from_path(&self.file)
                .map_err(|e| cfgerr(e.to_string()))?;
            let n_extra = self.extra_cols.len();
            let it = rdr.into_records().enumerate().map(move |(n, row)| {
                let line = n as u32 + 2;
                let origin = format!("{shown}:{line}");
                let e = match row {
                    Ok(r) => {
                        let get =
                            |i: usize| r.get(i).map(|s| s.to_string()).filter(|s| !s.is_empty());
                        let extra = self.extra_cols.iter().map(|i| get(*i)).collect();
                        let (path, id) = (get(self.pcol), self.icol.and_then(get));
                        make_entry(&cfg, origin, line, &base, path, id, extra)
                    }
                    Err(err) => Entry::broken(origin, line, n_extra, err),
                };
                self.split_metadata(e)
            });
            return Ok(Box::new(it));
        }
        use std::io::BufRead;
        let file = std::fs::File::open(&self.file).map_err(|e| cfgerr(e.to_string()))?;
        let it = std::io::BufReader::new(file)
            .lines()
            .enumerate()
            .filter(|(_, l)| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
            .map(move |(n, l)| {
                let line = n as u32 + 1;
                let origin = format!("{shown}:{line}");
                let obj = match l.map_err(|e| e.to_string()).and_then(|l| {
                    serde_json::from_str::<serde_json::Value>(&l).map_err(|e| e.to_string())
                }) {
                    Ok(serde_json::Value::Object(o)) => Ok(o),
                    Ok(_) => Err("not a JSON object".to_string()),
                    Err(e) => Err(e),
                };
                let e = match obj {
                    Ok(o) => {
                        let extra = self.names.iter().map(|k| json_text(o.get(k))).collect();
                        let (path, id) = (
                            json_text(o.get(&cfg.path_column)),
                            json_text(o.get(&cfg.id_column)),
                        );
                        make_entry(&cfg, origin, line, &base, path, id, extra)
                    }
                    Err(err) => Entry::broken(origin, line, self.names.len(), err),
                };
                self.split_metadata(e)
            });
        Ok(Box::new(it))
    }
}

fn is_url(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    l.starts_with("http://") || l.starts_with("https://") || l.starts_with("ftp://")
}

fn make_entry(
    cfg: &LocalConfig,
    origin: String,
    line: u32,
    base: &Path,
    path: Option<String>,
    id: Option<String>,
    extra: Vec<Option<String>>,
) -> Entry {
    let id = id
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().to_string());
    // An id that cannot name a file is refused here, where the line is known; the rest go on.
    let unsafe_id = id.as_deref().and_then(crate::record::video_id_problem);
    let mut e = Entry {
        origin,
        line,
        id,
        extra,
        ..Default::default()
    };
    if let Some(why) = unsafe_id {
        e.problem = Some(StageError::data(
            "unsafe_id",
            format!("{}: {why}", e.origin),
        ));
        return e;
    }
    match path.map(|p| p.trim().to_string()).filter(|p| !p.is_empty()) {
        None => {
            e.problem = Some(StageError::data(
                "missing_path",
                format!("{}: no value in column `{}`", e.origin, cfg.path_column),
            ))
        }
        Some(p) if is_url(&p) && cfg.urls && !p.to_ascii_lowercase().starts_with("ftp") => {
            // The URL names the video until a download gives it bytes.
            if e.id.is_none() {
                e.id = Some(blake3::hash(p.as_bytes()).to_hex()[..16].to_string());
            }
            e.url = Some(p);
        }
        Some(p) if is_url(&p) => {
            e.problem = Some(StageError::data(
                "url_not_local",
                format!(
                    "{}: {p} is a URL; the local source reads files only (add a download stage)",
                    e.origin
                ),
            ))
        }
        Some(p) => e.path = Some(base.join(p)),
    }
    e
}
