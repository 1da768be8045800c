//! `croissant.json`: the release described in Croissant 1.1 (MLCommons), the metadata the
//! datasets tracks ask for, with its Responsible-AI fields.
//!
//! Each config is a RecordSet read from its Parquet files (a FileSet per config), its fields
//! typed from the Parquet schema; every file of the folder is a FileObject with its SHA-256
//! (`crate::release::integrity` checks and refreshes them). What the run knows fills the RAI
//! fields it can (the models and prompts per stage, the funnel's rejects, the reviews, the
//! languages); what only a person can say comes from `--card FILE`, and each field it leaves out
//! gets a placeholder that says so, and a warning. Written last: it hashes every other file.

use super::questions::QuestionsWritten;
use super::tasks::TaskWritten;
use crate::error::RunError;
use crate::release::integrity;
use crate::stages::selection::FunnelRow;
use crate::store::manifest::Manifest;
use arrow::datatypes::{DataType, Field, Fields};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

/// What the person releasing the dataset writes (`release --card FILE`, TOML). The RAI keys
/// are Croissant's `rai:*` properties.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardSettings {
    /// The dataset's name (default: the pipeline's).
    pub name: Option<String>,
    /// What the dataset is, for people.
    pub description: Option<String>,
    /// A licence URL or SPDX id for the released files (the videos keep their own).
    pub license: Option<String>,
    /// Where the dataset is published.
    pub url: Option<String>,
    pub version: Option<String>,
    /// How to cite it (BibTeX or text).
    pub citation: Option<String>,
    /// People or organisations who made it.
    #[serde(default)]
    pub creators: Vec<String>,
    pub data_limitations: Option<String>,
    pub data_biases: Option<String>,
    pub personal_sensitive_information: Option<String>,
    pub data_use_cases: Option<String>,
    pub data_social_impact: Option<String>,
    /// Whether any of the data was generated (model-drafted items count).
    pub has_synthetic_data: Option<bool>,
    /// Who reviewed, where they come from, how they were paid (`rai:annotatorDemographics`).
    pub annotator_demographics: Option<String>,
    /// Who keeps the dataset up and how removals are handled.
    pub maintenance_plan: Option<String>,
    /// Whether the dataset is collected again and released as new versions (Croissant's
    /// `isLiveDataset`).
    pub live: Option<bool>,
}

/// The keys a person must write; each one missing is a placeholder and a warning.
const REQUIRED: &[&str] = &[
    "description",
    "license",
    "data_limitations",
    "data_biases",
    "personal_sensitive_information",
    "data_use_cases",
    "data_social_impact",
    "has_synthetic_data",
];

impl CardSettings {
    /// The settings file, or none (every person-written field missing).
    pub fn read(path: Option<&Path>) -> Result<Self, RunError> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| RunError::Config(format!("--card {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| {
            RunError::Config(format!(
                "--card {}: {e}expected keys: name, description, license, url, version, citation, creators (a list), {}, annotator_demographics, maintenance_plan, live (has_synthetic_data and live are true or false)",
                path.display(),
                REQUIRED[2..].join(", ")
            ))
        })
    }

    /// The required keys this file leaves out.
    pub fn missing(&self) -> Vec<&'static str> {
        let set = |s: &Option<String>| s.as_ref().is_some_and(|s| !s.trim().is_empty());
        let have = [
            set(&self.description),
            set(&self.license),
            set(&self.data_limitations),
            set(&self.data_biases),
            set(&self.personal_sensitive_information),
            set(&self.data_use_cases),
            set(&self.data_social_impact),
            self.has_synthetic_data.is_some(),
        ];
        REQUIRED
            .iter()
            .zip(have)
            .filter(|(_, h)| !h)
            .map(|(k, _)| *k)
            .collect()
    }
}

/// What the placeholder of a missing person-written field says.
pub fn placeholder(key: &str) -> String {
    format!(
        "NOT WRITTEN: the person releasing this dataset has not stated this yet (key `{key}` of the file given to `vidcurate release --card`)."
    )
}

/// The field as written, or its placeholder when it is missing or blank.
fn written(v: &Option<String>, key: &str) -> String {
    match v {
        Some(t) if !t.trim().is_empty() => t.clone(),
        _ => placeholder(key),
    }
}

