//! The question table of `vidcurate questions RUN` of a run. Per taxonomy level: the videos and
//! items drafted, kept and rejected; the rules the rejected ones broke; the correct letters of the
//! kept ones; near-duplicates; and, when the checks ran, the items a text-only model answered
//! (`blind`) and those a second model put on another level (`level_check`). Then the letters'
//! balance over the whole run, with the chi-squared test against equal shares (the run summary
//! covers one invocation; this covers every item stored).
//!
//! Reads the committed rows of the run's questions, blind and level_check stages (current
//! fingerprints) through the run reader; blind flags are decided again under the pipeline's own
//! `select` (or `--set`, as rethreshold takes them), so the table follows a re-threshold. Writes
//! nothing unless `--csv` names a file.

use crate::error::RunError;
use crate::record::QuestionItem;
use crate::stages::questions::blind::{BlindRow, BlindSelect};
use crate::stages::questions::items::balance_p;
use crate::stages::questions::level_check::LevelRow;
use crate::store::run::RunView;
use crate::store::shards::read_table;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One level's line (or the `all` line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelLine {
    pub level: String,
    pub videos: usize,
    pub drafted: usize,
    pub kept: usize,
    pub rejected: usize,
    /// Correct letters of the kept items: A, B, C, …
    pub letters: BTreeMap<String, usize>,
    pub near_duplicates: usize,
    /// Kept items the blind stage checked, and of them, flagged.
    pub blind_checked: usize,
    pub blind_flagged: usize,
    /// Kept items the level check read a level for, of them another one, and not read.
    pub level_checked: usize,
    pub level_disagree: usize,
    pub level_unread: usize,
}

#[derive(Debug, Clone, Default)]
pub struct QuestionTable {
    pub stage: String,
    pub blind_stage: Option<String>,
    pub level_stage: Option<String>,
    /// One line per level, in the taxonomy's order, then `all`.
    pub levels: Vec<LevelLine>,
    /// Rejected items per rule broken (an item can break several) and level.
    pub rules: BTreeMap<String, BTreeMap<String, usize>>,
    /// Chi-squared p of the kept items' correct letters against equal shares.
    pub balance_p: Option<f64>,
}

pub async fn table(
    run_dir: &Path,
    stage: Option<&str>,
    overrides: &[crate::stages::selection::Override],
) -> Result<QuestionTable, RunError> {
    let run = RunView::open(run_dir).await?;
    let kinds: Vec<(&str, &str, &str)> = run
        .manifest
        .stages
        .iter()
        .map(|s| (s.id.as_str(), s.kind.as_str(), s.fingerprint.as_str()))
        .collect();
    let (qid, qfp) = questions_stage(run_dir, &kinds, stage)?;
    // The checks that come after this questions stage (the first of each kind).
    let after: Vec<_> = kinds.iter().skip_while(|(id, _, _)| *id != qid).collect();
    let check = |kind: &str| after.iter().find(|s| s.1 == kind).map(|s| (s.0, s.2));
    let items: HashMap<String, Vec<QuestionItem>> =
        read_table(&run.store, qid, qfp, true).await?.rows()?;
    let mut out = QuestionTable {
        stage: qid.to_string(),
        ..Default::default()
    };
    let mut blind: HashMap<String, bool> = HashMap::new();
    if let Some((bid, bfp)) = check("blind") {
        blind = blind_flags(&run, bid, bfp, overrides).await?;
        out.blind_stage = Some(bid.to_string());
    }
    let mut levels: HashMap<String, LevelRow> = HashMap::new();
    if let Some((lid, lfp)) = check("level_check") {
        let rows: HashMap<String, Vec<LevelRow>> =
            read_table(&run.store, lid, lfp, true).await?.rows()?;
        for r in rows.into_values().flatten() {
            levels.insert(r.item_id.clone(), r);
        }
        out.level_stage = Some(lid.to_string());
    }
    count_levels(&mut out, &items, &blind, &levels);
    Ok(out)
}

