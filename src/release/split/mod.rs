//! `vidcurate split`: a video-level train/validation/test split of a run's selected videos
//! (HarmVideoBench §3.1.2: 70/10/20, deterministic, optionally stratified; SPEC §9).
//!
//! Reads: the run's manifest, every stage's table under the pipeline's own thresholds (the same
//! funnel as `rethreshold`, so no model is called) and the source table's columns named by
//! `--stratify` and `--group` (manifest extras such as `label`, or source columns such as
//! `channel_id`). Writes: `splits/<name>.parquet` (video_id, split, stratum, group) and
//! `splits/<name>.json` (settings, counts per split × stratum, the largest deviation), through
//! the run's store. Calls nothing; caches nothing.
//!
//! Grouped: every video of one group (a channel, an event, a near-duplicate cluster) lands in one
//! split, so a model is never tested on footage of a channel it was trained on. Groups are
//! placed largest first (ties in a seeded hash order), each into the split where it most lowers
//! the squared distance of the per-stratum counts from their targets; with groups of one video
//! that keeps every split × stratum count within one video of its target.

mod duplicates;
#[cfg(test)]
mod growth_tests;
mod keep;
mod modes;
pub mod stale;
#[cfg(test)]
mod tests;
mod values;

use crate::error::BadArgument;
use crate::error::RunError;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::store::shards::read_table_columns;
use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use duplicates::{join_duplicates, near_duplicates};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use values::{StageValues, source_columns, source_values, stage_values};

/// What `split` is asked for (also its command-line flags).
#[derive(Debug, Clone, clap::Args)]
pub struct SplitOptions {
    /// Shares of the splits, in --names order (normalised to sum to 1).
    #[arg(long, default_value = "70/10/20", value_parser = parse_ratios)]
    pub ratios: Shares,
    /// Names of the splits.
    #[arg(long, value_delimiter = ',', default_value = "train,validation,test")]
    pub names: Vec<String>,
    /// Columns whose values together make a stratum (e.g. label or domain,label): source
    /// columns (manifest columns are source columns), or a one-row-per-video stage's column
    /// (`language` from a language stage; `STAGE.COLUMN` to name the stage).
    #[arg(long, value_delimiter = ',')]
    pub stratify: Vec<String>,
    /// Source-table column whose equal values stay in one split (e.g. channel_id); a video
    /// with no value is a group of its own.
    #[arg(long)]
    pub group: Option<String>,
    /// Seed of the order in which equal-sized groups are placed: another seed, another split.
    #[arg(long, default_value_t = 13)]
    pub seed: u64,
    /// Name of the output under RUN_DIR/splits/.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Keep near-duplicates (re-uploads, crops: a `dedup` stage's frame hashes) in one split,
    /// together with whatever --group joins.
    #[arg(long)]
    pub dedup: bool,
    /// Keep only one video (the smallest id) of each near-duplicate cluster (implies --dedup).
    #[arg(long)]
    pub drop_duplicates: bool,
    /// Two frames match when their 64-bit hashes differ in at most this many bits; two videos
    /// are near-duplicates when half the frames of the shorter one match.
    #[arg(long, default_value_t = 10)]
    pub max_distance: u32,
    /// Keep a dataset's own splits: each video's split is its value in this source column
    /// (e.g. the `split` column of a dataset source). The split names are the --names that
    /// occur, then any other value; --ratios is not used; a video with no value is an error.
    #[arg(long, conflicts_with_all = ["balanced_test", "group", "dedup", "drop_duplicates"])]
    pub from_column: Option<String>,
    /// With --from-column: a video with no value is left out of every split (counted, and
    /// listed in NAME.json) rather than an error; e.g. the rows FakeSV's event-fold lists leave
    /// out (726 of its 5,495 videos).
    #[arg(long, requires = "from_column")]
    pub leave_out_missing: bool,
    /// MVFNDB's category-test-split: the last of --names (test) gets this many videos of every
    /// --stratify stratum (e.g. label,category), or `max` (as many as the smallest stratum
    /// has); the rest are split over the other names by their --ratios.
    #[arg(long, value_parser = modes::parse_per_cell, conflicts_with_all = ["group", "dedup", "drop_duplicates"])]
    pub balanced_test: Option<modes::PerCell>,
    /// Split from scratch. By default a split made again under its name keeps every video it
    /// held that the run still selects where it was, and places only the new ones (a grown
    /// dataset's version 1 test videos never move to train); changed settings also start over.
    #[arg(long)]
    pub fresh: bool,
    /// The command line that asked for this split, kept in NAME.json: what `status` tells to run
    /// again once the run's selection has moved on.
    #[arg(skip)]
    pub command: Option<String>,
}

