//! Task files: one benchmark task per TOML file, beside its taxonomy (MVFNDB's ten tasks are
//! `pipelines/tasks/mvfndb/*.toml`). A new task is a new file, no code.
//!
//! ```toml
//! name = "kep"                        # [a-z0-9_]+: the `task` column and the release config
//! title = "Key Elements Perception (KEP)"
//! category = "perception"             # perception | understanding | reasoning
//! targets = ["original_footage"]      # creator_added | original_footage | external_knowledge
//! format = "reference_list"           # see formats::FORMATS
//! definition = "…"                    # what the task asks (the paper's definition)
//! question = "…"                      # what the answering model is asked; {target_text} is
//!                                     # the item's target text where the task has one
//! options = ["…"]                     # choice formats with fixed options (NTU, CPP)
//! labels = ["real", "fake"]           # tagged_reasoning: what <result> may say
//! metrics = ["hit_rate.elements"]     # what part 2 computes; each must fit the format
//! taxonomy = "../../taxonomies/x.toml" # single_choice items drafted per level of a taxonomy
//!                                     # file (HarmVideoBench's three levels): the `questions`
//!                                     # stage builds such a task, with its checks
//!
//! [reference]
//! from = "drafted"                    # drafted (models, Figure 4) | derived | people
//! fields = ["elements"]               # the reference's lists (reference_list, tagged_reasoning)
//! # derived only: the rule, the stage type whose table it reads, and the columns it reads
//! # rule = "text_colour"; stage = "ocr"; columns = ["text_color", "creator_added"]
//! # for_review = true                 # a derived value people must confirm (SAC)
//!
//! [prompts]                           # files relative to the task file; fingerprinted
//! draft = "prompts/kep-draft.txt"     # drafted tasks: model A drafts, model B refines with
//! refine = "prompts/refine.txt"       # the judge's reasons, the judge scores 0–5
//! judge = "prompts/judge.txt"
//! ```
//! Reads the file and its prompt files; errors name file:line:key and exit 2 like every
//! configuration error. Writes nothing, calls nothing, caches nothing.

use super::formats::Format;
use super::metrics::Metric;
use crate::config::taxonomy::Taxonomy;
use crate::config::{ConfigError, Seg, SourceText, plain_name};
use crate::record::{Shot, TextRegion};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Perception,
    Understanding,
    Reasoning,
}

/// The feature of the video a task targets (MVFNDB Table 1: CAC, OSF, external knowledge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    CreatorAdded,
    OriginalFootage,
    ExternalKnowledge,
}

/// A task file as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    pub name: String,
    #[serde(default)]
    pub title: String,
    pub category: Category,
    pub targets: Vec<Target>,
    /// Checked against `formats::FORMATS` (a string here, so the error names the known ones).
    pub format: String,
    pub definition: String,
    pub question: String,
    #[serde(default)]
    pub options: Vec<String>,
    /// How many options an item shows, the right one among them (the rest drawn from the
    /// options that occur in the run); default: all of them.
    #[serde(default)]
    pub shown: Option<usize>,
    #[serde(default)]
    pub labels: Vec<String>,
    pub metrics: Vec<String>,
    /// Items drafted per level of this taxonomy file (relative to the task file), options and
    /// all, by the `questions` stage.
    #[serde(default)]
    pub taxonomy: Option<PathBuf>,
    pub reference: Reference,
    #[serde(default)]
    pub prompts: Prompts,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// `drafted`, `derived` or `people`.
    pub from: String,
    #[serde(default)]
    pub fields: Vec<String>,
    #[serde(default)]
    pub rule: Option<String>,
    #[serde(default)]
    pub stage: Option<String>,
    #[serde(default)]
    pub columns: Vec<String>,
    #[serde(default)]
    pub for_review: bool,
    /// tagged_reasoning: the source column holding the right label (FakeSV's mapped
    /// annotation), so the result's reference is the dataset's, not a model's.
    #[serde(default)]
    pub label_column: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompts {
    #[serde(default)]
    pub draft: Option<PathBuf>,
    #[serde(default)]
    pub refine: Option<PathBuf>,
    #[serde(default)]
    pub judge: Option<PathBuf>,
}

/// A rule that derives a reference from what a stage measured: the stage type it reads, the
/// format it yields, and the columns it cannot do without.
pub struct DerivedRule {
    pub name: &'static str,
    pub stage: &'static str,
    pub format: Format,
    pub needs: &'static [&'static str],
}

