//! The review of question items by people (HarmVideoBench A.2: two reviewers and a senior
//! adjudicator), through Label Studio.
//!
//! `annotate export --items` reads the run's kept items (questions stage), the caption, blind and
//! level_check tables (the flags a reviewer sees), and the media URLs as `annotate export` makes
//! them; it writes `tasks.json` (one task per item, the item as a pre-annotation to edit) and
//! `label_config.xml` (accept / edit / reject, the question, options, answer and level, and a
//! reason). `annotate import` of that project's JSON export checks each review field by field,
//! decides each item under the rule, classes the decided item against the drafted one (accepted
//! as is, minor edit, rewritten, rejected), and stores `annotations/items.parquet` (one row per
//! item and reviewer, plus the decided row) and `annotations/items_report.json` (kappa per level,
//! retention and edit shares, what was kept out and why). Calls nothing; caches nothing.

use super::{Rule, textarea};
use crate::benchmark::formats::letter;
use crate::benchmark::review::items::*;
use crate::benchmark::review::xml_choices as choices;
use crate::benchmark::text::norm;
use crate::error::RunError;
use crate::record::QuestionItem;
use crate::stages::questions::blind::BlindRow;
use crate::stages::questions::level_check::LevelRow;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::read_table;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The label config: the video, caption and checks shown; decision, question, options (A to
/// the most options an item has), answer, level and reason to fill in.
pub fn label_config(options: usize, levels: &[String]) -> String {
    let mut x = String::from(
        "<View>\n  <Header value=\"$title\"/>\n  <Video name=\"video\" value=\"$video\"/>\n  <Header value=\"Caption (the model's, for context)\"/>\n  <Text name=\"caption\" value=\"$caption\"/>\n  <Header value=\"Checks the pipeline made\"/>\n  <Text name=\"flags\" value=\"$flags\"/>\n  <Header value=\"Decision: accept as is, edit below, or reject with a reason\"/>\n  <Choices name=\"decision\" toName=\"video\" choice=\"single\" required=\"true\">\n",
    );
    x += &choices(&DECISIONS.map(String::from));
    x += "  </Choices>\n  <Header value=\"Question\"/>\n  <TextArea name=\"question\" toName=\"video\" rows=\"2\" maxSubmissions=\"1\" editable=\"true\"/>\n  <Header value=\"Options (leave one empty to drop it)\"/>\n";
    for i in 0..options {
        x += &format!(
            "  <TextArea name=\"option_{}\" toName=\"video\" rows=\"1\" maxSubmissions=\"1\" editable=\"true\" placeholder=\"{}\"/>\n",
            letter(i).to_lowercase(),
            letter(i)
        );
    }
    x += "  <Header value=\"Correct option\"/>\n  <Choices name=\"answer\" toName=\"video\" choice=\"single\">\n";
    x += &choices(&(0..options).map(letter).collect::<Vec<_>>());
    x += "  </Choices>\n  <Header value=\"Level\"/>\n  <Choices name=\"level\" toName=\"video\" choice=\"single\">\n";
    x += &choices(levels);
    x += "  </Choices>\n  <Header value=\"Why rejected\"/>\n  <TextArea name=\"reject_reason\" toName=\"video\" rows=\"1\" maxSubmissions=\"1\" editable=\"true\"/>\n</View>\n";
    x
}

/// The run's questions stage, its items (every item, kept or not) with their video, by video,
/// and the levels in the order the stage writes them (the taxonomy's).
pub(super) async fn run_items(
    store: &Arc<dyn Store>,
    m: &Manifest,
) -> Result<(String, Vec<(String, QuestionItem)>, Vec<String>), RunError> {
    let kind = crate::stages::questions::KIND.name;
    let q = m.stages.iter().find(|s| s.kind == kind).ok_or_else(|| {
        RunError::Config("the run has no questions stage: there are no items to review".into())
    })?;
    let rows: BTreeMap<String, Vec<QuestionItem>> = read_table(store, &q.id, &q.fingerprint, true)
        .await?
        .rows()?
        .into_iter()
        .collect();
    let mut levels: Vec<String> = vec![];
    let mut items = vec![];
    for (v, rs) in rows {
        for it in rs {
            if !levels.contains(&it.level) {
                levels.push(it.level.clone());
            }
            items.push((v.clone(), it));
        }
    }
    Ok((q.id.clone(), items, levels))
}

/// What the pipeline's checks say of an item, for the reviewer.
fn flags(it: &QuestionItem, blind: Option<&BlindRow>, level: Option<&LevelRow>) -> String {
    let mut f = vec![];
    if let Some(b) = blind {
        f.push(format!(
            "blind: {} of {} text-only answers right{}",
            b.correct,
            b.samples,
            if b.flagged {
                " (flagged: answerable without the video)"
            } else {
                ""
            }
        ));
    }
    if let Some(l) = level {
        if !l.agree && !l.checked_level.is_empty() {
            f.push(format!(
                "level check: a second model says {}",
                l.checked_level
            ));
        } else if !l.problem.is_empty() {
            f.push(format!("level check: not read ({})", l.problem));
        }
    }
    if it.near_duplicate {
        f.push(format!(
            "near-duplicate of {} (similarity {:.2})",
            it.nearest_item, it.nearest_similarity
        ));
    }
    if f.is_empty() {
        "no flags".into()
    } else {
        f.join("; ")
    }
}

fn choice(name: &str, v: &str) -> Value {
    json!({"from_name": name, "to_name": "video", "type": "choices", "value": {"choices": [v]}})
}

/// The item's fields as Label Studio results: what the reviewer starts from.
fn as_results(it: &QuestionItem) -> Vec<Value> {
    let mut r = vec![textarea("question", &[&it.question])];
    for (i, o) in it.options.iter().enumerate() {
        r.push(textarea(
            &format!("option_{}", letter(i).to_lowercase()),
            &[o],
        ));
    }
    r.push(choice("answer", &it.answer));
    r.push(choice("level", &it.level));
    r
}

/// Writes tasks.json and label_config.xml for the kept items of `videos`.
pub(super) async fn export_items(
    store: &Arc<dyn Store>,
    m: &Manifest,
    videos: &[String],
    media: &dyn Fn(&str) -> (String, String),
    out: &std::path::Path,
) -> Result<usize, RunError> {
    let (qid, items, levels) = run_items(store, m).await?;
    let caption =
        super::columns::column_by_video(store, m, crate::stages::caption::KIND.name, &["caption"])
            .await?;
    let blind: HashMap<String, BlindRow> = rows_after(
        store,
        m,
        &qid,
        crate::stages::questions::blind::KIND.name,
        |r: &BlindRow| r.item_id.clone(),
    )
    .await?;
    let checked: HashMap<String, LevelRow> = rows_after(
        store,
        m,
        &qid,
        crate::stages::questions::level_check::KIND.name,
        |r: &LevelRow| r.item_id.clone(),
    )
    .await?;
    let wanted: std::collections::HashSet<&str> = videos.iter().map(String::as_str).collect();
    let mut tasks = vec![];
    let mut options = 0;
    for (v, it) in items.iter().filter(|(_, i)| i.kept) {
        if !wanted.contains(v.as_str()) {
            continue;
        }
        options = options.max(it.options.len());
        let (url, title) = media(v);
        let mut data = json!({
            "item_id": it.item_id, "video_id": v, "video": url, "title": title,
            "caption": caption.get(v).and_then(|c| c[0].clone()).unwrap_or_default(),
            "level": it.level, "question": it.question, "answer": it.answer,
            "rationale": it.rationale, "context_note": it.context_note,
            "flags": flags(it, blind.get(&it.item_id), checked.get(&it.item_id)),
        });
        for (i, o) in it.options.iter().enumerate() {
            data[format!("option_{}", letter(i).to_lowercase())] = json!(o);
        }
        tasks.push(json!({
            "data": data,
            "predictions": [{"model_version": "vidcurate-questions", "result": as_results(it)}],
        }));
    }
    let config = label_config(options.max(2), &levels);
    super::write_export(out, &tasks, &config, None)?;
    Ok(tasks.len())
}

/// The fields of one annotation's results, by control name (texts joined, the choices).
fn results_by_name(result: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut f = BTreeMap::new();
    for r in result {
        let name = r["from_name"].as_str().unwrap_or_default().to_string();
        let v = &r["value"];
        let vals: Vec<String> = match r["type"].as_str().unwrap_or_default() {
            "textarea" => vec![super::strings(&v["text"]).join(" ")],
            "choices" => super::strings(&v["choices"]),
            _ => continue,
        };
        f.insert(name, vals);
    }
    f
}

/// One annotation as a review of `drafted`: a field the reviewer left out keeps the drafted
/// value (Label Studio omits untouched controls). Errs with (field, reason).
pub fn review_of(
    drafted: &QuestionItem,
    result: &[Value],
    levels: &[String],
    annotator: &str,
    video: &str,
) -> Result<ItemReview, Vec<(String, String)>> {
    let f = results_by_name(result);
    let one = |k: &str| first_trimmed(&f, k);
    let mut problems = vec![];
    let decision = one("decision").unwrap_or_default();
    if !DECISIONS.contains(&decision.as_str()) {
        problems.push((
            "decision".into(),
            format!("{decision:?} is not one of accept, edit, reject"),
        ));
    }
    let question = one("question").unwrap_or_else(|| drafted.question.clone());
    let shown = shown_options(drafted, &f);
    let answers: Vec<String> = match f.get("answer") {
        Some(v) => v.clone(),
        None => vec![drafted.answer.clone()],
    };
    let level = one("level").unwrap_or_else(|| drafted.level.clone());
    let reason = one("reject_reason").unwrap_or_default();
    let mut answer = String::new();
    if decision == "reject" {
        if reason.is_empty() {
            problems.push((
                "reject_reason".into(),
                "missing: a rejection says why".into(),
            ));
        }
    } else {
        answer = check_kept(&question, &shown, &answers, &level, levels, &mut problems);
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let keep = decision != "reject";
    Ok(ItemReview {
        item_id: drafted.item_id.clone(),
        video_id: video.to_string(),
        annotator: annotator.to_string(),
        decision: decision.clone(),
        question: if keep {
            question
        } else {
            drafted.question.clone()
        },
        options: if keep {
            shown.into_iter().map(|(_, t)| t).collect()
        } else {
            drafted.options.clone()
        },
        answer: if keep { answer } else { drafted.answer.clone() },
        level: if keep { level } else { drafted.level.clone() },
        drafted_level: drafted.level.clone(),
        reject_reason: reason,
        ..Default::default()
    })
}

/// The first value of a control, trimmed.
fn first_trimmed(f: &BTreeMap<String, Vec<String>>, k: &str) -> Option<String> {
    f.get(k)
        .and_then(|v| v.first())
        .map(|s| s.trim().to_string())
}

/// The options as the reviewer left them, with their letters.
fn shown_options(
    drafted: &QuestionItem,
    f: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, String)> {
    // Options A.. in order; an option left out keeps the drafted one, one emptied is dropped.
    let slots = drafted.options.len().max(
        f.keys()
            .filter_map(|k| k.strip_prefix("option_"))
            .filter_map(|l| l.bytes().next())
            .map(|b| (b.to_ascii_uppercase() - b'A') as usize + 1)
            .max()
            .unwrap_or(0),
    );
    let mut shown: Vec<(String, String)> = vec![];
    for i in 0..slots {
        let key = format!("option_{}", letter(i).to_lowercase());
        let text = first_trimmed(f, &key).or_else(|| drafted.options.get(i).cloned());
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            shown.push((letter(i), t));
        }
    }
    shown
}

/// The checks of a kept (accepted or edited) review's question, options, answer and level;
/// the answer as the letter of its option among `shown`.
fn check_kept(
    question: &str,
    shown: &[(String, String)],
    answers: &[String],
    level: &str,
    levels: &[String],
    problems: &mut Vec<(String, String)>,
) -> String {
    let mut answer = String::new();
    if question.is_empty() {
        problems.push(("question".into(), "empty".into()));
    }
    if shown.len() < 2 {
        problems.push((
            "options".into(),
            format!("{} option(s): an item needs at least two", shown.len()),
        ));
    }
    match answers {
        [a] => match shown.iter().position(|(l, _)| l == a) {
            Some(i) => answer = letter(i),
            None => problems.push((
                "answer".into(),
                format!("{a:?} names no option (the options are {})", letters(shown)),
            )),
        },
        [] => problems.push(("answer".into(), "no correct option chosen".into())),
        many => problems.push((
            "answer".into(),
            format!("two correct options ({}): an item has one", many.join(", ")),
        )),
    }
    // Two options that read the same are two correct answers when one of them is right.
    for i in 0..shown.len() {
        for j in i + 1..shown.len() {
            if norm(&shown[i].1) == norm(&shown[j].1) {
                problems.push((
                    "options".into(),
                    format!(
                        "options {} and {} read the same ({:?}): two correct options",
                        shown[i].0, shown[j].0, shown[i].1
                    ),
                ));
            }
        }
    }
    if !levels.iter().any(|l| l == level) {
        problems.push((
            "level".into(),
            format!(
                "{level:?} is not a level of the run's taxonomy ({})",
                levels.join(", ")
            ),
        ));
    }
    answer
}

fn letters(shown: &[(String, String)]) -> String {
    shown
        .iter()
        .map(|(l, _)| l.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Imports a Label Studio export of item tasks.
pub(super) async fn import_items(
    store: &Arc<dyn Store>,
    m: &Manifest,
    tasks: &[Value],
    rule: &Rule,
    minor_at: f64,
) -> Result<ItemImportReport, RunError> {
    let (_, items, levels) = run_items(store, m).await?;
    let drafted: HashMap<&str, (&String, &QuestionItem)> = items
        .iter()
        .map(|(v, i)| (i.item_id.as_str(), (v, i)))
        .collect();
    let mut report = ItemImportReport {
        rule: rule.name(),
        minor_at,
        ..Default::default()
    };
    let mut fresh = vec![];
    for t in tasks {
        fresh.extend(reviews_of_task(t, &drafted, &levels, minor_at, &mut report));
    }
    let (rows, changed) =
        crate::benchmark::review::merge_reviews(read_reviews(store).await?, fresh);
    report.changed = changed;
    // Reviews of an earlier draft of an item stay as history; only the current draft's decide.
    let current: Vec<ItemReview> = rows
        .iter()
        .filter(|r| {
            drafted
                .get(r.item_id.as_str())
                .is_some_and(|(_, d)| r.is_of(d))
        })
        .cloned()
        .collect();
    report.superseded = rows.len() - current.len();
    let decided = decide(&current, rule, &mut report.pending);
    report.reviews = rows.len();
    let senior = match rule {
        Rule::Reviewer(s) => Some(s.as_str()),
        _ => None,
    };
    for l in &levels {
        let d: Vec<&ItemReview> = decided.iter().filter(|r| &r.drafted_level == l).collect();
        let r: Vec<&ItemReview> = rows.iter().filter(|r| &r.drafted_level == l).collect();
        if !r.is_empty() {
            report.levels.push((l.clone(), shares(&d, &r, senior)));
        }
    }
    report.all = shares(
        &decided.iter().collect::<Vec<_>>(),
        &rows.iter().collect::<Vec<_>>(),
        senior,
    );
    let all: Vec<ItemReview> = rows.into_iter().chain(decided).collect();
    crate::benchmark::review::store_reviews(store, (ITEMS, ITEMS, ITEMS_REPORT), &all, &report)
        .await?;
    Ok(report)
}

/// The checked reviews of one exported task, classed against the drafted item; what is kept
/// out (a task without a known item, a review that does not check) goes to the report's
/// problems, a cancelled annotation to its count.
pub(super) fn reviews_of_task(
    t: &Value,
    drafted: &HashMap<&str, (&String, &QuestionItem)>,
    levels: &[String],
    minor_at: f64,
    report: &mut ItemImportReport,
) -> Vec<ItemReview> {
    let task_id = t["id"].as_i64();
    let problem = |item: Option<String>, field: &str, reason: &str| ItemProblem {
        task_id,
        item_id: item,
        annotator: None,
        field: field.into(),
        reason: reason.into(),
    };
    let Some(id) = t["data"]["item_id"].as_str() else {
        report.problems.push(problem(
            None,
            "data.item_id",
            "the task has no item_id (not exported by `annotate export --items`?)",
        ));
        return vec![];
    };
    let Some(&(video, d)) = drafted.get(id) else {
        report.problems.push(problem(
            Some(id.into()),
            "data.item_id",
            "unknown item: not in this run's questions table",
        ));
        return vec![];
    };
    if shown_draft(&t["data"]).is_some_and(|shown| shown != d.draft()) {
        report.problems.push(problem(
            Some(id.into()),
            "data.question",
            "the item was drafted again after this task was exported (its question, options, answer or level differ): export the items again and review the new draft",
        ));
        return vec![];
    }
    let (cancelled, problems) = (&mut report.cancelled, &mut report.problems);
    crate::benchmark::review::task_reviews(t, id, cancelled, problems, |who, result| {
        let mut r = review_of(d, result, levels, who, video)?;
        r.edit_class = edit_class(d, &r, minor_at).into();
        r.drafted = Some(d.draft());
        Ok(r)
    })
}

/// The draft an exported task showed (`record::draft_digest` of its level, question, options
/// and answer); None for a task without a question.
fn shown_draft(data: &Value) -> Option<String> {
    let question = data["question"].as_str()?;
    let text = |k: &str| data[k].as_str().unwrap_or_default().to_string();
    let options: Vec<String> = (0..)
        .map(|i| data[format!("option_{}", letter(i).to_lowercase())].as_str())
        .take_while(Option::is_some)
        .map(|o| o.unwrap_or_default().to_string())
        .collect();
    Some(crate::record::draft_digest(
        &text("level"),
        question,
        &options,
        &text("answer"),
    ))
}

/// The report as text.
pub fn render(r: &ItemImportReport) -> String {
    let mut s = format!(
        "{} item reviews stored ({} new or replaced), {} items decided ({}), {} cancelled (kept out)\n",
        r.reviews, r.changed, r.all.decided, r.rule, r.cancelled
    );
    if r.superseded > 0 {
        s += &format!(
            "{} reviews are of an earlier draft of their item: kept as history, not decided (export the items again)\n",
            r.superseded
        );
    }
    s += &crate::benchmark::review::render_problems(&r.problems, &r.pending);
    s += &format!(
        "\n{:<26} {:>7} {:>8} {:>9} {:>6} {:>9} {:>8} {:>10} {:>8} {:>11} {:>7}\n",
        "level",
        "decided",
        "accepted",
        "minor",
        "rewr.",
        "rejected",
        "moved",
        "retained",
        "minor %",
        "rewritten %",
        "kappa"
    );
    let line = |name: &str, x: &ReviewShares| {
        format!(
            "{name:<26} {:>7} {:>8} {:>9} {:>6} {:>9} {:>8} {:>9.1}% {:>7.1}% {:>10.1}% {:>7}\n",
            x.decided,
            x.accepted,
            x.minor_edit,
            x.rewritten,
            x.rejected,
            x.reassigned,
            100.0 * x.retained,
            100.0 * x.minor_share,
            100.0 * x.rewritten_share,
            x.kappa.map_or("-".into(), |k| format!("{k:.3}"))
        )
    };
    for (l, x) in &r.levels {
        s += &line(l, x);
    }
    s += &line("all", &r.all);
    s += &format!(
        "(minor and rewritten are shares of the retained items; kappa: the reviewers' agreement on accept / edit / reject, without the senior; minor edit: question and correct option at least {:.2} alike)\n",
        r.minor_at
    );
    s
}