/// Split shares, summing to 1 (an alias, so the command line takes them as one value).
pub type Shares = Vec<f64>;

/// `70/10/20` (or `0.7,0.1,0.2`) → shares.
pub fn parse_ratios(s: &str) -> Result<Shares, BadArgument> {
    let parts: Vec<&str> = s.split(['/', ',', ':']).map(str::trim).collect();
    let mut out = vec![];
    for p in &parts {
        let v: f64 = p.parse().map_err(|_| {
            BadArgument(format!(
                "{s:?}: {p:?} is not a number (expected e.g. 70/10/20)"
            ))
        })?;
        if !(v >= 0.0 && v.is_finite()) {
            return Err(BadArgument(format!(
                "{s:?}: {p} is not a share (0 or more)"
            )));
        }
        out.push(v);
    }
    let sum: f64 = out.iter().sum();
    if sum <= 0.0 {
        return Err(BadArgument(format!("{s:?}: the shares add up to 0")));
    }
    Ok(out.into_iter().map(|v| v / sum).collect())
}

/// One video to place.
#[derive(Debug, Clone)]
pub struct Item {
    pub video_id: String,
    pub stratum: String,
    pub group: String,
    /// Its near-duplicate cluster (the smallest id in it), when it has one of two or more.
    pub cluster: Option<String>,
}

/// A group's items (indices) and its count of items per stratum.
type Members = (Vec<usize>, Vec<f64>);

/// The split index of every item (in `items` order). Deterministic for a given input set and
/// seed, whatever order the items come in.
pub fn assign(items: &[Item], ratios: &[f64], seed: u64) -> Vec<usize> {
    assign_keeping(items, ratios, seed, &HashMap::new())
}

/// `assign`, with the videos of `pinned` (id → split) kept where they are: their groups go
/// first, each new member to where most of its group is; then the other groups as `assign`
/// places them, toward the targets.
pub fn assign_keeping(
    items: &[Item],
    ratios: &[f64],
    seed: u64,
    pinned: &HashMap<String, usize>,
) -> Vec<usize> {
    let strata: Vec<&str> = {
        let mut s: Vec<&str> = items.iter().map(|i| i.stratum.as_str()).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    let k_of: HashMap<&str, usize> = strata.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    let mut totals = vec![0f64; strata.len()];
    // Group → (members, count per stratum).
    let mut groups: BTreeMap<&str, Members> = BTreeMap::new();
    for (n, it) in items.iter().enumerate() {
        let k = k_of[it.stratum.as_str()];
        totals[k] += 1.0;
        let g = groups
            .entry(it.group.as_str())
            .or_insert_with(|| (vec![], vec![0.0; strata.len()]));
        g.0.push(n);
        g.1[k] += 1.0;
    }
    let mut order: Vec<(&str, &Members)> = groups.iter().map(|(k, v)| (*k, v)).collect();
    order.sort_by_cached_key(|(g, (members, _))| {
        (std::cmp::Reverse(members.len()), seeded_key(seed, g), *g)
    });
    let target: Vec<Vec<f64>> = ratios
        .iter()
        .map(|r| totals.iter().map(|t| r * t).collect())
        .collect();
    let mut have = vec![vec![0f64; strata.len()]; ratios.len()];
    let mut out = vec![0usize; items.len()];
    let home = |members: &[usize]| home_of(items, members, pinned, ratios.len());
    for (_, (members, _)) in &order {
        if let Some(at) = home(members) {
            for m in members.iter() {
                let s = pinned
                    .get(&items[*m].video_id)
                    .copied()
                    .filter(|s| *s < ratios.len())
                    .unwrap_or(at);
                out[*m] = s;
                have[s][k_of[items[*m].stratum.as_str()]] += 1.0;
            }
        }
    }
    for (_, (members, counts)) in order {
        if home(members).is_some() {
            continue;
        }
        let best = best_split(counts, &have, &target, ratios);
        for (k, c) in counts.iter().enumerate() {
            have[best][k] += c;
        }
        for m in members {
            out[*m] = best;
        }
    }
    out
}

/// The split a group of `counts` (per stratum) joins: the one where it most lowers
/// Σ_k (have − target)²; ties go to the split furthest below its overall target, then to the
/// first.
fn best_split(counts: &[f64], have: &[Vec<f64>], target: &[Vec<f64>], ratios: &[f64]) -> usize {
    let cost = |s: usize| -> f64 {
        counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0.0)
            .map(|(k, c)| c * (2.0 * (have[s][k] - target[s][k]) + c))
            .sum()
    };
    let deficit = |s: usize| -> f64 { have[s].iter().sum::<f64>() - target[s].iter().sum::<f64>() };
    (0..ratios.len())
        .filter(|s| ratios[*s] > 0.0)
        .min_by(|a, b| {
            cost(*a)
                .partial_cmp(&cost(*b))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(
                    deficit(*a)
                        .partial_cmp(&deficit(*b))
                        .unwrap_or(std::cmp::Ordering::Equal),
                )
                .then(a.cmp(b))
        })
        .unwrap_or(0)
}