pub const DERIVED_RULES: &[DerivedRule] = &[
    // The named colour bin of a creator-added region's stroke HSV (CCP).
    DerivedRule {
        name: "text_colour",
        stage: "ocr",
        format: Format::SingleChoice,
        needs: &["text", "text_color", "creator_added"],
    },
    // The 30-cell grid position of a creator-added region (CPP).
    DerivedRule {
        name: "text_cell",
        stage: "ocr",
        format: Format::SingleChoice,
        needs: &["text", "grid_cell", "creator_added"],
    },
    // The time ranges a creator-added text is on screen, from its OCR track (KEG).
    DerivedRule {
        name: "text_ranges",
        stage: "ocr",
        format: Format::TimeRanges,
        needs: &["text", "timestamp_secs", "creator_added"],
    },
    // Shot boundaries counted, a draft for people: a cut is not an angle (SAC).
    DerivedRule {
        name: "shot_count",
        stage: "shots",
        format: Format::Count,
        needs: &["shots_in_video"],
    },
];

/// The columns of a stage type's table that a derived rule may read.
fn stage_columns(stage: &str) -> Option<Vec<String>> {
    let fields = match stage {
        "ocr" => crate::store::shards::fields_of::<TextRegion>(),
        "shots" => crate::store::shards::fields_of::<Shot>(),
        _ => return None,
    };
    fields
        .ok()
        .map(|f| f.iter().map(|f| f.name().clone()).collect())
}

/// A checked task: its file, its format and metrics, and its prompts' texts.
#[derive(Debug, Clone)]
pub struct Task {
    pub file: TaskFile,
    pub path: PathBuf,
    pub format: Format,
    pub metrics: Vec<Metric>,
    /// (role, text) of each prompt file given: draft, refine, judge.
    pub prompts: Vec<(&'static str, String)>,
    /// The taxonomy the items are drafted per level of, and its file's text.
    pub taxonomy: Option<(Taxonomy, String)>,
    /// BLAKE3 of the task file's text and its prompts' texts (first 16 hex digits): what an
    /// item records as where it came from.
    pub fingerprint: String,
}

impl Task {
    pub fn load(path: &Path) -> Result<Task, ConfigError> {
        let text = crate::config::read_file(path)?;
        Self::parse(path, text)
    }

    /// Checks the text of a task file; `path` names it in errors and anchors its prompt files.
    pub fn parse(path: &Path, text: String) -> Result<Task, ConfigError> {
        let src = SourceText::new(path, text.clone());
        let file: TaskFile = src.parse_typed()?;
        let format = check_shape(&file, &src)?;
        let lists = list_fields(&file, format, &src)?;
        let metrics = check_metrics(&file, format, &lists, &src)?;
        check_reference(&file, format, &src)?;
        let prompts = read_prompts(&file, path, &src)?;
        let taxonomy = read_taxonomy(&file, format, path, &src)?;
        let mut h = blake3::Hasher::new();
        h.update(text.as_bytes());
        for (role, p) in &prompts {
            h.update(role.as_bytes());
            h.update(p.as_bytes());
        }
        if let Some((_, t)) = &taxonomy {
            h.update(t.as_bytes());
        }
        Ok(Task {
            file,
            path: path.to_path_buf(),
            format,
            metrics,
            prompts,
            taxonomy,
            fingerprint: h.finalize().to_hex()[..16].to_string(),
        })
    }

    pub fn prompt(&self, role: &str) -> Option<&str> {
        self.prompts
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, t)| t.as_str())
    }
}

fn key(k: &str) -> Vec<Seg> {
    vec![Seg::Key(k.into())]
}

fn at(k: &str, i: usize) -> Vec<Seg> {
    vec![Seg::Key(k.into()), Seg::Index(i)]
}

fn sub(k: &str, k2: &str) -> Vec<Seg> {
    vec![Seg::Key(k.into()), Seg::Key(k2.into())]
}

fn sub_at(k: &str, k2: &str, i: usize) -> Vec<Seg> {
    vec![Seg::Key(k.into()), Seg::Key(k2.into()), Seg::Index(i)]
}

/// Name, format, options and labels.
fn check_shape(f: &TaskFile, src: &SourceText) -> Result<Format, ConfigError> {
    let format = check_name_and_format(f, src)?;
    check_options(f, format, src)?;
    if f.reference.label_column.is_some() && format != Format::TaggedReasoning {
        return Err(src.error_at(
            &sub("reference", "label_column"),
            "label_column belongs to tagged_reasoning tasks",
        ));
    }
    match (format == Format::TaggedReasoning, f.labels.len()) {
        (true, n) if n < 2 => Err(src.error_at(
            &key("labels"),
            "a tagged_reasoning task needs at least two labels for <result>",
        )),
        (false, n) if n > 0 => Err(src.error_at(
            &key("labels"),
            format!(
                "labels belong to tagged_reasoning tasks, not {}",
                format.name()
            ),
        )),
        _ => Ok(format),
    }
}

