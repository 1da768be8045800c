//! The planner, above stages and runtime: from a pipeline file to a validated `Plan`: typed stage settings, the `requires` chain, ids,
//! and the fingerprints that decide what a rerun must redo.

use crate::config::{
    ConfigError, RawPipeline, Seg, SourceText, StageCommon, plain_name, read_file,
};
use crate::record::Slot;
pub use crate::runtime::chain::{
    Plan, PlannedStage, RESERVED_IDS, SOURCE_FINGERPRINT, SOURCE_STAGE_ID,
};
use crate::stages::{self, BuildCx};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn is_snake_case(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase()) && plain_name(s)
}

/// Chained fingerprint: a stage's settings plus everything upstream, so changing one stage
/// redoes it and what follows, never what precedes.
pub fn fingerprint(
    prev: &str,
    kind: &str,
    version: u32,
    schema: &str,
    compute: &serde_json::Value,
) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"vidcurate-fingerprint-v1\0");
    h.update(prev.as_bytes());
    h.update(b"\0");
    h.update(kind.as_bytes());
    h.update(format!("\0{version}\0{schema}\0").as_bytes());
    // serde_json's Map is sorted (no preserve_order), so this is canonical.
    h.update(compute.to_string().as_bytes());
    h.finalize().to_hex()[..16].to_string()
}

/// A run summary's own line for a source or stage: its id and what writes the line from its
/// counts (an empty line: nothing to say).
pub type SummaryLine = (String, fn(&str, &crate::runtime::StageCounts) -> String);

/// The source and stages of `plan` with a line of their own in the run summary (a dataset's
/// unlisted rows, the prescreen's saved calls, OCR reuse), in pipeline order.
pub fn summaries(plan: &Plan) -> Vec<SummaryLine> {
    let source = stages::SOURCE_KINDS
        .iter()
        .find(|k| k.name == plan.source_kind)
        .and_then(|k| k.summary)
        .map(|f| (SOURCE_STAGE_ID.to_string(), f));
    let staged = plan.stages.iter().filter_map(|s| {
        let f = stages::stage_kind(&s.kind)?.summary?;
        Some((s.id.clone(), f))
    });
    source.into_iter().chain(staged).collect()
}

/// Reads and checks a pipeline file without running anything.
pub fn load(file: &Path) -> Result<Plan, ConfigError> {
    plan_text(file, read_file(file)?)
}

pub fn plan_text(file: &Path, text: String) -> Result<Plan, ConfigError> {
    let src = SourceText::new(file, text);
    let raw: RawPipeline = src.parse()?;
    let base_dir = base_dir_of(file);
    let bcx = BuildCx {
        base_dir: &base_dir,
        src: &src,
        services: &raw.services,
        llm: Default::default(),
    };
    check_settings(&src, &raw)?;
    let source_kind = source_kind(&src, &raw.source)?;
    let source_at = [Seg::Key("source".into())];
    let (source, source_settings) =
        stages::build_source(&source_kind, &raw.source, &source_at, &bcx)
            .map_err(|e| at_naming_key(e, &raw.source, &source_at, &bcx))?;
    let stages = plan_stages(&src, &raw.stages, source.provides(), &bcx)?;
    check_one_event(&src, &stages)?;
    let batch_services = bcx
        .llm
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|s| s.batch_queue().is_some())
        .map(|s| s.clone() as std::sync::Arc<dyn crate::runtime::batch::BatchService>)
        .collect();
    Ok(Plan {
        name: raw.name,
        file: file.to_path_buf(),
        text: src.text.clone(),
        source_kind,
        source_settings,
        source,
        stages,
        output: raw.output,
        runtime: raw.runtime,
        services: raw.services,
        batch_services,
    })
}

/// The folder the file's relative paths start from: its own ("." for a bare file name).
fn base_dir_of(file: &Path) -> PathBuf {
    let base_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    if base_dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base_dir
    }
}