/// Where a group with pinned members goes: the split most of them are in (the first on a tie);
/// None when none is pinned.
fn home_of(
    items: &[Item],
    members: &[usize],
    pinned: &HashMap<String, usize>,
    splits: usize,
) -> Option<usize> {
    let mut n = vec![0usize; splits];
    for m in members {
        if let Some(s) = pinned.get(&items[*m].video_id).filter(|s| **s < splits) {
            n[*s] += 1;
        }
    }
    let best = (0..splits).max_by(|a, b| n[*a].cmp(&n[*b]).then(b.cmp(a)))?;
    (n[best] > 0).then_some(best)
}

/// A seeded hash of a group or a video id, the order in which equal-sized groups are placed
/// and a stratum's videos enter the balanced test split: another seed, another split; the same
/// seed, the same one, in any input order.
fn seeded_key(seed: u64, id: &str) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.update(id.as_bytes());
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().unwrap_or_default())
}

/// Counts of one split × stratum and how far they are from the target.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub split: String,
    pub stratum: String,
    pub videos: usize,
    pub target: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SplitReport {
    pub name: String,
    pub ratios: Vec<f64>,
    pub names: Vec<String>,
    pub stratify: Vec<String>,
    pub group: Option<String>,
    pub seed: u64,
    pub videos: usize,
    pub groups: usize,
    pub cells: Vec<Cell>,
    /// Near-duplicate clusters of two or more videos (with --dedup).
    pub duplicate_clusters: usize,
    /// Videos left out as duplicates of another (with --drop-duplicates).
    pub dropped_duplicates: Vec<String>,
    /// Videos left out for having no --from-column value (with --leave-out-missing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_left_out: Vec<String>,
    /// The largest |videos − target| over the cells.
    pub max_deviation: f64,
    /// The command line that made it (`vidcurate split …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Against the split made before under this name, if there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<keep::Changes>,
    #[serde(skip)]
    pub file: String,
}

impl SplitReport {
    /// A table of counts per stratum (rows) and split (columns), target in brackets.
    pub fn render(&self) -> String {
        let mut strata: Vec<&str> = self.cells.iter().map(|c| c.stratum.as_str()).collect();
        strata.dedup();
        let w = strata.iter().map(|s| s.len()).max().unwrap_or(7).max(7);
        let mut s = format!("{:<w$}", "stratum");
        for n in &self.names {
            s += &format!(" {:>18}", n);
        }
        s.push('\n');
        for st in &strata {
            s += &format!("{st:<w$}");
            for n in &self.names {
                let c = self
                    .cells
                    .iter()
                    .find(|c| c.stratum == *st && c.split == *n);
                let cell = c.map_or(String::new(), |c| format!("{} ({:.1})", c.videos, c.target));
                s += &format!(" {cell:>18}");
            }
            s.push('\n');
        }
        let total = |n: &str| -> usize {
            self.cells
                .iter()
                .filter(|c| c.split == n)
                .map(|c| c.videos)
                .sum()
        };
        s += &format!("{:<w$}", "all");
        for n in &self.names {
            s += &format!(" {:>18}", total(n));
        }
        s += &format!(
            "\n{} videos in {} groups; largest deviation from the ratios: {:.1} videos\n",
            self.videos, self.groups, self.max_deviation
        );
        if self.duplicate_clusters > 0 || !self.dropped_duplicates.is_empty() {
            s += &format!(
                "{} near-duplicate clusters; {} videos dropped as duplicates\n",
                self.duplicate_clusters,
                self.dropped_duplicates.len()
            );
        }
        if let (Some(first), n) = (self.missing_left_out.first(), self.missing_left_out.len()) {
            s += &format!("{n} videos with no value left out (first: {first})\n");
        }
        if let Some(c) = &self.changes {
            s += &format!(
                "against the split `{}` made before: {} kept where they were, {} moved, {} added, {} left{}\n",
                self.name,
                c.kept,
                c.moved,
                c.added,
                c.left,
                match &c.fresh {
                    Some(why) => format!(" (made fresh: {why})"),
                    None => " (`--fresh` makes it from scratch)".into(),
                }
            );
        }
        s
    }
}