/// The questions stage the table is of: the one named, or the run's only one.
fn questions_stage<'a>(
    run_dir: &Path,
    kinds: &[(&'a str, &'a str, &'a str)],
    stage: Option<&str>,
) -> Result<(&'a str, &'a str), RunError> {
    let questions: Vec<_> = kinds
        .iter()
        .filter(|(id, kind, _)| *kind == "questions" && stage.is_none_or(|s| s == *id))
        .collect();
    match questions.as_slice() {
        [one] => Ok((one.0, one.2)),
        [] => Err(RunError::Config(format!(
            "{}: {}",
            run_dir.display(),
            match stage {
                Some(s) => format!("no questions stage with id {s:?}"),
                None => "the run has no questions stage".into(),
            }
        ))),
        many => {
            let ids: Vec<&str> = many.iter().map(|s| s.0).collect();
            Err(RunError::Config(format!(
                "{}: several questions stages ({}): name one with --stage",
                run_dir.display(),
                ids.join(", ")
            )))
        }
    }
}

/// Item → flagged by the blind stage, decided under its `select` with `overrides` applied.
async fn blind_flags(
    run: &RunView,
    bid: &str,
    bfp: &str,
    overrides: &[crate::stages::selection::Override],
) -> Result<HashMap<String, bool>, RunError> {
    let mut select = run.selects().remove(bid).unwrap_or_default();
    for o in overrides.iter().filter(|o| o.stage == bid) {
        select.insert(o.key.clone(), o.value.clone());
    }
    let select: BlindSelect = toml::Value::Table(select)
        .try_into()
        .map_err(|e| RunError::Config(format!("{bid}: select: {e}")))?;
    let rows: HashMap<String, Vec<BlindRow>> =
        read_table(&run.store, bid, bfp, true).await?.rows()?;
    let mut blind = HashMap::new();
    for r in rows.into_values().flatten() {
        let flagged = select.flagged(&r);
        blind.insert(r.item_id, flagged);
    }
    Ok(blind)
}

/// The level lines, the `all` line, the rules broken and the letters' balance.
fn count_levels(
    out: &mut QuestionTable,
    items: &HashMap<String, Vec<QuestionItem>>,
    blind: &HashMap<String, bool>,
    levels: &HashMap<String, LevelRow>,
) {
    let mut videos: Vec<&String> = items.keys().collect();
    videos.sort();
    let mut lines: Vec<LevelLine> = vec![];
    let mut all = LevelLine {
        level: "all".into(),
        videos: videos.len(),
        ..Default::default()
    };
    for v in videos {
        let mut seen_here: Vec<&str> = vec![];
        for it in &items[v] {
            // Levels in the order items come (the taxonomy's: the stage writes them so).
            let at = match lines.iter().position(|l| l.level == it.level) {
                Some(i) => i,
                None => {
                    lines.push(LevelLine {
                        level: it.level.clone(),
                        ..Default::default()
                    });
                    lines.len() - 1
                }
            };
            let line = &mut lines[at];
            if !seen_here.contains(&it.level.as_str()) {
                seen_here.push(&it.level);
                line.videos += 1;
            }
            for l in [&mut *line, &mut all] {
                count(l, it, blind.get(&it.item_id), levels.get(&it.item_id));
            }
            if !it.kept {
                for code in &it.reject_codes {
                    *out.rules
                        .entry(code.clone())
                        .or_default()
                        .entry(it.level.clone())
                        .or_default() += 1;
                }
            }
        }
    }
    let counts: Vec<u64> = all.letters.values().map(|&n| n as u64).collect();
    out.balance_p = balance_p(&counts);
    lines.push(all);
    out.levels = lines;
}

fn count(l: &mut LevelLine, it: &QuestionItem, blind: Option<&bool>, lv: Option<&LevelRow>) {
    l.drafted += 1;
    if !it.kept {
        l.rejected += 1;
        return;
    }
    l.kept += 1;
    *l.letters.entry(it.answer.clone()).or_default() += 1;
    l.near_duplicates += usize::from(it.near_duplicate);
    if let Some(&flagged) = blind {
        l.blind_checked += 1;
        l.blind_flagged += usize::from(flagged);
    }
    if let Some(r) = lv {
        if r.checked_level.is_empty() {
            l.level_unread += 1;
        } else {
            l.level_checked += 1;
            l.level_disagree += usize::from(!r.agree);
        }
    }
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        "-".into()
    } else {
        format!("{:.1} %", 100.0 * n as f64 / of as f64)
    }
}