/// The settings outside the source and the stages: the name, the runtime and output limits and
/// the service URLs.
fn check_settings(src: &SourceText, raw: &RawPipeline) -> Result<(), ConfigError> {
    if !is_snake_case(&raw.name.replace('-', "_")) {
        return Err(src.error_at(
            &[Seg::Key("name".into())],
            "name must be lowercase letters, digits, '-' or '_'",
        ));
    }
    if raw.runtime.channel_capacity == 0 {
        return Err(src.error_at(
            &[
                Seg::Key("runtime".into()),
                Seg::Key("channel_capacity".into()),
            ],
            "must be at least 1",
        ));
    }
    if raw.output.max_rows_per_shard == 0 {
        return Err(src.error_at(
            &[
                Seg::Key("output".into()),
                Seg::Key("max_rows_per_shard".into()),
            ],
            "must be at least 1",
        ));
    }
    for (name, svc) in &raw.services {
        if !(svc.base_url.starts_with("http://") || svc.base_url.starts_with("https://")) {
            return Err(src.error_at(
                &[
                    Seg::Key("services".into()),
                    Seg::Key(name.clone()),
                    Seg::Key("base_url".into()),
                ],
                format!(
                    "base_url must start with http:// or https://, got {:?}",
                    svc.base_url
                ),
            ));
        }
    }
    Ok(())
}