/// Splits the videos `run_dir`'s pipeline selected and writes `splits/<name>.{parquet,json}`.
pub async fn split(run_dir: &Path, opts: &SplitOptions) -> Result<SplitReport, RunError> {
    // --from-column takes its shares from the column: --ratios does not apply.
    if opts.from_column.is_none() && opts.ratios.len() != opts.names.len() {
        return Err(RunError::Config(format!(
            "--ratios has {} shares but --names {} splits ({})",
            opts.ratios.len(),
            opts.names.len(),
            opts.names.join(", ")
        )));
    }
    let run = crate::store::run::RunView::open(run_dir).await?;
    let (selected, _) = crate::stages::selection::pipeline_selection(&run).await?;
    let (store, m) = (run.store, run.manifest);
    let fp = crate::runtime::chain::source_fingerprint(&m);
    // Only the columns a split reads: a source table of a million videos holds titles and
    // descriptions a split never looks at.
    let mut read: Vec<&str> = vec!["video_id"];
    read.extend(
        (opts
            .stratify
            .iter()
            .chain(&opts.group)
            .chain(&opts.from_column))
        .map(String::as_str),
    );
    let view = read_table_columns(&store, SOURCE_STAGE_ID, &fp, &read).await?;
    let columns = source_columns(&store, &fp).await?;
    let mut wanted = opts.stratify.clone();
    wanted.extend(opts.from_column.clone());
    let staged = stage_values(&store, &m, &columns, &wanted).await?;
    let values = source_values(&view.batches, &columns, opts, &staged)?;
    let items: Vec<Item> = selected
        .iter()
        .map(|id| {
            let (stratum, group) = values
                .get(id)
                .cloned()
                .unwrap_or_else(|| ("(none)".into(), None));
            Item {
                video_id: id.clone(),
                stratum: if opts.stratify.is_empty() {
                    "all".into()
                } else {
                    stratum
                },
                // A video without a group value is a group of its own.
                group: group.unwrap_or_else(|| format!("\u{0}{id}")),
                cluster: None,
            }
        })
        .collect();
    let (items, clusters, dropped) = if opts.dedup || opts.drop_duplicates {
        let near = near_duplicates(&store, &m, &selected, opts.max_distance).await?;
        join_duplicates(items, &near, opts.drop_duplicates)
    } else {
        (items, 0, vec![])
    };
    let before = keep::previous(&store, opts).await?;
    let pinned = before.as_ref().map(|b| &b.pinned);
    let (items, placed, opts, missing) =
        place(items, &view.batches, &columns, &staged, opts, pinned)?;
    let opts = &opts;
    let mut report = report(opts, &items, &placed, run_dir);
    report.changes = before.map(|b| {
        let now: Vec<(String, String)> = (items.iter().zip(&placed))
            .map(|(i, s)| (i.video_id.clone(), opts.names[*s].clone()))
            .collect();
        keep::changes(&b, &now)
    });
    report.duplicate_clusters = clusters;
    report.dropped_duplicates = dropped;
    report.missing_left_out = missing;
    write(&store, opts, &items, &placed, &report).await?;
    Ok(report)
}

/// The items placed, where each goes, the options as applied (`--from-column` names the
/// splits by the column's values and sets the ratios to the shares found) and the videos left
/// out for having no value (`--leave-out-missing`).
type Placed = (Vec<Item>, Vec<usize>, SplitOptions, Vec<String>);

