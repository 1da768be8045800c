//! The creator-added regions of the `ocr` table as the analyses need them, accumulated per
//! group while the table streams a shard at a time (`shards::for_each_batch`): the pixel
//! histograms summed, the one-vote-per-region hue, cell, area and aspect counts, the raw values
//! the KS tests compare, and which (video, frame) pairs show text (for the segment analysis).
//! Nothing is kept per region but four numbers for the KS tests, and only for the two groups
//! the tests compare, written to a temporary file past a budget (`spill`); a (video, frame)
//! pair is one bit. So memory does not grow with the regions (MVFNDB §3.1–3.2's tables over
//! millions of regions), only a few bytes a video.
//!
//! Reads the `ocr` table's REGION_COLUMNS and the `--by` column; writes the KS values past the
//! budget to a temporary file; calls and caches nothing.

use super::spill::{SpillFile, Spilled};
use super::tables::{HistColumn, RunTables, col_hist, col_utf8, column, str_or};
use super::text_frames::TextFrames;
use super::*;

/// The columns of the `ocr` table the analyses read (with the `--by` column).
const REGION_COLUMNS: &[&str] = &[
    COL_VIDEO_ID,
    "creator_added",
    "frame_index",
    "grid_row",
    "grid_col",
    "hue_hist",
    "sat_hist",
    "val_hist",
    "text_h",
    "text_s",
    "text_v",
    "area_frac",
    "aspect_ratio",
];

/// One group's regions, counted.
pub(super) struct GroupRegions {
    pub(super) n: usize,
    /// Pixel-weighted hue, saturation and value histograms (72, 20 and 20 bins).
    pub(super) pixels: [Vec<f64>; 3],
    pub(super) hue_regions: Vec<f64>,
    /// (grid row, grid col) → regions; placed on the grid once its size is known.
    pub(super) cells: BTreeMap<(u32, u32), f64>,
    pub(super) area: Vec<f64>,
    pub(super) aspect: Vec<f64>,
    /// Raw values for the KS tests: text saturation, text value, area, aspect ratio (the
    /// table's 32-bit floats).
    pub(super) values: [Spilled; 4],
    /// Not among the first two groups in name order, which alone are tested: no values kept.
    pub(super) untested: bool,
}

impl GroupRegions {
    fn new(bins: &RegionBins) -> Self {
        Self {
            n: 0,
            pixels: [vec![0.0; 72], vec![0.0; 20], vec![0.0; 20]],
            hue_regions: vec![0.0; 72],
            cells: BTreeMap::new(),
            area: vec![0.0; bins.area.len()],
            aspect: vec![0.0; bins.aspect.len()],
            values: Default::default(),
            untested: false,
        }
    }
}

/// Every group's regions, the grid they were placed on, and the frames with text.
pub(super) struct Regions {
    pub(super) groups: BTreeMap<String, GroupRegions>,
    /// The largest cell seen, at least 1×1 (the table records each region's cell, not the
    /// stage's grid setting).
    pub(super) grid: (u32, u32),
    pub(super) text_frames: TextFrames,
    /// Where the KS values past the budget went.
    pub(super) spill: SpillFile,
}

/// The creator-added regions of the `ocr` table (stage `ocr`) that pass `--where`, counted.
pub(super) fn read_regions(
    run_tables: &RunTables,
    ocr: &str,
    by: &str,
    filter: Option<&filter::Filter>,
) -> Result<Regions, AnalyzeError> {
    let bins = RegionBins::new((1, 1));
    let mut r = Regions {
        groups: BTreeMap::new(),
        grid: (1, 1),
        text_frames: TextFrames::default(),
        spill: SpillFile::default(),
    };
    let columns: Vec<&str> = REGION_COLUMNS.iter().copied().chain([by]).collect();
    // Checked against every column of the table first: the batches below hold only the decoded
    // ones, and the error lists the columns there are.
    let stage = run_tables.manifest.stages.iter().find(|s| s.id == ocr);
    if let Some((f, st)) = filter.zip(stage) {
        let schema = filter::table_schema(&run_tables.store, &st.id, &st.fingerprint);
        if let Some(schema) = run_tables.rt.block_on(schema)? {
            f.check(&schema, &format!("the {ocr} table"))?;
        }
    }
    run_tables.each_batch(ocr, &columns, &mut |b| {
        // Unlike the frames and shots tables, the regions are what every analysis counts: a
        // filter this table cannot apply is an error, not a skipped analysis.
        let b = apply_where(filter, b)?.ok_or_else(|| {
            AnalyzeError::Filter(format!(
                "--where {:?}: the {ocr} table has no column {:?}",
                filter.map(|f| f.text.as_str()).unwrap_or(""),
                filter.map(|f| f.columns()).unwrap_or_default()
            ))
        })?;
        add_batch(&b, ocr, by, &bins, &mut r)?;
        let Regions { groups, spill, .. } = &mut r;
        spill
            .over_budget(groups.values_mut().flat_map(|g| g.values.iter_mut()))
            .map_err(|e| AnalyzeError::io(&std::env::temp_dir(), e))
    })?;
    Ok(r)
}

