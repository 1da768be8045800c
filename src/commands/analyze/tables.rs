//! The run's tables as `analyze` reads them, and their columns as plain vectors: the frames,
//! shots and OCR tables of one fingerprint, through the same reader as resume and `rethreshold`.
//! Reads the run directory; writes the analysis folder back into it (`publish`).

use super::*;

/// The run's tables as `analyze` reads them: the typed manifest names each stage's id and
/// fingerprint, and only shards of that fingerprint are read, through the same reader as resume
/// and `rethreshold` (shards of a changed setting that a later run has not yet set aside never
/// mix in).
pub(super) struct RunTables {
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) store: std::sync::Arc<dyn crate::store::Store>,
    pub(super) manifest: crate::store::manifest::Manifest,
    /// The columns `--where` reads: decoded with every table, so the filter sees them.
    pub(super) filter_columns: Vec<String>,
}

impl RunTables {
    /// Copies the files of `dir` into the run directory under `prefix`; the URL they went to.
    pub(super) fn publish(&self, dir: &Path, prefix: &str) -> Result<PathBuf, AnalyzeError> {
        let entries = std::fs::read_dir(dir).map_err(|e| AnalyzeError::io(dir, e))?;
        for entry in entries {
            let path = entry.map_err(|e| AnalyzeError::io(dir, e))?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let key = format!("{prefix}/{name}");
            self.rt
                .block_on(self.store.put_file(&key, &path))
                .map_err(|e| AnalyzeError::Io {
                    path: format!("{}/{key}", self.store.location()),
                    source: e,
                })?;
        }
        Ok(PathBuf::from(format!("{}/{prefix}", self.store.location())))
    }

    /// The run as every command opens it (`RunView`), with the runtime its reads block on.
    pub(super) fn open(run: &Path) -> Result<Self, RunError> {
        let rt = crate::commands::tokio_runtime()?;
        let view = rt.block_on(crate::store::run::RunView::open(run))?;
        Ok(Self {
            rt,
            store: view.store,
            manifest: view.manifest,
            filter_columns: vec![],
        })
    }

    /// The id of the first stage of `kind`.
    pub(super) fn stage_id(&self, kind: &str) -> Option<String> {
        self.manifest
            .stages
            .iter()
            .find(|s| s.kind == kind)
            .map(|s| s.id.clone())
    }

    /// The rows of stage `id` under its current fingerprint: only `columns` (and the filter's)
    /// decoded, those the table has.
    pub(super) fn batches(
        &self,
        id: &str,
        columns: &[&str],
    ) -> Result<Vec<RecordBatch>, AnalyzeError> {
        let st = self
            .manifest
            .stages
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| AnalyzeError::Column(format!("no stage {id} in the manifest")))?;
        self.rt
            .block_on(crate::store::shards::read_table_columns(
                &self.store,
                &st.id,
                &st.fingerprint,
                &columns
                    .iter()
                    .copied()
                    .chain(self.filter_columns.iter().map(String::as_str))
                    .collect::<Vec<_>>(),
            ))
            .map(|v| v.batches)
            .map_err(AnalyzeError::Run)
    }

    /// `batches`, a shard at a time: the working set is one shard, whatever the table's size.
    pub(super) fn each_batch(
        &self,
        id: &str,
        columns: &[&str],
        each: &mut dyn FnMut(RecordBatch) -> Result<(), AnalyzeError>,
    ) -> Result<(), AnalyzeError> {
        let st = self
            .manifest
            .stages
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| AnalyzeError::Column(format!("no stage {id} in the manifest")))?;
        let columns: Vec<&str> = columns
            .iter()
            .copied()
            .chain(self.filter_columns.iter().map(String::as_str))
            .collect();
        // The callback's own error, carried through the store's error type and back.
        let mut failed = None;
        let r = self.rt.block_on(crate::store::shards::for_each_batch(
            &self.store,
            &st.id,
            &st.fingerprint,
            &columns,
            |b| match each(b) {
                Ok(()) => Ok(()),
                Err(e) => {
                    failed = Some(e);
                    Err(RunError::Internal("stopped".into()))
                }
            },
        ));
        match (failed, r) {
            (Some(e), _) => Err(e),
            (None, r) => r.map_err(AnalyzeError::Run),
        }
    }
}

