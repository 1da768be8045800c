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
    /// The current selection: per video, how many stages (after the source) passed it on under
    /// the pipeline's thresholds, and each stage's place; a stage's rows are read only for the
    /// videos that reach it, as a clean run of today's pipeline would hold (rows a higher
    /// threshold left behind stay stored, for a lower one, but are not analysed).
    reach: std::collections::HashMap<String, usize>,
    place: std::collections::HashMap<String, usize>,
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
        let rt = crate::runtime::tokio_runtime()?;
        let view = rt.block_on(crate::store::run::RunView::open(run))?;
        let data = rt.block_on(crate::stages::selection::read_stages(&view, &[]))?;
        let funnel = data.decided.funnel_all(false);
        let mut reach: std::collections::HashMap<String, usize> = Default::default();
        for (i, id) in data.sources.iter().enumerate() {
            let passed = funnel
                .kept
                .iter()
                .take_while(|k| k.is_valid(i) && k.value(i))
                .count();
            reach.insert(id.clone(), passed);
        }
        let place = data
            .decided
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect();
        Ok(Self {
            rt,
            store: view.store,
            manifest: view.manifest,
            filter_columns: vec![],
            reach,
            place,
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
        let mut out = vec![];
        self.each_batch(id, columns, &mut |b| {
            out.push(b);
            Ok(())
        })?;
        Ok(out)
    }

    /// The rows of `batches` a shard at a time: the working set is one shard, whatever the
    /// table's size.
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
        // The selection is by video: the id is read with every table.
        let columns: Vec<&str> = columns
            .iter()
            .copied()
            .chain(self.filter_columns.iter().map(String::as_str))
            .chain(std::iter::once(COL_VIDEO_ID))
            .collect();
        // The callback's own error, carried through the store's error type and back.
        let mut failed = None;
        let place = self.place.get(id).copied();
        let r = self.rt.block_on(crate::store::shards::for_each_batch(
            &self.store,
            &st.id,
            &st.fingerprint,
            &columns,
            |b| {
                let b = match place {
                    Some(p) => self.reaching(&b, p)?,
                    None => b,
                };
                each(b).map_err(|e| {
                    failed = Some(e);
                    RunError::Internal("stopped".into())
                })
            },
        ));
        match (failed, r) {
            (Some(e), _) => Err(e),
            (None, r) => r.map_err(AnalyzeError::Run),
        }
    }
}

impl RunTables {
    /// The rows of `batch` (of the stage at `place`) whose videos reach that stage now.
    fn reaching(&self, batch: &RecordBatch, place: usize) -> Result<RecordBatch, RunError> {
        let Some(ids) = crate::store::shards::text_column(batch, COL_VIDEO_ID) else {
            return Ok(batch.clone());
        };
        let keep: arrow::array::BooleanArray = ids
            .iter()
            .map(|v| {
                Some(
                    v.and_then(|v| self.reach.get(v))
                        .is_some_and(|&n| n >= place),
                )
            })
            .collect();
        if keep.true_count() == batch.num_rows() {
            return Ok(batch.clone());
        }
        arrow::compute::filter_record_batch(batch, &keep)
            .map_err(|e| RunError::Internal(format!("selecting rows: {e}")))
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
    with_text: &super::text_frames::TextFrames,
    groups: &[String],
) -> Result<Vec<DistRow>, AnalyzeError> {
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
    let mut counts = SegmentCounts::default();
    let mut skipped = false;
    let columns = [COL_VIDEO_ID, by, "frame_index", "timestamp_secs"];
    run_tables.each_batch(fid, &columns, &mut |b| {
        // A filter on region columns cannot select frames: the segment analysis is skipped.
        let Some(b) = (if skipped { None } else { filtered(b)? }) else {
            skipped = true;
            return Ok(());
        };
        counts.add(&b, by, &duration, with_text)
    })?;
    Ok(counts.means(groups))
}

/// Frames with text per segment and frames per segment.
type Segments = ([u32; 8], [u32; 8]);

/// video → (group, its segment counts): one entry per video, looked up without allocating (a
/// frames table has a row per sampled frame), its group an index into `names` and its counts
/// 32-bit (a video's entry was 600 bytes, most of `analyze`'s memory at ten million regions).
#[derive(Default)]
struct SegmentCounts {
    names: Vec<String>,
    per_video: HashMap<String, Vec<(u32, Segments)>>,
}

impl SegmentCounts {
    /// Counts one batch of the frames table: each frame in its eighth of its video's duration.
    fn add(
        &mut self,
        b: &RecordBatch,
        by: &str,
        duration: &HashMap<String, f64>,
        with_text: &super::text_frames::TextFrames,
    ) -> Result<(), AnalyzeError> {
        let (ids, grp) = (col_utf8(b, COL_VIDEO_ID)?, col_utf8(b, by)?);
        let (ids, grp) = (ids.as_string::<i32>(), grp.as_string::<i32>());
        let (idx, ts) = (col_u32(b, "frame_index")?, col_f64(b, "timestamp_secs")?);
        for (i, t) in ts.iter().enumerate().take(b.num_rows()) {
            let id = str_or(ids, i, "");
            let Some(d) = duration.get(id).filter(|d| **d > 0.0) else {
                continue;
            };
            let seg = ((t / d * 8.0) as usize).min(7);
            let e = self.entry(id, str_or(grp, i, "(null)"));
            e.1[seg] += 1;
            if with_text.contains(id, idx.value(i)) {
                e.0[seg] += 1;
            }
        }
        Ok(())
    }

