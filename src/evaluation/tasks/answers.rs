//! A predictions file's answers to a task release, aligned with the release's references.

use super::Loaded;
use crate::benchmark::score::Reference;
use crate::error::RunError;
use crate::evaluation::rows::{Fields, Loc, each_row};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One model's answers aligned with the release's references: `[task][position]`, None where
/// the model gave none.
pub(in crate::evaluation) type Answers = Vec<Vec<Option<String>>>;

/// The predictions file's answer column: `prediction`, else `answer`.
pub fn answer_column(path: &Path, columns: &[String]) -> Result<&'static str, RunError> {
    ["prediction", "answer"]
        .into_iter()
        .find(|c| columns.iter().any(|x| x == c))
        .ok_or_else(|| {
            RunError::Config(format!(
                "{}:1: needs columns item_id and prediction (or answer); has: {}",
                path.display(),
                columns.join(", ")
            ))
        })
}

/// One model's answers (the file must hold one model's), how many rows it has and how many of
/// them answer items of other splits; unknown and repeated items exit 2 at their line.
pub(super) fn read_answers(
    path: &Path,
    loaded: &Loaded,
) -> Result<(Answers, usize, usize), RunError> {
    let (by_model, rows, other) = read_model_answers(path, loaded)?;
    let refs = &loaded.refs;
    if by_model.len() > 1 {
        return Err(RunError::Config(format!(
            "{}: answers of {} models ({}): score one model per file, or compare prompt variants with --variant",
            path.display(),
            by_model.len(),
            by_model.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let none = refs.iter().map(|r| vec![None; r.len()]).collect();
    Ok((by_model.into_values().next().unwrap_or(none), rows, other))
}

/// A model's answers while they are read: the answers, the row each came from, and those taken
/// from the `answer` column.
type Given = (Answers, Vec<Vec<u32>>, Vec<(u32, u32)>);

/// The columns a predictions file of a task release is read for.
const NAMES: [&str; 4] = ["item_id", "prediction", "answer", "model"];

/// model (the `model` column; `model` without one) → its answers aligned with the split's
/// references, the rows read, and the rows that answer items of other splits (skipped);
/// unknown items and an item a model answers twice exit 2 at their line. Read a row at a time
/// (`rows::each_row`): no map or string per row beyond the answer itself.
pub(in crate::evaluation) fn read_model_answers(
    path: &Path,
    loaded: &Loaded,
) -> Result<(BTreeMap<String, Answers>, usize, usize), RunError> {
    let refs = &loaded.refs;
    let index = item_positions(refs);
    let mut other = 0;
    // model → (answers, the row each came from, whether it was the `answer` column's).
    let mut out: BTreeMap<String, Given> = BTreeMap::new();
    let mut rows = 0;
    let mut first_loc = None;
    let found = each_row(path, &NAMES, |at, f| {
        first_loc.get_or_insert((at.n, at.parquet));
        rows += 1;
        let id = f[0].as_deref().unwrap_or("");
        // Under every split nothing is other: no second lookup per row.
        if !loaded.others.is_empty() && !index.contains_key(id) && loaded.others.contains(id) {
            other += 1;
            return Ok(());
        }
        take_answer(&mut out, &index, refs, at, f)
    })?;
    let (has_prediction, has_answer) = (found.seen[1], found.seen[2]);
    if !has_prediction && !has_answer {
        let at = first_loc.map_or(format!("{}", path.display()), |(n, parquet)| {
            Loc {
                file: &path.display().to_string(),
                n,
                parquet,
            }
            .to_string()
        });
        return Err(RunError::Config(format!(
            "{at}: needs columns item_id and prediction (or answer); has: {}",
            found.columns.join(", ")
        )));
    }
    Ok((
        out.into_iter()
            .map(|(m, (mut answers, _, from_answer))| {
                // The `prediction` column is the answer where a file has both.
                if has_prediction {
                    for (t, i) in from_answer {
                        answers[t as usize][i as usize] = Some(String::new());
                    }
                }
                (m, answers)
            })
            .collect(),
        rows,
        other,
    ))
}

/// item id → (task, position) of its reference in the release.
fn item_positions(refs: &[Vec<Reference>]) -> HashMap<&str, (u32, u32)> {
    refs.iter()
        .enumerate()
        .flat_map(|(t, rs)| {
            rs.iter()
                .enumerate()
                .map(move |(i, r)| (r.item_id.as_str(), (t as u32, i as u32)))
        })
        .collect()
}

/// Files one row's answer under its model; an unknown item or a second answer to an item is an
/// error at the row.
fn take_answer(
    out: &mut BTreeMap<String, Given>,
    index: &HashMap<&str, (u32, u32)>,
    refs: &[Vec<Reference>],
    at: Loc,
    f: &Fields,
) -> Result<(), RunError> {
    let id = f[0]
        .as_deref()
        .ok_or_else(|| RunError::Config(format!("{at}: no item_id")))?;
    let &(t, i) = index
        .get(id)
        .ok_or_else(|| RunError::Config(format!("{at}: item_id {id:?} is not in the release")))?;
    let model = f[3].as_deref().filter(|m| !m.is_empty()).unwrap_or("model");
    if !out.contains_key(model) {
        let empty = || refs.iter().map(|r| vec![None; r.len()]).collect();
        let lines = refs.iter().map(|r| vec![0; r.len()]).collect();
        out.insert(model.to_string(), (empty(), lines, vec![]));
    }
    let (answers, lines, from_answer) = out.get_mut(model).expect("inserted above");
    let slot = &mut answers[t as usize][i as usize];
    if slot.is_some() {
        let first = Loc {
            n: lines[t as usize][i as usize] as usize,
            ..at
        };
        return Err(RunError::Config(format!(
            "{at}: item {id:?} is answered twice (first at {first})"
        )));
    }
    lines[t as usize][i as usize] = at.n as u32;
    let text = match (&f[1], &f[2]) {
        (Some(p), _) => p.to_string(),
        (None, Some(a)) => {
            from_answer.push((t, i));
            a.to_string()
        }
        (None, None) => String::new(),
    };
    *slot = Some(text);
    Ok(())
}