/// `--where` applied to a batch (None when the table lacks one of its columns).
pub(super) type BatchFilter<'a> =
    &'a dyn Fn(RecordBatch) -> Result<Option<RecordBatch>, AnalyzeError>;

/// Key footage over 8 equal segments: per group, the mean over videos of the share of each
/// segment's sampled frames that show creator-added text (`with_text`: (video, frame) pairs).
pub(super) fn segment_rows(
    run_tables: &RunTables,
    fid: &str,
    pid: &str,
    by: &str,
    filtered: BatchFilter,
    with_text: &super::regions::TextFrames,
    groups: &[String],
) -> Result<Vec<DistRow>, AnalyzeError> {
    let mut out = vec![];
    let mut duration: HashMap<String, f64> = HashMap::new();
    for b in run_tables.batches(pid, &[COL_VIDEO_ID, "video_duration_secs"])? {
        let (ids, d) = (
            col_str(&b, COL_VIDEO_ID)?,
            col_f64(&b, "video_duration_secs")?,
        );
        for (i, id) in ids.into_iter().enumerate() {
            duration.insert(id.unwrap_or_default(), d[i]);
        }
    }
    // video → (group, frames with text per segment, frames per segment): one entry per
    // video, looked up without allocating (a frames table has a row per sampled frame), its
    // group an index into `names` and its counts 32-bit (a video's entry was 600 bytes, most
    // of `analyze`'s memory at ten million regions).
    type Segments = ([u32; 8], [u32; 8]);
    let mut names: Vec<String> = vec![];
    let mut per_video: HashMap<String, Vec<(u32, Segments)>> = HashMap::new();
    let mut skipped = false;
    let columns = [COL_VIDEO_ID, by, "frame_index", "timestamp_secs"];
    run_tables.each_batch(fid, &columns, &mut |b| {
        // A filter on region columns cannot select frames: the segment analysis is skipped.
        let Some(b) = (if skipped { None } else { filtered(b)? }) else {
            skipped = true;
            return Ok(());
        };
        let utf8 = |name: &str| -> Result<arrow::array::ArrayRef, AnalyzeError> {
            let c = b
                .column_by_name(name)
                .ok_or_else(|| AnalyzeError::Column(format!("no column `{name}`")))?;
            Ok(arrow::compute::cast(c, &arrow::datatypes::DataType::Utf8)?)
        };
        let (ids, grp) = (utf8(COL_VIDEO_ID)?, utf8(by)?);
        let (ids, grp) = (ids.as_string::<i32>(), grp.as_string::<i32>());
        let (idx, ts) = (col_u32(&b, "frame_index")?, col_f64(&b, "timestamp_secs")?);
        for i in 0..b.num_rows() {
            let id = if ids.is_valid(i) { ids.value(i) } else { "" };
            let Some(d) = duration.get(id).filter(|d| **d > 0.0) else {
                continue;
            };
            let seg = ((ts[i] / d * 8.0) as usize).min(7);
            let g = if grp.is_valid(i) {
                grp.value(i)
            } else {
                "(null)"
            };
            let g = match names.iter().position(|n| n == g) {
                Some(k) => k as u32,
                None => {
                    names.push(g.to_string());
                    (names.len() - 1) as u32
                }
            };
            if !per_video.contains_key(id) {
                per_video.insert(id.to_string(), Vec::with_capacity(1));
            }
            let groups = per_video.get_mut(id).expect("inserted above");
            let e = match groups.iter().position(|(gg, _)| *gg == g) {
                Some(k) => &mut groups[k].1,
                None => {
                    groups.push((g, Default::default()));
                    &mut groups.last_mut().expect("pushed").1
                }
            };
            e.1[seg] += 1;
            if with_text.contains(id, idx.value(i)) {
                e.0[seg] += 1;
            }
        }
        Ok(())
    })?;
    // In (group, video) order, as the means are summed.
    let mut per_video: Vec<((&str, &str), &Segments)> = per_video
        .iter()
        .flat_map(|(id, gs)| {
            let names = &names;
            gs.iter()
                .map(move |(g, e)| ((names[*g as usize].as_str(), id.as_str()), e))
        })
        .collect();
    per_video.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let seg_bins: Vec<(f64, f64, String)> = (0..8)
        .map(|i| {
            (
                i as f64 / 8.0,
                (i + 1) as f64 / 8.0,
                format!("segment {}", i + 1),
            )
        })
        .collect();
    for g in groups {
        let vids: Vec<&Segments> = per_video
            .iter()
            .filter(|((gg, _), _)| gg == g)
            .map(|(_, v)| *v)
            .collect();
        let mut mean = [0f64; 8];
        for s in 0..8 {
            let shares: Vec<f64> = vids
                .iter()
                .filter(|v| v.1[s] > 0)
                .map(|v| f64::from(v.0[s]) / f64::from(v.1[s]))
                .collect();
            mean[s] = shares.iter().sum::<f64>() / shares.len().max(1) as f64;
        }
        // `count` is the mean share here; `share` normalises it over the 8 segments.
        out.extend(dist(g, &seg_bins, &mean));
    }
    Ok(out)
}