    /// The counts of video `id` in group `g`, made on first sight.
    fn entry(&mut self, id: &str, g: &str) -> &mut Segments {
        let g = match self.names.iter().position(|n| n == g) {
            Some(k) => k as u32,
            None => {
                self.names.push(g.to_string());
                (self.names.len() - 1) as u32
            }
        };
        if !self.per_video.contains_key(id) {
            self.per_video.insert(id.to_string(), Vec::with_capacity(1));
        }
        let groups = self.per_video.get_mut(id).expect("inserted above");
        match groups.iter().position(|(gg, _)| *gg == g) {
            Some(k) => &mut groups[k].1,
            None => {
                groups.push((g, Default::default()));
                &mut groups.last_mut().expect("pushed").1
            }
        }
    }

    /// Per group, the mean over its videos of the share of frames with text in each segment.
    fn means(&self, groups: &[String]) -> Vec<DistRow> {
        // In (group, video) order, as the means are summed.
        let names = &self.names;
        let mut per_video: Vec<((&str, &str), &Segments)> = self
            .per_video
            .iter()
            .flat_map(|(id, gs)| {
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
        let mut out = vec![];
        for g in groups {
            let vids: Vec<&Segments> = per_video
                .iter()
                .filter(|((gg, _), _)| gg == g)
                .map(|(_, v)| *v)
                .collect();
            let mut mean = [0f64; 8];
            for (s, m) in mean.iter_mut().enumerate() {
                let shares: Vec<f64> = vids
                    .iter()
                    .filter(|v| v.1[s] > 0)
                    .map(|v| f64::from(v.0[s]) / f64::from(v.1[s]))
                    .collect();
                *m = shares.iter().sum::<f64>() / shares.len().max(1) as f64;
            }
            // `count` is the mean share here; `share` normalises it over the 8 segments.
            out.extend(dist(g, &seg_bins, &mean));
        }
        out
    }
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
    // Group → (videos per bin, shots of each video in video order).
    let mut per_group: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (g, n) in per_video.values() {
        let (c, vals) = per_group
            .entry(g)
            .or_insert_with(|| (vec![0f64; 10], vec![]));
        c[(*n as usize).clamp(1, 10) - 1] += 1.0;
        vals.push(*n as f64);
    }
    for (g, (c, vals)) in per_group {
        rows.extend(dist(g, &shot_bins, &c));
        values.push((g.to_string(), vals));
    }
    Ok((rows, values))
}

/// Row `i` of a string column, or `null` when it is null.
pub(super) fn str_or<'a>(a: &'a arrow::array::StringArray, i: usize, null: &'a str) -> &'a str {
    if a.is_valid(i) { a.value(i) } else { null }
}

/// Column `name` of the batch, or the error that names it.
pub(super) fn column<'a>(
    b: &'a RecordBatch,
    name: &str,
) -> Result<&'a arrow::array::ArrayRef, AnalyzeError> {
    b.column_by_name(name)
        .ok_or_else(|| AnalyzeError::Column(format!("no column `{name}`")))
}

/// Column `name` cast to strings (an id or a group of any type).
pub(super) fn col_utf8(
    b: &RecordBatch,
    name: &str,
) -> Result<arrow::array::ArrayRef, AnalyzeError> {
    Ok(arrow::compute::cast(
        column(b, name)?,
        &arrow::datatypes::DataType::Utf8,
    )?)
}

pub(super) fn col_str(b: &RecordBatch, name: &str) -> Result<Vec<Option<String>>, AnalyzeError> {
    let c = col_utf8(b, name)?;
    let s = c.as_string::<i32>();
    Ok((0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect())
}

pub(super) fn col_f64(b: &RecordBatch, name: &str) -> Result<Vec<f64>, AnalyzeError> {
    let c = arrow::compute::cast(column(b, name)?, &arrow::datatypes::DataType::Float64)?;
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
    fn of<O: arrow::array::OffsetSizeTrait>(l: &arrow::array::GenericListArray<O>) -> Self {
        HistColumn {
            offsets: l.offsets().iter().map(|o| o.as_usize()).collect(),
            values: l.values().as_primitive::<UInt32Type>().clone(),
        }
    }

    pub(super) fn add(&self, row: usize, acc: &mut [f64]) {
        let (s, e) = (self.offsets[row], self.offsets[row + 1]);
        for (a, v) in acc.iter_mut().zip(&self.values.values()[s..e]) {
            *a += f64::from(*v);
        }
    }
}

pub(super) fn col_hist(b: &RecordBatch, name: &str) -> Result<HistColumn, AnalyzeError> {
    let c = column(b, name)?;
    // serde_arrow writes Vec<u32> as a large list; accept both offset widths.
    if let Some(l) = c.as_list_opt::<i64>() {
        Ok(HistColumn::of(l))
    } else if let Some(l) = c.as_list_opt::<i32>() {
        Ok(HistColumn::of(l))
    } else {
        Err(AnalyzeError::Column(format!(
            "column `{name}` is not a list"
        )))
    }
}
