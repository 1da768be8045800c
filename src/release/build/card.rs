//! The dataset card (README.md): YAML front matter `datasets` reads (configs, features, split
//! sizes), then the funnel, the settings, what the person releasing it wrote (`--card`), the
//! cost, licence notes and provenance for people. Pure text, written to travel: no absolute
//! path of the builder's machine, numbers as the pipeline file wrote them (`tidy`).

use super::questions::QuestionsWritten;
use super::tasks::TaskWritten;
use super::tidy::{tidy, tidy_toml};
use super::*;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::stages::selection::FunnelRow;
use crate::store::manifest::Manifest;
use arrow::datatypes::{DataType, Field, Fields, Schema};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The types `datasets` declares plainly: large strings, lists and binaries become the ordinary
/// ones (a list's item field is named `item`, as pyarrow and `datasets` name it).
pub(super) fn plain(dt: &DataType) -> DataType {
    match dt {
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::List(f) | DataType::LargeList(f) => {
            DataType::List(Arc::new(Field::new("item", plain(f.data_type()), true)))
        }
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Field::new(f.name(), plain(f.data_type()), true))
                .collect::<Vec<_>>()
                .into(),
        ),
        other => other.clone(),
    }
}

/// A column's `datasets` feature as YAML lines at `indent` (after `- name: …`).
pub(super) fn feature_yaml(dt: &DataType, image_list: bool, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    if image_list {
        out.push_str(&format!("{pad}list: image\n"));
        return;
    }
    match dt {
        DataType::List(f) => match f.data_type() {
            DataType::Struct(fields) => {
                out.push_str(&format!("{pad}list:\n"));
                fields_yaml(fields, indent, out);
            }
            DataType::List(_) => {
                out.push_str(&format!("{pad}list:\n"));
                feature_yaml(f.data_type(), false, indent + 2, out);
            }
            inner => out.push_str(&format!("{pad}list: {}\n", dtype(inner))),
        },
        DataType::Struct(fields) => {
            out.push_str(&format!("{pad}struct:\n"));
            fields_yaml(fields, indent, out);
        }
        other => out.push_str(&format!("{pad}dtype: {}\n", dtype(other))),
    }
}

pub(super) fn fields_yaml(fields: &Fields, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for f in fields {
        out.push_str(&format!("{pad}- name: {}\n", f.name()));
        feature_yaml(f.data_type(), false, indent + 2, out);
    }
}

pub(super) fn dtype(dt: &DataType) -> &'static str {
    match dt {
        DataType::Null => "null",
        DataType::Boolean => "bool",
        DataType::Int8 => "int8",
        DataType::Int16 => "int16",
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::UInt8 => "uint8",
        DataType::UInt16 => "uint16",
        DataType::UInt32 => "uint32",
        DataType::UInt64 => "uint64",
        DataType::Float16 => "float16",
        DataType::Float32 => "float32",
        DataType::Float64 => "float64",
        DataType::Binary | DataType::LargeBinary => "binary",
        _ => "string",
    }
}