/// Shots per video, binned 1..10+, per group; and the raw counts per group for the KS test.
#[allow(clippy::type_complexity)]
pub(super) fn shot_rows(
    run_tables: &RunTables,
    sid: &str,
    by: &str,
    filtered: BatchFilter,
) -> Result<(Vec<DistRow>, Vec<(String, Vec<f64>)>), AnalyzeError> {
    let (mut rows, mut values) = (vec![], vec![]);
    let mut per_video: BTreeMap<String, (String, u32)> = BTreeMap::new();
    for b in run_tables.batches(sid, &[COL_VIDEO_ID, by, "shots_in_video"])? {
        let Some(b) = filtered(b)? else { break };
        let (ids, grp) = (col_str(&b, COL_VIDEO_ID)?, col_str(&b, by)?);
        let n = col_u32(&b, "shots_in_video")?;
        for i in 0..b.num_rows() {
            per_video.insert(
                ids[i].clone().unwrap_or_default(),
                (
                    grp[i].clone().unwrap_or_else(|| "(null)".into()),
                    n.value(i),
                ),
            );
        }
    }
    let shot_bins: Vec<(f64, f64, String)> = (1..=10)
        .map(|k| {
            (
                k as f64,
                (k + 1) as f64,
                if k == 10 { "10+".into() } else { k.to_string() },
            )
        })
        .collect();
    let mut shot_groups: Vec<String> = per_video.values().map(|v| v.0.clone()).collect();
    shot_groups.sort();
    shot_groups.dedup();
    for g in &shot_groups {
        let mut c = vec![0f64; 10];
        let mut vals = vec![];
        for (gg, n) in per_video.values() {
            if gg == g {
                c[(*n as usize).clamp(1, 10) - 1] += 1.0;
                vals.push(*n as f64);
            }
        }
        rows.extend(dist(g, &shot_bins, &c));
        values.push((g.clone(), vals));
    }
    Ok((rows, values))
}

pub(super) fn col_str(b: &RecordBatch, name: &str) -> Result<Vec<Option<String>>, AnalyzeError> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| AnalyzeError::Column(format!("no column `{name}`")))?;
    let c = arrow::compute::cast(c, &arrow::datatypes::DataType::Utf8)?;
    let s = c.as_string::<i32>();
    Ok((0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect())
}

pub(super) fn col_f64(b: &RecordBatch, name: &str) -> Result<Vec<f64>, AnalyzeError> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| AnalyzeError::Column(format!("no column `{name}`")))?;
    let c = arrow::compute::cast(c, &arrow::datatypes::DataType::Float64)?;
    Ok(c.as_primitive::<Float64Type>().values().to_vec())
}

/// A UInt32 column, as the stages write indices and counts.
pub(super) fn col_u32(
    b: &RecordBatch,
    name: &str,
) -> Result<arrow::array::UInt32Array, AnalyzeError> {
    Ok(b.column_by_name(name)
        .ok_or_else(|| AnalyzeError::Column(format!("no {name}")))?
        .as_primitive::<UInt32Type>()
        .clone())
}