/// `type` of the `[source]` table.
fn source_kind(src: &SourceText, source: &toml::Table) -> Result<String, ConfigError> {
    match source.get("type") {
        Some(toml::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(src.error_at(
            &[Seg::Key("source".into()), Seg::Key("type".into())],
            "must be a string",
        )),
        None => Err(src.error_at(
            &[Seg::Key("source".into())],
            "missing field `type` (one of: local, youtube)",
        )),
    }
}

/// The `[[stages]]` in order: each checked, built, checked against what the source and the
/// stages before it provide, and fingerprinted over everything upstream.
fn plan_stages(
    src: &SourceText,
    tables: &[toml::Table],
    from_source: &[Slot],
    bcx: &BuildCx,
) -> Result<Vec<PlannedStage>, ConfigError> {
    let mut planned = Vec::new();
    let mut seen = HashSet::new();
    let mut filled: Vec<Slot> = from_source.to_vec();
    let mut prev_fp = SOURCE_FINGERPRINT.to_string();
    for (i, table) in tables.iter().enumerate() {
        let at = vec![Seg::Key("stages".into()), Seg::Index(i)];
        let common: StageCommon = src.typed(table, &at)?;
        check_stage(src, &common, &at, &mut seen)?;
        let key = |k: &str| crate::config::key_at(&at, k);
        let built =
            stages::build_stage(&common, &key("compute"), &key("select"), bcx).map_err(|e| {
                let e = at_naming_key(e, table, &at, bcx);
                // An error without a position is about the stage as a whole: point at its type.
                if e.line.is_none() {
                    src.error_at(&key("type"), e.message)
                } else {
                    e
                }
            })?;
        check_requires(src, &common, &at, built.task.requires(), &filled)?;
        filled.push(built.task.provides());
        let fp = fingerprint(
            &prev_fp,
            &common.kind,
            built.version,
            &built.task.schema_id(),
            &built.compute,
        );
        prev_fp = fp.clone();
        let input_salt = services_named(&built.compute, bcx.services);
        planned.push(PlannedStage {
            id: common.id.clone(),
            kind: common.kind.clone(),
            fingerprint: fp,
            compute: built.compute,
            max_in_flight: common.max_in_flight.unwrap_or(built.default_in_flight),
            timeout: common.timeout_secs.map(Duration::from_secs),
            retries: common.retries,
            input_salt,
            task: built.task,
        });
    }
    Ok(planned)
}

/// An error about a whole other file (a query, task or taxonomy file that cannot be read) is
/// put at the key of `table` (at `at`) that names that file, with the path it resolved to: the
/// user edits the key, not the file it could not find.
fn at_naming_key(e: ConfigError, table: &toml::Table, at: &[Seg], bcx: &BuildCx) -> ConfigError {
    if e.line.is_some() || e.file == bcx.src.file {
        return e;
    }
    fn find(v: &toml::Value, at: Vec<Seg>, hit: &dyn Fn(&str) -> bool) -> Option<Vec<Seg>> {
        match v {
            toml::Value::String(s) if hit(s) => Some(at),
            toml::Value::Table(t) => t
                .iter()
                .find_map(|(k, v)| find(v, crate::config::key_at(&at, k), hit)),
            toml::Value::Array(a) => a.iter().enumerate().find_map(|(i, v)| {
                let mut at = at.clone();
                at.push(Seg::Index(i));
                find(v, at, hit)
            }),
            _ => None,
        }
    }
    let hit = |s: &str| bcx.resolve(std::path::Path::new(s)) == e.file;
    let whole = toml::Value::Table(table.clone());
    match find(&whole, at.to_vec(), &hit) {
        Some(key) => bcx
            .src
            .error_at(&key, format!("{}: {}", e.file.display(), e.message)),
        None => e,
    }
}

/// The `[services.*]` a stage's settings name (any string value that is a service's name),
/// with their base URLs: "name=url" lines, sorted.
fn services_named(
    compute: &serde_json::Value,
    services: &std::collections::BTreeMap<String, crate::config::ServiceConfig>,
) -> String {
    fn walk(v: &serde_json::Value, out: &mut dyn FnMut(&str)) {
        match v {
            serde_json::Value::String(s) => out(s),
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            serde_json::Value::Object(o) => o.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut named = std::collections::BTreeSet::new();
    walk(compute, &mut |s| {
        if let Some(c) = services.get(s) {
            named.insert(format!("{s}={}", c.base_url));
        }
    });
    named.into_iter().collect::<Vec<_>>().join("\n")
}

/// A stage's id (snake_case, not reserved, not used before: `seen` holds the ids so far) and
/// its `max_in_flight`.
fn check_stage(
    src: &SourceText,
    common: &StageCommon,
    at: &[Seg],
    seen: &mut HashSet<String>,
) -> Result<(), ConfigError> {
    let key = |k: &str| crate::config::key_at(at, k);
    if !is_snake_case(&common.id) {
        return Err(src.error_at(
            &key("id"),
            format!("stage id {:?} must be snake_case", common.id),
        ));
    }
    if RESERVED_IDS.contains(&common.id.as_str()) {
        return Err(src.error_at(
            &key("id"),
            format!("stage id {:?} is reserved for the run directory", common.id),
        ));
    }
    if !seen.insert(common.id.clone()) {
        return Err(src.error_at(
            &key("id"),
            format!("stage id {:?} is used twice", common.id),
        ));
    }
    if common.max_in_flight == Some(0) {
        return Err(src.error_at(&key("max_in_flight"), "must be at least 1"));
    }
    Ok(())
}

/// Every slot a stage reads is filled by the source or a stage before it.
/// Every stage that names the risk event (relevance, committee) names the same one: a
/// pipeline judges one event, and a copy made for a new domain that kept an old event in one
/// stage stops here instead of judging half its videos against the wrong event.
fn check_one_event(src: &SourceText, stages: &[PlannedStage]) -> Result<(), ConfigError> {
    let mut first: Option<(&str, String)> = None;
    for (i, st) in stages.iter().enumerate() {
        let name = match &st.compute["event"] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Object(o) => match o.get("name") {
                Some(serde_json::Value::String(s)) => s.clone(),
                _ => continue,
            },
            _ => continue,
        };
        match &first {
            None => first = Some((&st.id, name)),
            Some((id, other)) if other.trim() != name.trim() => {
                let at = vec![
                    Seg::Key("stages".into()),
                    Seg::Index(i),
                    Seg::Key("compute".into()),
                ];
                return Err(src.error_at(
                    &at,
                    format!(
                        "stage {:?} judges the event {name:?}, stage {id:?} judges {other:?}: a pipeline judges one event (point both at the same query file with `queries = ...`)",
                        st.id
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn check_requires(
    src: &SourceText,
    common: &StageCommon,
    at: &[Seg],
    requires: &[Slot],
    filled: &[Slot],
) -> Result<(), ConfigError> {
    match requires.iter().find(|need| !filled.contains(need)) {
        None => Ok(()),
        Some(need) => Err(src.error_at(
            &crate::config::key_at(at, "type"),
            format!(
                "stage {:?} ({}) needs `{}`, which no earlier stage provides; add a stage that does before it",
                common.id,
                common.kind,
                need.name()
            ),
        )),
    }
}