/// The columns of one batch the region analyses read.
struct Columns<'a> {
    groups: arrow::array::ArrayRef,
    videos: arrow::array::ArrayRef,
    added: &'a arrow::array::BooleanArray,
    frame: arrow::array::UInt32Array,
    cell: (arrow::array::UInt32Array, arrow::array::UInt32Array),
    hist: [HistColumn; 3],
    text: [Vec<f64>; 3],
    area: Vec<f64>,
    aspect: Vec<f64>,
}

fn columns<'a>(b: &'a RecordBatch, ocr: &str, by: &str) -> Result<Columns<'a>, AnalyzeError> {
    let groups = arrow::compute::cast(
        b.column_by_name(by).ok_or_else(|| {
            AnalyzeError::Column(format!(
                "{ocr}: no column `{by}` (group column `--by {by}`)"
            ))
        })?,
        &arrow::datatypes::DataType::Utf8,
    )?;
    Ok(Columns {
        groups,
        videos: col_utf8(b, COL_VIDEO_ID)?,
        added: column(b, "creator_added")?.as_boolean(),
        frame: col_u32(b, "frame_index")?,
        cell: (col_u32(b, "grid_row")?, col_u32(b, "grid_col")?),
        hist: [
            col_hist(b, "hue_hist")?,
            col_hist(b, "sat_hist")?,
            col_hist(b, "val_hist")?,
        ],
        text: [
            col_f64(b, "text_h")?,
            col_f64(b, "text_s")?,
            col_f64(b, "text_v")?,
        ],
        area: col_f64(b, "area_frac")?,
        aspect: col_f64(b, "aspect_ratio")?,
    })
}

/// Marks the groups past the second in name order untested and drops their values: only the
/// first two are KS-tested, and a group past the second stays past it as groups are added.
fn drop_untested(groups: &mut BTreeMap<String, GroupRegions>) {
    for g in groups.values_mut().skip(2) {
        g.untested = true;
        g.values.iter_mut().for_each(Spilled::clear);
    }
}

/// Counts the creator-added regions of one batch into their groups.
fn add_batch(
    b: &RecordBatch,
    ocr: &str,
    by: &str,
    bins: &RegionBins,
    r: &mut Regions,
) -> Result<(), AnalyzeError> {
    let c = columns(b, ocr, by)?;
    let groups = c.groups.as_string::<i32>();
    let videos = c.videos.as_string::<i32>();
    for i in (0..b.num_rows()).filter(|&i| c.added.value(i)) {
        let name = str_or(groups, i, "(null)");
        if !r.groups.contains_key(name) {
            r.groups.insert(name.to_string(), GroupRegions::new(bins));
            drop_untested(&mut r.groups);
        }
        let g = r.groups.get_mut(name).expect("inserted above");
        g.n += 1;
        for (h, acc) in c.hist.iter().zip(g.pixels.iter_mut()) {
            h.add(i, acc);
        }
        let (h, s, v) = (c.text[0][i], c.text[1][i], c.text[2][i]);
        // A grey region's hue is noise: it votes only when its text has colour.
        if s >= crate::stages::ocr::colour::MIN_CHROMA as f64 {
            g.hue_regions[((h / 5.0) as usize).min(71)] += 1.0;
        }
        let cell = (c.cell.0.value(i), c.cell.1.value(i));
        *g.cells.entry(cell).or_default() += 1.0;
        r.grid = (r.grid.0.max(cell.0 + 1), r.grid.1.max(cell.1 + 1));
        g.area[bin_of(&bins.area_edges, c.area[i].max(1e-5))] += 1.0;
        g.aspect[bin_of(&bins.aspect_edges, c.aspect[i])] += 1.0;
        if !g.untested {
            for (vals, x) in g.values.iter_mut().zip([s, v, c.area[i], c.aspect[i]]) {
                // The table's columns are 32-bit: narrowing them back is exact.
                vals.held.push(x as f32);
            }
        }
        r.text_frames
            .insert(str_or(videos, i, ""), c.frame.value(i));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_two_groups_by_name_keep_ks_values() {
        let bins = RegionBins::new((1, 1));
        let mut groups = BTreeMap::new();
        // Groups arrive out of name order; each gets a value while it may still be tested.
        for name in ["c", "b", "a", "d"] {
            groups.insert(name.to_string(), GroupRegions::new(&bins));
            drop_untested(&mut groups);
            for g in groups.values_mut().filter(|g| !g.untested) {
                g.values[0].held.push(1.0);
            }
        }
        let kept: Vec<(&str, bool, usize)> = groups
            .iter()
            .map(|(n, g)| (n.as_str(), g.untested, g.values[0].len()))
            .collect();
        assert_eq!(
            kept,
            [
                ("a", false, 2),
                ("b", false, 3),
                ("c", true, 0),
                ("d", true, 0)
            ]
        );
    }
}