/// A histogram column read in place: `add(row, acc)` adds row's counts into `acc` (bins past
/// its length dropped), without a vector per row.
pub(super) struct HistColumn {
    offsets: Vec<usize>,
    values: arrow::array::UInt32Array,
}

impl HistColumn {
    pub(super) fn add(&self, row: usize, acc: &mut [f64]) {
        let (s, e) = (self.offsets[row], self.offsets[row + 1]);
        for (a, v) in acc.iter_mut().zip(&self.values.values()[s..e]) {
            *a += f64::from(*v);
        }
    }
}

pub(super) fn col_hist(b: &RecordBatch, name: &str) -> Result<HistColumn, AnalyzeError> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| AnalyzeError::Column(format!("no column `{name}`")))?;
    // serde_arrow writes Vec<u32> as a large list; accept both offset widths.
    let values = |v: &arrow::array::ArrayRef| v.as_primitive::<UInt32Type>().clone();
    if let Some(l) = c.as_list_opt::<i64>() {
        Ok(HistColumn {
            offsets: l.offsets().iter().map(|o| *o as usize).collect(),
            values: values(l.values()),
        })
    } else if let Some(l) = c.as_list_opt::<i32>() {
        Ok(HistColumn {
            offsets: l.offsets().iter().map(|o| *o as usize).collect(),
            values: values(l.values()),
        })
    } else {
        Err(AnalyzeError::Column(format!(
            "column `{name}` is not a list"
        )))
    }
}

/// How one field of an `ask` stage's answers is analysed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum FieldKind {
    /// Numbers: their distribution per group (one bin per integer over a short range, else
    /// ten equal bins), and a KS test.
    Number,
    /// One of a few strings: the share of the group's videos with each, and a chi-square test.
    Category,
    /// A list of strings (e.g. the identities shown): the share of the group's videos whose
    /// list holds each (a video counts once per value; shares do not add up to 1).
    Multi,
}

/// One analysed field of an `ask` stage: its long table, and the values or counts its test reads.
pub(super) struct AnswerField {
    /// `<stage>_<field>`, the table's and the figure's name.
    pub(super) name: String,
    pub(super) kind: FieldKind,
    pub(super) rows: Vec<DistRow>,
    pub(super) values: Vec<(String, Vec<f64>)>,
    pub(super) counts: Vec<(String, Vec<f64>)>,
    /// Videos per group with an answer.
    pub(super) videos: BTreeMap<String, usize>,
}

/// Free-text strings are not a category: more distinct values than this are skipped.
const MAX_CATEGORIES: usize = 30;
/// Nor are strings this long on average (a model's reasons).
const MAX_CATEGORY_CHARS: f64 = 40.0;