/// The name, the format, the texts every task needs and its targets.
fn check_name_and_format(f: &TaskFile, src: &SourceText) -> Result<Format, ConfigError> {
    if !plain_name(&f.name) {
        return Err(src.error_at(
            &key("name"),
            format!(
                "a task's name is its `task` column value: lower-case letters, digits and _, got {:?}",
                f.name
            ),
        ));
    }
    let format = Format::from_name(&f.format).ok_or_else(|| {
        let known: Vec<&str> = super::formats::FORMATS.iter().map(|(n, _)| *n).collect();
        src.error_at(
            &key("format"),
            format!(
                "unknown format {:?} (known: {})",
                f.format,
                known.join(", ")
            ),
        )
    })?;
    for (k, v) in [("definition", &f.definition), ("question", &f.question)] {
        if v.trim().is_empty() {
            return Err(src.error_at(&key(k), format!("the task needs a {k}")));
        }
    }
    if f.targets.is_empty() {
        return Err(src.error_at(&key("targets"), "name at least one target feature"));
    }
    Ok(format)
}

/// The options: only for formats that have them, each once, and how many an item shows.
fn check_options(f: &TaskFile, format: Format, src: &SourceText) -> Result<(), ConfigError> {
    if !format.has_options() && !f.options.is_empty() {
        return Err(src.error_at(
            &key("options"),
            format!("a {} task has no options", format.name()),
        ));
    }
    if let Some(i) = (0..f.options.len()).find(|i| f.options[..*i].contains(&f.options[*i])) {
        return Err(src.error_at(&at("options", i), "this option is listed twice"));
    }
    // Past Z single-choice options are numbered; a set of numbers would read as one number.
    if f.options.len() > super::formats::MAX_LETTERED && format == Format::MultipleChoice {
        return Err(src.error_at(
            &key("options"),
            format!(
                "a multiple_choice task has at most {} options",
                super::formats::MAX_LETTERED
            ),
        ));
    }
    if let Some(n) = f.shown
        && (n < 2 || n > f.options.len())
    {
        return Err(src.error_at(
            &key("shown"),
            format!(
                "an item shows 2 to {} of the options, not {n}",
                f.options.len()
            ),
        ));
    }
    Ok(())
}

/// The reference's list fields: required for formats scored against lists.
fn list_fields(f: &TaskFile, format: Format, src: &SourceText) -> Result<Vec<String>, ConfigError> {
    let fields = &f.reference.fields;
    let needs_lists = format == Format::ReferenceList;
    if needs_lists && fields.is_empty() {
        return Err(src.error_at(
            &sub("reference", "fields"),
            "a reference_list task names its reference lists (e.g. fields = [\"elements\"])",
        ));
    }
    for (i, name) in fields.iter().enumerate() {
        if !plain_name(name) || fields[..i].contains(name) {
            return Err(src.error_at(
                &sub_at("reference", "fields", i),
                format!("reference fields are distinct names of [a-z0-9_], got {name:?}"),
            ));
        }
    }
    Ok(fields.clone())
}

fn check_metrics(
    f: &TaskFile,
    format: Format,
    lists: &[String],
    src: &SourceText,
) -> Result<Vec<Metric>, ConfigError> {
    if f.metrics.is_empty() {
        return Err(src.error_at(&key("metrics"), "name at least one metric"));
    }
    f.metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Metric::parse(m, format, lists)
                .map_err(|e| src.error_at(&at("metrics", i), e.to_string()))
        })
        .collect()
}

/// The reference's source and, for a derived one, its rule.
fn check_reference(f: &TaskFile, format: Format, src: &SourceText) -> Result<(), ConfigError> {
    let r = &f.reference;
    let here = |k: &str| sub("reference", k);
    let derived = match r.from.as_str() {
        "drafted" | "people" => false,
        "derived" => true,
        other => {
            return Err(src.error_at(
                &here("from"),
                format!("unknown reference source {other:?} (known: drafted, derived, people)"),
            ));
        }
    };
    if !derived {
        return check_not_derived(f, src);
    }
    let name = r.rule.as_deref().unwrap_or_default();
    let Some(rule) = DERIVED_RULES.iter().find(|d| d.name == name) else {
        let known: Vec<&str> = DERIVED_RULES.iter().map(|d| d.name).collect();
        return Err(src.error_at(
            &here("rule"),
            format!(
                "a derived reference names its rule; got {name:?} (known: {})",
                known.join(", ")
            ),
        ));
    };
    if rule.format != format {
        return Err(src.error_at(
            &here("rule"),
            format!(
                "rule {name} yields {} answers, not {}",
                rule.format.name(),
                format.name()
            ),
        ));
    }
    check_derived_columns(r, rule, src)
}