/// What the person releasing the dataset wrote (`--card FILE`), with a placeholder for each
/// field they have not: the same text as croissant.json's RAI fields.
pub(super) fn card_section(s: &CardSettings) -> String {
    let or = written;
    let mut c = format!(
        "\n## About this dataset\n\n{}\n\nLicence of the released files (the videos keep their own): {}\n\n## Responsible use\n\n",
        or(&s.description, "description"),
        or(&s.license, "license")
    );
    for (title, v, key) in [
        ("Limitations", &s.data_limitations, "data_limitations"),
        ("Biases", &s.data_biases, "data_biases"),
        (
            "Personal and sensitive information",
            &s.personal_sensitive_information,
            "personal_sensitive_information",
        ),
        ("Intended uses", &s.data_use_cases, "data_use_cases"),
        ("Social impact", &s.data_social_impact, "data_social_impact"),
    ] {
        c += &format!("- **{title}.** {}\n", or(v, key));
    }
    c += &format!(
        "- **Synthetic data.** {}\n",
        s.has_synthetic_data.map_or_else(
            || placeholder("has_synthetic_data"),
            |b| if b { "yes".into() } else { "no".into() }
        )
    );
    if let Some(cite) = &s.citation {
        c += &format!("\n## Citation\n\n```\n{}\n```\n", cite.trim_end());
    }
    c
}

/// What the run knows, for the RAI fields.
pub(super) struct Known<'a> {
    pub m: &'a Manifest,
    pub funnel: &'a [FunnelRow],
    pub langs: Option<&'a (String, HashMap<String, String>)>,
    pub questions: Option<&'a QuestionsWritten>,
    pub tasks: &'a [TaskWritten],
    pub videos: usize,
}

/// Writes `croissant.json` into the release folder (after every other file), warning about the
/// person-written fields the settings leave out.
pub(super) fn write(out: &Path, k: &Known, s: &CardSettings) -> Result<(), RunError> {
    let missing = s.missing();
    if !missing.is_empty() {
        tracing::warn!(
            "croissant.json and README.md hold placeholders for what a person must write: {}. Give them in a TOML file with `vidcurate release --card FILE`.",
            missing.join(", ")
        );
    }
    let io = |e: integrity::IntegrityError| RunError::Internal(e.to_string());
    let mut distribution = vec![];
    let mut record_sets = vec![];
    for (config, dir) in configs(out) {
        let files = parquet_files(&out.join(&dir));
        let Some(first) = files.first() else {
            continue;
        };
        let schema = read_schema(first)?;
        let fs_id = format!("{dir}-parquet");
        distribution.push(json!({
            "@type": "cr:FileSet",
            "@id": fs_id,
            "name": fs_id,
            "description": format!("The Parquet files of the `{config}` config."),
            "encodingFormat": "application/x-parquet",
            "includes": format!("{dir}/*.parquet"),
        }));
        record_sets.push(record_set(&config, &fs_id, schema.fields()));
    }
    distribution.extend(integrity::file_objects(out).map_err(io)?);
    let mut doc = dataset(k, s);
    doc["distribution"] = Value::Array(distribution);
    doc["recordSet"] = Value::Array(record_sets);
    let path = out.join(integrity::CROISSANT_FILE);
    let text = serde_json::to_string_pretty(&doc).expect("a JSON value serialises");
    crate::store::write_file(&path, text.as_bytes()).map_err(crate::error::io(&path))
}

/// (config name, folder) of every config the release wrote.
fn configs(out: &Path) -> Vec<(String, String)> {
    let mut c = vec![
        ("default".to_string(), "data".to_string()),
        ("perturbations".into(), "perturbations".into()),
        ("questions".into(), "questions".into()),
    ];
    if let Ok(rd) = std::fs::read_dir(out.join("tasks")) {
        let mut names: Vec<String> = rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        c.extend(names.into_iter().map(|n| (n.clone(), format!("tasks/{n}"))));
    }
    c
}

fn parquet_files(dir: &Path) -> Vec<std::path::PathBuf> {
    crate::store::parquet_files_in(dir).unwrap_or_default()
}

fn read_schema(path: &Path) -> Result<arrow::datatypes::SchemaRef, RunError> {
    let file = std::fs::File::open(path).map_err(crate::error::io(path))?;
    let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&file, Default::default())
        .map_err(|e| RunError::Internal(format!("{}: {e}", path.display())))?;
    Ok(meta.schema().clone())
}