/// The dataset card: YAML front matter for `datasets`, then how the data was made.
#[allow(clippy::too_many_arguments)]
pub(super) fn card(
    m: &Manifest,
    schema: &Schema,
    images: &[String],
    sizes: &[(String, usize, usize)],
    p_bytes: &HashMap<String, usize>,
    split_report: &serde_json::Value,
    funnel: &[FunnelRow],
    inputs: &Inputs,
    by_split: &BTreeMap<String, Vec<String>>,
    langs: Option<&(String, HashMap<String, String>)>,
    questions: Option<&QuestionsWritten>,
    tasks: &[TaskWritten],
    cost: &super::cost::RunCost,
    person: &super::croissant::CardSettings,
    opts: &ReleaseOptions,
) -> String {
    let mut c = front_matter(schema, images, sizes, p_bytes, questions, tasks);
    c += &how_it_was_built(m, sizes, split_report, funnel);
    c += &super::croissant::card_section(person);
    c += &languages(langs, sizes, by_split);
    if let Some(q) = questions {
        c += &questions_section(q);
    }
    if !tasks.is_empty() {
        c += &tasks_section(tasks);
    }
    let videos = sizes.iter().map(|(_, n, _)| n).sum();
    let items = questions.map_or(0, |q| q.sizes.iter().map(|(_, n, _)| n).sum::<usize>())
        + tasks
            .iter()
            .flat_map(|t| &t.sizes)
            .map(|(_, n, _)| n)
            .sum::<usize>();
    c += &super::cost::section(cost, videos, items);
    c += "\nThe pipeline file as run (absolute paths shown relative to its folder):\n\n```toml\n";
    c += tidy_toml(&m.pipeline_toml, m).trim_end();
    c += "\n```\n\n## Columns\n\n";
    c += "- `video_id`, `split`; the source's columns (title, description, channel, upload time, counts, licence, `url` where the video can be fetched, `provenance`: every search that found it, with its query, parameters, page and rank) and the source manifest's own columns;\n";
    for t in &inputs.stages {
        c += &format!(
            "- from stage `{}`: {}\n",
            t.stage,
            t.columns
                .iter()
                .map(|(_, n)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(f) = &inputs.frames_stage {
        c += &match opts.frames {
            FrameMode::Paths => format!(
                "- `frames`: the sampled frames of stage `{f}` in time order, as paths of JPEG files under `frames/`;\n"
            ),
            FrameMode::Bytes => format!(
                "- `frames`: the sampled frames of stage `{f}` in time order, as images (JPEG bytes);\n"
            ),
            FrameMode::None => String::new(),
        };
    }
    if let Some(o) = &inputs.ocr_stage {
        c += &format!(
            "- `ocr_text`: the on-screen text stage `{o}` read, each distinct line once, in frame order.\n"
        );
    }
    if let Some(t) = &inputs.transcript_stage {
        c += &format!(
            "- `transcript`: what is said in the video (stage `{t}`), its segments joined in time order; `transcript_source` says where the text came from (`asr:<model>`, `captions:youtube`, `captions:json3`), `transcript_language` the language the service or caption track named, `transcript_reason` why a video has no text (`no_audio_stream`, `empty_audio`, `no_speech`). The timed segments are in the run's `{t}` table.\n"
        );
    }
    c += &format!(
        "\n## Perturbations\n\nThe `perturbations` config lists, per video, the frame order of each variant for the temporal-reasoning metric (RiskCue §3.4): `original`, `shuffled` (seed {}), `halves_swapped`, `reversed`, `first_frame`, `last_frame`. `frame_order` indexes the video's `frames`.\n",
        opts.seed
    );
    c += "\n## Licence and terms\n\nThe videos belong to their uploaders. This folder holds metadata, derived frames and text for research; the `license` column says what the platform reported for each video (YouTube: `youtube` is the standard licence, `creativeCommon` CC BY). Redistribution of frames must respect each video's licence and the platform's terms of service (YouTube API Services Terms: metadata may need refreshing or deleting when videos are removed). Remove a video on its owner's request.\n";
    c += "\n## Provenance\n\nEvery row says where its video came from: `url`, `channel_id` and `published_at` identify it on the platform, and `provenance` lists each search (query, parameters, result page and rank) that returned it. The run directory's manifest records the tool version, every stage's settings and fingerprint, and every invocation.\n";
    c
}

/// The language of each video, from the run's last `language` stage, and that stage's id
/// (None when no language stage ran). A video the stage has no row for is absent.
pub(super) fn video_languages(
    m: &Manifest,
    inputs: &Inputs,
) -> Option<(String, HashMap<String, String>)> {
    let kind = crate::stages::language::KIND.name;
    let st = m.stages.iter().rev().find(|s| s.kind == kind)?;
    let t = inputs.stages.iter().find(|t| t.stage == st.id)?;
    let col = crate::store::shards::text_column(&t.batch, "language")?;
    let map = t
        .row_of
        .iter()
        .filter(|&(_, &r)| !col.is_null(r as usize))
        .map(|(v, &r)| (v.clone(), col.value(r as usize).to_string()))
        .collect();
    Some((st.id.clone(), map))
}

/// Videos per language and split, from the run's `language` stage (none: nothing), as
/// HarmVideoBench reports its 55.8 % English, 28.5 % Chinese and 15.7 % mixed.
fn languages(
    langs: Option<&(String, HashMap<String, String>)>,
    sizes: &[(String, usize, usize)],
    by_split: &BTreeMap<String, Vec<String>>,
) -> String {
    let Some((stage, map)) = langs else {
        return String::new();
    };
    let language_of = |v: &str| map.get(v).cloned().unwrap_or_else(|| "(none)".into());
    // language → split → videos
    let mut counts: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    for (split, ids) in by_split {
        for v in ids {
            *counts
                .entry(language_of(v))
                .or_default()
                .entry(split.as_str())
                .or_default() += 1;
        }
    }
    let total: usize = sizes.iter().map(|(_, n, _)| n).sum::<usize>().max(1);
    let mut rows: Vec<(String, usize)> = counts
        .iter()
        .map(|(l, per)| (l.clone(), per.values().sum()))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut c = format!(
        "\n## Languages\n\nFrom stage `{stage}` (title, description, transcript and on-screen text; `mixed`: they disagree, `und`: no text to tell).\n\n| language | videos (all splits) | share |"
    );
    c += &split_columns(sizes, "|---|---:|---:|");
    for (l, n) in rows {
        c += &format!("| {l} | {n} | {:.1} % |", 100.0 * n as f64 / total as f64);
        for (s, _, _) in sizes {
            c += &format!(" {} |", counts[&l].get(s.as_str()).copied().unwrap_or(0));
        }
        c += "\n";
    }
    c
}

/// The end of a table's header: a column per split after the caller's own, then the rule line,
/// `rule` under the caller's columns and a right-aligned one per split.
fn split_columns(sizes: &[(String, usize, usize)], rule: &str) -> String {
    let names: String = sizes.iter().map(|(s, _, _)| format!(" {s} |")).collect();
    format!("{names}\n{rule}{}\n", "---:|".repeat(sizes.len()))
}

/// The YAML front matter `datasets` reads: the configs, their features and split sizes.
fn front_matter(
    schema: &Schema,
    images: &[String],
    sizes: &[(String, usize, usize)],
    p_bytes: &HashMap<String, usize>,
    questions: Option<&QuestionsWritten>,
    tasks: &[TaskWritten],
) -> String {
    let mut y =
        String::from("---\nconfigs:\n- config_name: default\n  default: true\n  data_files:\n");
    y += &data_files("data", sizes);
    y += "- config_name: perturbations\n  data_files:\n";
    y += &data_files("perturbations", sizes);
    if questions.is_some() {
        y += "- config_name: questions\n  data_files:\n";
        y += &data_files("questions", sizes);
    }
    for t in tasks {
        y += &format!("- config_name: {}\n  data_files:\n", t.info.name);
        y += &data_files(&format!("tasks/{}", t.info.name), &t.sizes);
    }
    y += "dataset_info:\n- config_name: default\n  features:\n";
    for f in schema.fields() {
        y += &format!("  - name: {}\n", f.name());
        feature_yaml(f.data_type(), images.contains(f.name()), 4, &mut y);
    }
    y += &splits_yaml(sizes);
    y += "- config_name: perturbations\n  features:\n  - name: video_id\n    dtype: string\n  - name: variant\n    dtype: string\n  - name: frame_order\n    list: uint32\n";
    // Six variants a video.
    let perturbed: Vec<(String, usize, usize)> = sizes
        .iter()
        .map(|(s, n, _)| (s.clone(), n * 6, p_bytes.get(s).copied().unwrap_or(0)))
        .collect();
    y += &splits_yaml(&perturbed);
    if let Some(q) = questions {
        y += &config_info("questions", q.schema.as_deref(), &q.sizes);
    }
    for t in tasks {
        y += &config_info(&t.info.name, t.schema.as_deref(), &t.sizes);
    }
    y += "---\n\n";
    y
}

/// A config's `data_files` entries: each split's files under `dir`.
fn data_files(dir: &str, sizes: &[(String, usize, usize)]) -> String {
    sizes
        .iter()
        .map(|(s, _, _)| format!("  - split: {s}\n    path: {dir}/{s}-*.parquet\n"))
        .collect()
}

/// A config's `splits` entries: (split, rows, bytes).
fn splits_yaml(sizes: &[(String, usize, usize)]) -> String {
    let mut y = String::from("  splits:\n");
    for (s, n, bytes) in sizes {
        y += &format!("  - name: {s}\n    num_bytes: {bytes}\n    num_examples: {n}\n");
    }
    y
}

/// The `dataset_info` entry of an items config (questions or a task): its features and splits.
fn config_info(name: &str, schema: Option<&Schema>, sizes: &[(String, usize, usize)]) -> String {
    let mut y = format!("- config_name: {name}\n  features:\n");
    if let Some(schema) = schema {
        fields_yaml(schema.fields(), 2, &mut y);
    }
    y + &splits_yaml(sizes)
}

/// One line per task config: what it asks, its format and metrics, where its reference came
/// from, its items per split.
fn tasks_section(tasks: &[TaskWritten]) -> String {
    let splits: Vec<&String> = tasks[0].sizes.iter().map(|(s, _, _)| s).collect();
    let mut c = String::from(
        "\n## Benchmark tasks\n\nOne config per task (`load_dataset(\"path/to/this/folder\", \"kep\")`), its items in the split of their video; `tasks/tasks.json` says what each task is; `vidcurate evaluate DIR PREDICTIONS` (item_id, prediction) scores each on the test split (`--split all`: every split). The reference is in the columns of the task's format (single choice: `options`, `answer`; multiple choice: `answer` letters and `answer_choices`; count: `answer_count`; time ranges: `answer_starts`, `answer_ends` in seconds; reference lists: `reference_fields` with `reference_items`; open text: `answer_text`; tagged reasoning: `answer_label`, the reasoning and the lists). `origin` says whether models drafted it (refined and judged; `judge_model`, `final_round`) or vidcurate derived it from measured columns (`from_columns`); `review` what people made of it (accepted, minor_edit, rewritten), null when the task was not reviewed.\n\n| task | title | category | format | metrics | reference |",
    );
    for s in &splits {
        c += &format!(" {s} |");
    }
    c += " to confirm (all splits) |\n|---|---|---|---|---|---|";
    c += &"---:|".repeat(splits.len() + 1);
    c += "\n";
    for t in tasks {
        let i = &t.info;
        let judges = if t.judges.is_empty() {
            String::new()
        } else {
            format!(
                ", judged by {}",
                t.judges.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        };
        c += &format!(
            "| {} | {} | {} | {} | {} | {}{judges} |",
            i.name,
            i.title,
            i.category,
            i.format,
            i.metrics.join(", "),
            i.reference
        );
        for (_, n, _) in &t.sizes {
            c += &format!(" {n} |");
        }
        c += &format!(" {} |\n", t.for_review);
    }
    let reviewed: Vec<&TaskWritten> = tasks.iter().filter(|t| t.review.is_some()).collect();
    if !reviewed.is_empty() {
        c += "\nReviewed by people (two reviewers and a senior in Label Studio; `review` says what they made of each item). Retention is of the decided items; the agreement is the reviewers', without the senior, with the items compared in brackets:\n\n| task | decided | retained | accepted | minor edits | rewritten | rejected | kappa on the decision | agreement on the reference | left out, undecided |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n";
        let num = |x: Option<f64>, n: usize| x.map_or("-".into(), |k| format!("{k:.3} ({n})"));
        for t in reviewed {
            let r = t.review.as_ref().expect("filtered");
            c += &format!(
                "| {} | {} | {:.1} % | {} | {} | {} | {} | {} | {}: {} | {} |\n",
                t.info.name,
                r.decided,
                100.0 * r.retained,
                r.accepted,
                r.minor_edit,
                r.rewritten,
                r.rejected,
                num(r.decision_kappa, r.decision_items),
                r.agreement_measure,
                num(r.reference_agreement, r.reference_items),
                t.unreviewed
            );
        }
    }
    if tasks.iter().any(|t| t.for_review > 0) {
        c += "\nItems to confirm (`for_review = true`) carry a derived draft people must check before it is a reference (a shot cut is not a camera angle).\n";
    }
    c
}

/// The card's title, the splits and the funnel with the stage settings as run.
fn how_it_was_built(
    m: &Manifest,
    sizes: &[(String, usize, usize)],
    split_report: &serde_json::Value,
    funnel: &[FunnelRow],
) -> String {
    let total: usize = sizes.iter().map(|(_, n, _)| n).sum();
    let mut c = format!(
        "# {}\n\nA video dataset of {total} videos built with vidcurate {} from the pipeline `{}` (`{}`).\n\n",
        m.pipeline_name,
        m.tool_version,
        m.pipeline_name,
        Path::new(&m.pipeline_file)
            .file_name()
            .map_or(m.pipeline_file.clone(), |f| f
                .to_string_lossy()
                .into_owned())
    );
    c += "```python\nfrom datasets import load_dataset\nds = load_dataset(\"path/to/this/folder\")              # train / validation / test\nperturbed = load_dataset(\"path/to/this/folder\", \"perturbations\")\n```\n\n";
    c += "## Splits\n\n| split | videos |\n|---|---:|\n";
    for (s, n, _) in sizes {
        c += &format!("| {s} | {n} |\n");
    }
    c += &format!(
        "\nVideo-level, deterministic (`vidcurate split`: ratios {}, stratified by {}, grouped by {}, seed {}).\n",
        split_report["ratios"],
        list_or(&split_report["stratify"], "nothing"),
        split_report["group"]
            .as_str()
            .unwrap_or("nothing (each video alone)"),
        split_report["seed"]
    );
    c += "\n## How it was built\n\nEach stage takes the videos the stages before it passed on (counts from the run's tables):\n\n| stage | type | in | done | rejected | not reached | out |\n|---|---|---:|---:|---:|---:|---:|\n";
    for r in funnel {
        c += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.stage, r.kind, r.input, r.done, r.rejected, r.pending, r.out
        );
    }
    c += "\nStage settings as run (models, thresholds):\n\n";
    for st in m.stages.iter().filter(|s| s.id != SOURCE_STAGE_ID) {
        c += &format!("- `{}` ({}): `{}`\n", st.id, st.kind, tidy(&st.compute, m));
    }
    c
}

/// Items per level and split, and per language, of the questions config.
fn questions_section(q: &QuestionsWritten) -> String {
    let total: usize = q.sizes.iter().map(|(_, n, _)| n).sum();
    let mut c = format!(
        "\n## Questions\n\nThe `questions` config holds {total} multiple-choice items from stage `{}`, one row per item, in the split of its video: `question`, `options` (A for the first), `answer` (the right letter), `level` (observable / internal / beyond), `rationale`, `context_note`, `language` (its video's), and `blind_correct` of `blind_samples` text-only answers (from the question and options alone) that named the right option.\n\n```python\nitems = load_dataset(\"path/to/this/folder\", \"questions\")\n```\n\nScore a model with `vidcurate evaluate DIR PREDICTIONS` (item_id, answer) on the test split (`--split all`: every split): accuracy per level, their macro average, standard errors clustered by video, and CircularEval over rotated options.\n\n| level | all splits |",
        q.stage
    );
    c += &split_columns(&q.sizes, "|---|---:|");
    for (l, per) in &q.levels {
        c += &format!("| {l} | {} |", per.values().sum::<usize>());
        for (s, _, _) in &q.sizes {
            c += &format!(" {} |", per.get(s).copied().unwrap_or(0));
        }
        c += "\n";
    }
    c += &review_section(q);
    c += "\n| language | items (all splits) | share |\n|---|---:|---:|\n";
    let mut langs: Vec<_> = q.languages.iter().collect();
    langs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (l, n) in langs {
        c += &format!(
            "| {l} | {n} | {:.1} % |\n",
            100.0 * *n as f64 / total.max(1) as f64
        );
    }
    c
}

/// What people made of the items (`annotate import` of an item review), or that nobody did.
fn review_section(q: &QuestionsWritten) -> String {
    use crate::benchmark::review::items::shares;
    if q.decided.is_empty() {
        return "\nNo person has reviewed these items: they are the candidates that passed the stage's checks.\n".into();
    }
    let d: Vec<_> = q.decided.iter().collect();
    let s = shares(&d, &[], None);
    let rule = q.report.as_ref().map_or("", |r| r.rule.as_str());
    let mut c = format!(
        "\nReviewed by people (`vidcurate annotate export --items`, Label Studio, `annotate import --rule {rule}`): of {} decided items {:.1} % were retained; of those, {:.1} % had minor edits and {:.1} % were rewritten, {} moved to another level; {} rejected. The `review` column says which (accepted, minor_edit, rewritten). {} kept candidates without a decision are left out. (HarmVideoBench A.2 reports 77.41 % retained, 37.7 % minor edits, 44.0 % rewritten.)\n",
        s.decided,
        100.0 * s.retained,
        100.0 * s.minor_share,
        100.0 * s.rewritten_share,
        s.reassigned,
        s.rejected,
        q.unreviewed
    );
    if let Some(r) = &q.report {
        c += "\n| level (drafted) | decided | retained | minor edit | rewritten | reviewers' kappa |\n|---|---:|---:|---:|---:|---:|\n";
        for (l, x) in r.levels.iter().chain([&("all".to_string(), r.all.clone())]) {
            c += &format!(
                "| {l} | {} | {:.1} % | {:.1} % | {:.1} % | {} |\n",
                x.decided,
                100.0 * x.retained,
                100.0 * x.minor_share,
                100.0 * x.rewritten_share,
                x.kappa
                    .map_or("-".into(), |k| format!("{k:.3} ({} items)", x.kappa_items))
            );
        }
        c += "\nThe agreement table covers every reviewed item of the run (all splits); kappa is the reviewers' agreement on accept / edit / reject, without the senior adjudicator.\n";
    }
    c
}

pub(super) fn list_or(v: &serde_json::Value, none: &str) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|x| x.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        _ => none.to_string(),
    }
}

/// The card's "Availability" section: what `manifest.parquet` lists and what it lacks.
pub(super) fn availability(a: &crate::release::availability::ManifestWritten) -> String {
    let mut c = format!(
        "\n## Availability\n\n`manifest.parquet` lists the {} videos with `video_id`, `split`, `url`, `media_sha256` (SHA-256 of the media file the run used) and `duration_secs`: `vidcurate rehydrate DIR` fetches them again and lists what vanished or changed, `vidcurate takedown DIR ID` removes a video from every file.",
        a.videos
    );
    for (n, what) in [
        (
            a.without_media,
            "have no checksum (null `media_sha256`): the run no longer had their media file",
        ),
        (
            a.without_url,
            "have no URL, so they cannot be fetched again",
        ),
        (a.without_duration, "have no duration"),
    ] {
        if n > 0 {
            c += &format!(" {n} {what}.");
        }
    }
    c + "\n"
}