/// A drafted or people's reference: no derived keys, and a drafted one has its draft prompt.
fn check_not_derived(f: &TaskFile, src: &SourceText) -> Result<(), ConfigError> {
    let r = &f.reference;
    let here = |k: &str| sub("reference", k);
    for (k, given) in [
        ("rule", r.rule.is_some()),
        ("stage", r.stage.is_some()),
        ("columns", !r.columns.is_empty()),
    ] {
        if given {
            return Err(src.error_at(&here(k), format!("`{k}` belongs to a derived reference")));
        }
    }
    if r.from == "drafted" && f.prompts.draft.is_none() {
        return Err(src.error_at(
            &key("prompts"),
            "a drafted reference needs [prompts] draft (and refine and judge for the loop)",
        ));
    }
    Ok(())
}

/// A derived reference's stage and columns: the rule's stage, columns of its table, and every
/// column the rule reads.
fn check_derived_columns(
    r: &Reference,
    rule: &DerivedRule,
    src: &SourceText,
) -> Result<(), ConfigError> {
    let here = |k: &str| sub("reference", k);
    let name = rule.name;
    let stage = r.stage.as_deref().unwrap_or_default();
    let Some(columns) = (stage == rule.stage)
        .then(|| stage_columns(stage))
        .flatten()
    else {
        return Err(src.error_at(
            &here("stage"),
            format!(
                "rule {name} reads the table of a `{}` stage, not {stage:?}",
                rule.stage
            ),
        ));
    };
    for (i, c) in r.columns.iter().enumerate() {
        if !columns.contains(c) {
            return Err(src.error_at(
                &sub_at("reference", "columns", i),
                format!(
                    "a `{stage}` table has no column {c:?} (it has: {})",
                    columns.join(", ")
                ),
            ));
        }
    }
    if let Some(missing) = rule
        .needs
        .iter()
        .find(|n| !r.columns.iter().any(|c| c == *n))
    {
        return Err(src.error_at(
            &here("columns"),
            format!("rule {name} reads the column {missing:?}: list it, so the item's provenance names every column it came from"),
        ));
    }
    Ok(())
}

fn read_prompts(
    f: &TaskFile,
    path: &Path,
    src: &SourceText,
) -> Result<Vec<(&'static str, String)>, ConfigError> {
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = vec![];
    for (role, p) in [
        ("draft", &f.prompts.draft),
        ("refine", &f.prompts.refine),
        ("judge", &f.prompts.judge),
    ] {
        let Some(p) = p else { continue };
        // An absolute path replaces `base` in the join.
        let full = base.join(p);
        let text = std::fs::read_to_string(&full)
            .map_err(|e| src.error_at(&sub("prompts", role), format!("{}: {e}", full.display())))?;
        if text.trim().is_empty() {
            return Err(src.error_at(
                &sub("prompts", role),
                format!("{} is empty", full.display()),
            ));
        }
        out.push((role, text));
    }
    Ok(out)
}

/// The taxonomy of a task drafted per level: single choice with drafted options, its file read
/// and checked (its own errors name its file, line and key).
fn read_taxonomy(
    f: &TaskFile,
    format: Format,
    path: &Path,
    src: &SourceText,
) -> Result<Option<(Taxonomy, String)>, ConfigError> {
    let Some(p) = &f.taxonomy else {
        return Ok(None);
    };
    if format != Format::SingleChoice || f.reference.from != "drafted" || !f.options.is_empty() {
        return Err(src.error_at(
            &key("taxonomy"),
            "items drafted per taxonomy level are single_choice, drafted (reference.from = \"drafted\"), with the options drafted too (no `options`)",
        ));
    }
    let full = path.parent().unwrap_or(Path::new(".")).join(p);
    let (t, text) = Taxonomy::load(&full)?;
    Ok(Some((t, text.text)))
}

/// Every task file (`*.toml`) in `dir`, in name order, loaded and checked.
pub fn load_dir(dir: &Path) -> Result<Vec<Task>, ConfigError> {
    let cannot =
        |e: std::io::Error| ConfigError::file(dir, format!("cannot list the task folder: {e}"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(cannot)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let tasks: Vec<Task> = files
        .iter()
        .map(|p| Task::load(p))
        .collect::<Result<_, _>>()?;
    for (i, t) in tasks.iter().enumerate() {
        if let Some(o) = tasks[..i].iter().find(|o| o.file.name == t.file.name) {
            return Err(ConfigError {
                file: t.path.clone(),
                line: None,
                column: None,
                key: Some("name".into()),
                message: format!("task {:?} is also {}", t.file.name, o.path.display()),
            });
        }
    }
    Ok(tasks)
}