/// A config as a RecordSet: one field per column, read from the config's FileSet.
fn record_set(config: &str, fs_id: &str, fields: &Fields) -> Value {
    let fields: Vec<Value> = fields.iter().map(|f| field(config, fs_id, f)).collect();
    json!({
        "@type": "cr:RecordSet",
        "@id": config,
        "name": config,
        "description": format!("The `{config}` config: one record per row of its Parquet files (`datasets.load_dataset(DIR, \"{config}\")`)."),
        "field": fields,
    })
}

/// A column's Croissant field. Lists are arrays of their item's type; structs (and lists of
/// structs) have a sub-field per scalar or list member, read with a JSONPath from the column;
/// members nested deeper are left out of the Croissant description (they stay in the files).
fn field(rs: &str, fs_id: &str, f: &Field) -> Value {
    let id = format!("{rs}/{}", f.name());
    let source = |path: Option<&str>| {
        let mut s = json!({"fileSet": {"@id": fs_id}, "extract": {"column": f.name()}});
        if let Some(p) = path {
            s["transform"] = json!({ "jsonPath": p });
        }
        s
    };
    let mut out = json!({"@type": "cr:Field", "@id": id, "name": f.name()});
    let (inner, is_array) = unlist(f.data_type());
    if is_array {
        out["isArray"] = json!(true);
    }
    match inner {
        DataType::Struct(members) => {
            let image = members.iter().any(|m| m.name() == "bytes")
                && members.iter().any(|m| m.name() == "path");
            let subs: Vec<Value> = members
                .iter()
                .filter_map(|m| {
                    let (t, arr) = unlist(m.data_type());
                    if matches!(t, DataType::Struct(_) | DataType::List(_)) {
                        return None;
                    }
                    let dt = if image && m.name() == "bytes" {
                        "sc:ImageObject"
                    } else {
                        data_type(t)
                    };
                    let mut sub = json!({
                        "@type": "cr:Field",
                        "@id": format!("{id}/{}", m.name()),
                        "name": m.name(),
                        "dataType": dt,
                        "source": source(Some(m.name())),
                    });
                    if arr {
                        sub["isArray"] = json!(true);
                    }
                    // mlcroissant 1.1.1 decodes the images of a list one by one only for a
                    // `repeated` field (its `isArray` path hands the whole list to PIL).
                    if is_array && dt == "sc:ImageObject" {
                        sub["repeated"] = json!(true);
                    }
                    Some(sub)
                })
                .collect();
            out["subField"] = Value::Array(subs);
        }
        dt => {
            out["dataType"] = json!(data_type(dt));
            out["source"] = source(None);
        }
    }
    out
}

/// A list's item type and true, or the type itself and false.
fn unlist(dt: &DataType) -> (&DataType, bool) {
    match dt {
        DataType::List(i) | DataType::LargeList(i) => (i.data_type(), true),
        dt => (dt, false),
    }
}

/// The Croissant data type of a Parquet column's Arrow type.
fn data_type(dt: &DataType) -> &'static str {
    match dt {
        DataType::Boolean => "sc:Boolean",
        DataType::Int8 => "cr:Int8",
        DataType::Int16 => "cr:Int16",
        DataType::Int32 => "cr:Int32",
        DataType::Int64 => "cr:Int64",
        DataType::UInt8 => "cr:UInt8",
        DataType::UInt16 => "cr:UInt16",
        DataType::UInt32 => "cr:UInt32",
        DataType::UInt64 => "cr:UInt64",
        DataType::Float16 => "cr:Float16",
        DataType::Float32 => "cr:Float32",
        DataType::Float64 => "cr:Float64",
        DataType::Date32 | DataType::Date64 => "sc:Date",
        DataType::Timestamp(..) => "sc:DateTime",
        _ => "sc:Text",
    }
}