/// The fields of stage `sid`'s answers (the `answer` column, one JSON object per video), per
/// group of `by`. Fields that are objects, mixed, or free text are left out.
pub(super) fn answer_fields(
    run_tables: &RunTables,
    sid: &str,
    by: &str,
    filtered: BatchFilter,
) -> Result<Vec<AnswerField>, AnalyzeError> {
    use serde_json::Value;
    let mut per_video: BTreeMap<String, (String, serde_json::Map<String, Value>)> = BTreeMap::new();
    for b in run_tables.batches(sid, &[COL_VIDEO_ID, by, "answer"])? {
        let Some(b) = filtered(b)? else { break };
        let (ids, grp, ans) = (
            col_str(&b, COL_VIDEO_ID)?,
            col_str(&b, by)
                .map_err(|e| AnalyzeError::Column(format!("{sid}: {e} (`--by {by}`)")))?,
            col_str(&b, "answer")?,
        );
        for i in 0..b.num_rows() {
            let Some(Value::Object(o)) =
                ans[i].as_deref().and_then(|a| serde_json::from_str(a).ok())
            else {
                continue;
            };
            per_video.insert(
                ids[i].clone().unwrap_or_default(),
                (grp[i].clone().unwrap_or_else(|| "(null)".into()), o),
            );
        }
    }
    let mut groups: Vec<String> = per_video.values().map(|v| v.0.clone()).collect();
    groups.sort();
    groups.dedup();
    let mut videos: BTreeMap<String, usize> = BTreeMap::new();
    for (g, _) in per_video.values() {
        *videos.entry(g.clone()).or_default() += 1;
    }
    let mut names: Vec<String> = per_video
        .values()
        .flat_map(|(_, o)| o.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    let mut out = vec![];
    for field in names {
        let vals: Vec<(&str, &Value)> = per_video
            .values()
            .filter_map(|(g, o)| o.get(&field).map(|v| (g.as_str(), v)))
            .filter(|(_, v)| !v.is_null())
            .collect();
        let kind = if vals.iter().all(|(_, v)| v.is_number()) {
            FieldKind::Number
        } else if vals.iter().all(|(_, v)| v.is_string()) {
            FieldKind::Category
        } else if vals
            .iter()
            .all(|(_, v)| v.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
        {
            FieldKind::Multi
        } else {
            continue;
        };
        let mut f = AnswerField {
            name: format!("{sid}_{field}"),
            kind,
            rows: vec![],
            values: vec![],
            counts: vec![],
            videos: videos.clone(),
        };
        match kind {
            FieldKind::Number => {
                let xs: Vec<f64> = vals.iter().filter_map(|(_, v)| v.as_f64()).collect();
                let (lo, hi) = xs
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
                let integers = xs.iter().all(|x| x.fract() == 0.0) && hi - lo <= 20.0;
                let bins: Vec<(f64, f64, String)> = if integers {
                    (lo as i64..=hi as i64)
                        .map(|k| (k as f64, k as f64 + 1.0, k.to_string()))
                        .collect()
                } else {
                    super::uniform_bins(10, lo, if hi > lo { hi } else { lo + 1.0 }, "")
                };
                let mut edges: Vec<f64> = bins.iter().map(|b| b.0).collect();
                edges.push(bins.last().map_or(1.0, |b| b.1));
                for g in &groups {
                    let mine: Vec<f64> = vals
                        .iter()
                        .filter(|(gg, _)| gg == g)
                        .filter_map(|(_, v)| v.as_f64())
                        .collect();
                    let mut c = vec![0f64; bins.len()];
                    for x in &mine {
                        c[super::bin_of(&edges, *x)] += 1.0;
                    }
                    f.rows.extend(super::dist(g, &bins, &c));
                    f.values.push((g.clone(), mine));
                }
            }
            FieldKind::Category | FieldKind::Multi => {
                let of = |v: &Value| -> Vec<String> {
                    match v {
                        Value::String(s) => vec![s.clone()],
                        Value::Array(a) => {
                            let mut s: Vec<String> = a
                                .iter()
                                .filter_map(|x| x.as_str().map(String::from))
                                .collect();
                            s.sort();
                            s.dedup();
                            s
                        }
                        _ => vec![],
                    }
                };
                let mut cats: Vec<String> = vals.iter().flat_map(|(_, v)| of(v)).collect();
                cats.sort();
                cats.dedup();
                // Sentences (a model's reasons) are free text, not categories.
                let mean_chars = vals
                    .iter()
                    .flat_map(|(_, v)| of(v))
                    .map(|s| s.chars().count())
                    .sum::<usize>() as f64
                    / vals.len().max(1) as f64;
                if cats.len() > MAX_CATEGORIES
                    || (kind == FieldKind::Category && mean_chars > MAX_CATEGORY_CHARS)
                {
                    continue;
                }
                for g in &groups {
                    let n = videos[g] as f64;
                    let mut c = vec![0f64; cats.len()];
                    for (_, v) in vals.iter().filter(|(gg, _)| gg == g) {
                        for s in of(v) {
                            c[cats.binary_search(&s).expect("collected above")] += 1.0;
                        }
                    }
                    f.rows
                        .extend(cats.iter().zip(&c).enumerate().map(|(i, (label, count))| {
                            DistRow {
                                group: g.clone(),
                                bin: i as u32,
                                lo: i as f64,
                                hi: i as f64 + 1.0,
                                label: label.clone(),
                                count: *count,
                                share: if n > 0.0 { count / n } else { 0.0 },
                            }
                        }));
                    if kind == FieldKind::Category {
                        f.counts.push((g.clone(), c));
                    }
                }
            }
        }
        out.push(f);
    }
    Ok(out)
}