fn place(
    items: Vec<Item>,
    source: &[RecordBatch],
    columns: &[String],
    staged: &StageValues,
    opts: &SplitOptions,
    pinned: Option<&HashMap<String, usize>>,
) -> Result<Placed, RunError> {
    let mut opts = opts.clone();
    if let Some(column) = opts.from_column.clone() {
        let mut by = opts.clone();
        by.stratify = vec![column.clone()];
        by.group = None;
        let values: HashMap<String, Option<String>> = source_values(source, columns, &by, staged)?
            .into_iter()
            .map(|(id, (v, _))| (id, (v != "(none)" && !v.trim().is_empty()).then_some(v)))
            .collect();
        let has = |i: &Item| values.get(&i.video_id).is_some_and(Option::is_some);
        let (items, missing): (Vec<Item>, Vec<Item>) = match opts.leave_out_missing {
            true => items.into_iter().partition(has),
            false => (items, vec![]),
        };
        let (placed, names) = modes::from_column(&items, &values, &column, &opts)?;
        let n = items.len().max(1) as f64;
        opts.ratios = (0..names.len())
            .map(|s| placed.iter().filter(|p| **p == s).count() as f64 / n)
            .collect();
        opts.names = names;
        let missing = missing.into_iter().map(|i| i.video_id).collect();
        return Ok((items, placed, opts, missing));
    }
    let placed = match opts.balanced_test {
        Some(per_cell) => modes::balanced_test(&items, per_cell, &opts.ratios, opts.seed)?,
        None => assign_keeping(
            &items,
            &opts.ratios,
            opts.seed,
            pinned.unwrap_or(&HashMap::new()),
        ),
    };
    Ok((items, placed, opts, vec![]))
}

fn report(opts: &SplitOptions, items: &[Item], placed: &[usize], run_dir: &Path) -> SplitReport {
    let mut per: BTreeMap<(String, usize), usize> = BTreeMap::new();
    let mut per_stratum: BTreeMap<String, usize> = BTreeMap::new();
    for (it, s) in items.iter().zip(placed) {
        *per.entry((it.stratum.clone(), *s)).or_default() += 1;
        *per_stratum.entry(it.stratum.clone()).or_default() += 1;
    }
    let mut cells = vec![];
    for (st, n) in &per_stratum {
        for (s, name) in opts.names.iter().enumerate() {
            cells.push(Cell {
                split: name.clone(),
                stratum: st.clone(),
                videos: per.get(&(st.clone(), s)).copied().unwrap_or(0),
                target: opts.ratios[s] * *n as f64,
            });
        }
    }
    let max_deviation = cells
        .iter()
        .map(|c| (c.videos as f64 - c.target).abs())
        .fold(0.0, f64::max);
    let groups: BTreeSet<&str> = items.iter().map(|i| i.group.as_str()).collect();
    SplitReport {
        name: opts.name.clone(),
        ratios: opts.ratios.clone(),
        names: opts.names.clone(),
        stratify: opts.stratify.clone(),
        group: opts.group.clone(),
        seed: opts.seed,
        videos: items.len(),
        groups: groups.len(),
        cells,
        duplicate_clusters: 0,
        dropped_duplicates: vec![],
        missing_left_out: vec![],
        max_deviation,
        command: opts.command.clone(),
        changes: None,
        file: format!("{}/splits/{}.parquet", run_dir.display(), opts.name),
    }
}

async fn write(
    store: &Arc<dyn crate::store::Store>,
    opts: &SplitOptions,
    items: &[Item],
    placed: &[usize],
    report: &SplitReport,
) -> Result<(), RunError> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|a, b| items[*a].video_id.cmp(&items[*b].video_id));
    let col = |f: &dyn Fn(usize) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from_iter(order.iter().map(|i| f(*i))))
    };
    let schema = Schema::new(vec![
        Field::new("video_id", DataType::Utf8, false),
        Field::new("split", DataType::Utf8, false),
        Field::new("stratum", DataType::Utf8, false),
        Field::new("group", DataType::Utf8, true),
        Field::new("duplicate_cluster", DataType::Utf8, true),
    ]);
    let group = |i: usize| {
        let g = &items[i].group;
        (!g.starts_with('\u{0}')).then(|| g.clone())
    };
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            col(&|i| Some(items[i].video_id.clone())),
            col(&|i| Some(opts.names[placed[i]].clone())),
            col(&|i| Some(items[i].stratum.clone())),
            col(&group),
            col(&|i| items[i].cluster.clone()),
        ],
    )
    .map_err(|e| RunError::Internal(e.to_string()))?;
    let path = format!("splits/{}.parquet", opts.name);
    store
        .put(&path, crate::store::shards::encode_table(&batch)?)
        .await
        .map_err(|e| RunError::io(path.clone(), e))?;
    let path = format!("splits/{}.json", opts.name);
    let json = serde_json::to_vec_pretty(report).unwrap_or_default();
    store
        .put(&path, json)
        .await
        .map_err(|e| RunError::io(path.clone(), e))
}