/// The letters seen anywhere in the table, in order.
fn letter_names(t: &QuestionTable) -> Vec<String> {
    let mut names: Vec<String> = t
        .levels
        .iter()
        .flat_map(|l| l.letters.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// One level's cells, in the header's order.
fn level_cells(t: &QuestionTable, l: &LevelLine, letters: &[String]) -> Vec<String> {
    let mut cells = vec![
        l.level.clone(),
        l.videos.to_string(),
        l.drafted.to_string(),
        l.kept.to_string(),
        l.rejected.to_string(),
    ];
    cells.extend(
        letters
            .iter()
            .map(|x| l.letters.get(x).copied().unwrap_or(0).to_string()),
    );
    cells.push(l.near_duplicates.to_string());
    if t.blind_stage.is_some() {
        cells.push(format!(
            "{} ({})",
            l.blind_flagged,
            pct(l.blind_flagged, l.blind_checked)
        ));
    }
    if t.level_stage.is_some() {
        cells.push(format!(
            "{} ({})",
            l.level_disagree,
            pct(l.level_disagree, l.level_checked)
        ));
        cells.push(l.level_unread.to_string());
    }
    cells
}

/// The table as printed (Markdown, so it pastes into a card or a README).
pub fn render(t: &QuestionTable) -> String {
    let letters = letter_names(t);
    let mut head = vec!["level", "videos", "drafted", "kept", "rejected"];
    head.extend(letters.iter().map(String::as_str));
    head.push("near-dup");
    if t.blind_stage.is_some() {
        head.push("blind flagged");
    }
    if t.level_stage.is_some() {
        head.extend(["other level", "no level"]);
    }
    let mut s = format!("questions stage `{}`\n\n", t.stage);
    s += &format!("| {} |\n", head.join(" | "));
    s += &format!(
        "|{}\n",
        head.iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
            .collect::<String>()
    );
    for l in &t.levels {
        s += &format!("| {} |\n", level_cells(t, l, &letters).join(" | "));
    }
    if !t.rules.is_empty() {
        s += "\nrejected items by the rule they broke (an item can break several):\n";
        for (code, per) in &t.rules {
            let n: usize = per.values().sum();
            let by: Vec<String> = per.iter().map(|(l, n)| format!("{l} {n}")).collect();
            s += &format!("  {code:<22} {n:>5}  ({})\n", by.join(", "));
        }
    }
    if let Some(all) = t.levels.last() {
        let shares: Vec<String> = letters
            .iter()
            .map(|x| {
                format!(
                    "{x} {}",
                    pct(all.letters.get(x).copied().unwrap_or(0), all.kept)
                )
            })
            .collect();
        s += &format!(
            "\ncorrect letters of {} kept items: {}",
            all.kept,
            shares.join(", ")
        );
        if let Some(p) = t.balance_p {
            s += &format!(" (chi-squared against equal shares: p = {p:.3})");
        }
        s += "\n";
    }
    s
}

/// The table as CSV: one row per level line, the rules after it as `rule:<code>` rows.
pub fn csv(t: &QuestionTable) -> String {
    let letters = letter_names(t);
    let mut s = String::from("level,videos,drafted,kept,rejected");
    for x in &letters {
        s += &format!(",answer_{x}");
    }
    s += ",near_duplicates,blind_checked,blind_flagged,level_checked,level_disagree,level_unread\n";
    for l in &t.levels {
        s += &format!(
            "{},{},{},{},{}",
            l.level, l.videos, l.drafted, l.kept, l.rejected
        );
        for x in &letters {
            s += &format!(",{}", l.letters.get(x).copied().unwrap_or(0));
        }
        s += &format!(
            ",{},{},{},{},{},{}\n",
            l.near_duplicates,
            l.blind_checked,
            l.blind_flagged,
            l.level_checked,
            l.level_disagree,
            l.level_unread
        );
    }
    s
}