/// The dataset's own properties: who, what, licence, and the RAI fields.
fn dataset(k: &Known, s: &CardSettings) -> Value {
    let or = written;
    let m = k.m;
    let mut d = json!({
        "@context": context(),
        "@type": "sc:Dataset",
        "conformsTo": "http://mlcommons.org/croissant/1.1",
        "name": s.name.clone().unwrap_or_else(|| m.pipeline_name.clone()),
        "description": or(&s.description, "description"),
        "license": or(&s.license, "license"),
        "url": s.url.clone().unwrap_or_else(|| "https://example.invalid/not-published-yet".into()),
        "version": s.version.clone().unwrap_or_else(|| "1.0.0".into()),
        "datePublished": date_built(m),
        "citeAs": or(&s.citation, "citation"),
        "creator": s.creators.iter().map(|c| json!({"@type": "sc:Person", "name": c})).collect::<Vec<_>>(),
        "keywords": ["video", "benchmark", "vidcurate"],
        "rai:dataLimitations": or(&s.data_limitations, "data_limitations"),
        "rai:dataBiases": or(&s.data_biases, "data_biases"),
        "rai:personalSensitiveInformation": or(&s.personal_sensitive_information, "personal_sensitive_information"),
        "rai:dataUseCases": or(&s.data_use_cases, "data_use_cases"),
        "rai:dataSocialImpact": or(&s.data_social_impact, "data_social_impact"),
        "rai:hasSyntheticData": s.has_synthetic_data.map_or_else(|| json!(placeholder("has_synthetic_data")), |b| json!(b)),
        "rai:dataCollection": collection(k),
        "rai:dataCollectionType": [collection_type(m)],
        "rai:dataPreprocessingProtocol": preprocessing(k),
        "rai:machineAnnotationTools": machine_tools(m),
        "rai:annotatorDemographics": or(&s.annotator_demographics, "annotator_demographics"),
        "rai:dataReleaseMaintenancePlan": or(&s.maintenance_plan, "maintenance_plan"),
    });
    if s.live == Some(true) {
        d["isLiveDataset"] = json!(true);
    }
    let (protocol, platform) = annotation(k);
    d["rai:dataAnnotationProtocol"] = json!(protocol);
    if let Some(p) = platform {
        d["rai:dataAnnotationPlatform"] = json!([p]);
        d["rai:annotationsPerItem"] = json!("2 reviewers; a senior adjudicates disagreements");
    }
    if let Some((_, map)) = k.langs {
        let mut langs: Vec<&String> = map.values().collect();
        langs.sort();
        langs.dedup();
        d["inLanguage"] = json!(langs);
    }
    d
}

/// The day the run last ran (its last invocation), so a release of one run says the same date
/// whenever it is made.
fn date_built(m: &Manifest) -> String {
    let last = m.invocations.last();
    let at = last.and_then(|i| i.finished_at.as_deref().or(Some(&i.started_at)));
    at.and_then(|t| t.get(..10)).map_or_else(
        || chrono::Utc::now().format("%Y-%m-%d").to_string(),
        str::to_string,
    )
}

/// Croissant 1.1's JSON-LD context (as mlcroissant writes it), with the RAI prefix.
fn context() -> Value {
    let cr = |k: &str| format!("cr:{k}");
    let mut c = serde_json::Map::new();
    c.insert("@language".into(), json!("en"));
    c.insert("@vocab".into(), json!("https://schema.org/"));
    for k in [
        "arrayShape",
        "citeAs",
        "column",
        "containedIn",
        "equivalentProperty",
        "extract",
        "field",
        "fileProperty",
        "fileObject",
        "fileSet",
        "format",
        "includes",
        "isArray",
        "isLiveDataset",
        "jsonPath",
        "key",
        "md5",
        "parentField",
        "path",
        "recordSet",
        "references",
        "regex",
        "repeated",
        "replace",
        "samplingRate",
        "separator",
        "source",
        "subField",
        "transform",
    ] {
        c.insert(k.into(), json!(cr(k)));
    }
    c.insert("conformsTo".into(), json!("dct:conformsTo"));
    c.insert("cr".into(), json!("http://mlcommons.org/croissant/"));
    c.insert("rai".into(), json!("http://mlcommons.org/croissant/RAI/"));
    c.insert("dct".into(), json!("http://purl.org/dc/terms/"));
    c.insert("sc".into(), json!("https://schema.org/"));
    c.insert("data".into(), json!({"@id": "cr:data", "@type": "@json"}));
    c.insert(
        "examples".into(),
        json!({"@id": "cr:examples", "@type": "@json"}),
    );
    c.insert(
        "dataType".into(),
        json!({"@id": "cr:dataType", "@type": "@vocab"}),
    );
    c.insert("name".into(), json!({"@container": "@language"}));
    c.insert("description".into(), json!({"@container": "@language"}));
    Value::Object(c)
}

fn collection_type(m: &Manifest) -> &'static str {
    if m.source["type"] == "youtube" {
        "Web Scraping"
    } else {
        "Others"
    }
}

/// Where the videos came from and how many each stage kept.
fn collection(k: &Known) -> String {
    let m = k.m;
    let kind = m.source["type"].as_str().unwrap_or("local");
    let from = if kind == "youtube" {
        "YouTube Data API searches (every row's `provenance` lists the query, parameters, page and rank that found it)".to_string()
    } else {
        format!("a `{kind}` source of video files")
    };
    format!(
        "Videos from {from}, passed through the pipeline `{}` (vidcurate {}); {} videos released.",
        m.pipeline_name, m.tool_version, k.videos
    )
}

/// The funnel: what each stage rejected.
fn preprocessing(k: &Known) -> Vec<String> {
    k.funnel
        .iter()
        .map(|r| {
            format!(
                "stage `{}` ({}): {} in, {} rejected, {} not reached, {} out",
                r.stage, r.kind, r.input, r.rejected, r.pending, r.out
            )
        })
        .collect()
}

/// The models of each stage that calls one (from the run's manifest), and the prompt, task,
/// schema and taxonomy files its table in the pipeline file names (the manifest keeps only
/// their hashes), relative to the pipeline file.
fn machine_tools(m: &Manifest) -> Vec<String> {
    fn models(v: &Value, out: &mut Vec<String>) {
        if let Value::Object(o) = v {
            if let Some(model) = o.get("model").and_then(Value::as_str) {
                let service = o.get("service").and_then(Value::as_str).unwrap_or("?");
                out.push(format!("{model} (service `{service}`)"));
            }
            o.values().for_each(|x| models(x, out));
        }
    }
    fn files(t: &toml::Table, m: &Manifest, out: &mut Vec<String>) {
        for (key, x) in t {
            let named = ["prompt", "template", "task", "schema", "taxonomy"]
                .iter()
                .any(|k| key.contains(k));
            match x {
                toml::Value::String(p) if named => {
                    out.push(format!("{key} `{}`", super::tidy::tidy_path(p, m)))
                }
                toml::Value::Table(t) => files(t, m, out),
                _ => {}
            }
        }
    }
    let pipeline: toml::Table = toml::from_str(&m.pipeline_toml).unwrap_or_default();
    let mut out = vec![];
    for st in &m.stages {
        let mut used = vec![];
        models(&st.compute, &mut used);
        if used.is_empty() {
            continue;
        }
        let mut line = format!("stage `{}` ({}): {}", st.id, st.kind, used.join(", "));
        let table = crate::store::run::stage_table(&pipeline, &st.id);
        let mut named = vec![];
        if let Some(c) = table
            .and_then(|t| t.get("compute"))
            .and_then(|c| c.as_table())
        {
            files(c, m, &mut named);
        }
        if named.is_empty() {
            line += "; its built-in prompt";
        } else {
            line += &format!("; {}", named.join(", "));
        }
        out.push(line);
    }
    out
}

/// The review protocol the run's imports recorded, and the platform, or that nobody reviewed.
fn annotation(k: &Known) -> (Vec<String>, Option<&'static str>) {
    let mut p = vec![];
    if let Some(q) = k.questions {
        if q.decided.is_empty() {
            p.push(format!(
                "questions (stage `{}`): drafted by models and checked automatically; not reviewed by people",
                q.stage
            ));
        } else {
            let rejected = q.decided.iter().filter(|r| r.decision == "reject").count();
            p.push(format!(
                "questions (stage `{}`): {} items decided by people in Label Studio (two reviewers, a senior adjudicating), {rejected} rejected; {} kept items without a decision left out",
                q.stage,
                q.decided.len(),
                q.unreviewed
            ));
        }
    }
    for t in k.tasks {
        p.push(match &t.review {
            Some(r) => format!(
                "task `{}`: {} items decided by people in Label Studio: {} accepted, {} minor edits, {} rewritten, {} rejected; {} left out undecided",
                t.info.name, r.decided, r.accepted, r.minor_edit, r.rewritten, r.rejected, t.unreviewed
            ),
            None => format!(
                "task `{}`: reference {}; not reviewed by people ({} items to confirm)",
                t.info.name, t.info.reference, t.for_review
            ),
        });
    }
    let reviewed = k.questions.is_some_and(|q| !q.decided.is_empty())
        || k.tasks.iter().any(|t| t.review.is_some());
    if p.is_empty() {
        p.push("No items; the video rows carry the pipeline's model scores and measurements, not human labels.".into());
    }
    (p, reviewed.then_some("Label Studio"))
}
