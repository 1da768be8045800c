//! Query files: how a domain's search queries are written down and expanded (RiskCue §3.1, A.1).
//!
//! A query file holds one or more `[[groups]]`. A group has a `template` with `{placeholders}`
//! and fills them from `rows` (explicit tuples, e.g. year × location pairs of macro events),
//! from `cross` (vocabularies crossed intersectionally, e.g. action × actor × target of micro
//! anomalies), or from both (every row with every combination). `skip` drops combinations,
//! `limit` keeps the first N; `exclude` terms are appended in YouTube's `-term` syntax. Search
//! parameters (`[params]` for the file, `[groups.params]` per group) may use the same
//! placeholders, e.g. `published_after = "{year}-01-01"`. The `[event]` table describes the
//! domain's risk event for the judging stages.

use super::{ConfigError, Seg, SourceText, key_at};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// A query file as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QueryFile {
    /// Short name of the domain (snake_case), e.g. "protest".
    pub domain: String,
    /// "macro" (events located in time and place) or "micro" (anomalies described by words).
    pub kind: String,
    /// The risk event, for people and for the judging stages.
    #[serde(default)]
    pub event: Option<EventText>,
    /// Search parameters for every group (a group's own `params` override these).
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
    /// Exclusion terms for every group.
    #[serde(default)]
    pub exclude: Vec<String>,
    pub groups: Vec<Group>,
}

/// How the domain's event is described to the judging stages.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventText {
    /// Fills `[risk event]` in the relevance prompt, e.g. "a protest turning violent".
    pub name: String,
    /// Descriptions of videos the dataset wants (the local relevance judge compares against these).
    #[serde(default)]
    pub positive: Vec<String>,
    /// Descriptions of look-alikes it does not want (lecture, news commentary, benign variant...).
    #[serde(default)]
    pub negative: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Name shown in provenance; defaults to `group-<n>`.
    #[serde(default)]
    pub name: Option<String>,
    /// Query text with `{placeholders}`.
    pub template: String,
    /// Explicit tuples of placeholder values (macro: year × location pairs).
    #[serde(default)]
    pub rows: Vec<BTreeMap<String, toml::Value>>,
    /// Vocabularies crossed with each other (and with every row).
    #[serde(default)]
    pub cross: BTreeMap<String, Vec<toml::Value>>,
    /// Combinations to leave out: each entry lists placeholder values that, all matching, drop a query.
    #[serde(default)]
    pub skip: Vec<BTreeMap<String, toml::Value>>,
    /// Keep only the first N queries of this group (in expansion order).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Terms appended as `-term` (quoted when they contain spaces).
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
}

/// One expanded query: the text sent as `q`, and its search parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Query {
    pub group: String,
    pub text: String,
    /// Parameter name → value, placeholders filled (names as in the query file).
    pub params: BTreeMap<String, String>,
    /// The placeholder values that produced it.
    pub vars: BTreeMap<String, String>,
}

/// Search parameters a query file may set, with what YouTube calls them.
pub const PARAMS: &[(&str, &str)] = &[
    (
        "published_after",
        "publishedAfter: RFC 3339 time or YYYY-MM-DD (inclusive)",
    ),
    (
        "published_before",
        "publishedBefore: RFC 3339 time or YYYY-MM-DD (exclusive), or \"now\": the start of today (UTC, or of $VIDCURATE_NOW), in windows of window_days (default 30) counted from published_after, so a collection again searches only the new ones",
    ),
    ("region_code", "regionCode: ISO 3166-1 alpha-2, e.g. US"),
    (
        "relevance_language",
        "relevanceLanguage: ISO 639-1, e.g. en",
    ),
    (
        "video_duration",
        "videoDuration: any, short (< 4 min), medium (4-20 min), long (> 20 min)",
    ),
    ("video_definition", "videoDefinition: any, high, standard"),
    ("video_caption", "videoCaption: any, closedCaption, none"),
    (
        "video_license",
        "videoLicense: any, creativeCommon, youtube",
    ),
    (
        "order",
        "order: date, rating, relevance (default), title, viewCount",
    ),
    (
        "safe_search",
        "safeSearch: moderate (default), none, strict",
    ),
    ("location", "location: \"lat,lng\" (with location_radius)"),
    ("location_radius", "locationRadius: e.g. 10km"),
    (
        "window_days",
        "cut [published_after, published_before) into windows of this many days",
    ),
    (
        "max_pages",
        "pages of 50 results per window (YouTube stops near 500 results)",
    ),
];

impl QueryFile {
    pub fn load(path: &Path) -> Result<(QueryFile, SourceText), ConfigError> {
        let text = super::read_file(path)?;
        let src = SourceText::new(path, text);
        let qf: QueryFile = src.parse_typed()?;
        qf.check(&src)?;
        Ok((qf, src))
    }

    fn check(&self, src: &SourceText) -> Result<(), ConfigError> {
        if self.kind != "macro" && self.kind != "micro" {
            return Err(src.error_at(
                &[Seg::Key("kind".into())],
                format!("kind must be \"macro\" or \"micro\", got {:?}", self.kind),
            ));
        }
        if self.groups.is_empty() {
            return Err(src.error_at(&[], "a query file needs at least one [[groups]] table"));
        }
        let check_params = |params: &BTreeMap<String, toml::Value>, at: Vec<Seg>| {
            for k in params.keys() {
                if !PARAMS.iter().any(|(n, _)| n == k) {
                    return Err(src.error_at(
                        &key_at(&at, k),
                        format!(
                            "unknown search parameter {k:?}; known: {}",
                            PARAMS
                                .iter()
                                .map(|(n, _)| *n)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
            Ok(())
        };
        check_params(&self.params, vec![Seg::Key("params".into())])?;
        for (i, g) in self.groups.iter().enumerate() {
            let at = |k: &str| vec![Seg::Key("groups".into()), Seg::Index(i), Seg::Key(k.into())];
            check_params(&g.params, at("params"))?;
            let mut known: Vec<&str> = g.cross.keys().map(String::as_str).collect();
            if let Some(first) = g.rows.first() {
                known.extend(first.keys().map(String::as_str));
            }
            for (r, row) in g.rows.iter().enumerate() {
                let mut a = at("rows");
                a.push(Seg::Index(r));
                let first: Vec<&String> = g.rows[0].keys().collect();
                if row.keys().collect::<Vec<_>>() != first {
                    return Err(src.error_at(
                        &a,
                        "every row must name the same placeholders as the first row",
                    ));
                }
            }
            let mut texts = vec![g.template.as_str()];
            texts.extend(
                self.params
                    .values()
                    .chain(g.params.values())
                    .filter_map(|v| v.as_str()),
            );
            for t in texts {
                for name in placeholders(t) {
                    if !known.contains(&name.as_str()) {
                        return Err(src.error_at(
                            &at("template"),
                            format!(
                                "placeholder {{{name}}} has no values: give it in `rows` or `cross` (known: {})",
                                known.join(", ")
                            ),
                        ));
                    }
                }
            }
            for (k, vals) in &g.cross {
                if vals.is_empty() {
                    return Err(src.error_at(
                        &key_at(&at("cross"), k),
                        "an empty vocabulary yields no query",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every query, in file order: rows (in order) × cross (last vocabulary varying fastest).
    pub fn expand(&self) -> Vec<Query> {
        let mut out = Vec::new();
        for (i, g) in self.groups.iter().enumerate() {
            let gname = g.name.clone().unwrap_or_else(|| format!("group-{}", i + 1));
            let rows: Vec<BTreeMap<String, String>> = if g.rows.is_empty() {
                vec![BTreeMap::new()]
            } else {
                g.rows
                    .iter()
                    .map(|r| r.iter().map(|(k, v)| (k.clone(), value_text(v))).collect())
                    .collect()
            };
            let mut combos = rows;
            for (name, vals) in &g.cross {
                combos = combos
                    .into_iter()
                    .flat_map(|c| {
                        vals.iter().map(move |v| {
                            let mut c = c.clone();
                            c.insert(name.clone(), value_text(v));
                            c
                        })
                    })
                    .collect();
            }
            let skipped = |c: &BTreeMap<String, String>| {
                g.skip.iter().any(|s| {
                    s.iter()
                        .all(|(k, v)| c.get(k).is_some_and(|x| *x == value_text(v)))
                })
            };
            let excludes: Vec<&String> = self.exclude.iter().chain(g.exclude.iter()).collect();
            let mut n = 0;
            for vars in combos.into_iter().filter(|c| !skipped(c)) {
                if g.limit.is_some_and(|l| n >= l) {
                    break;
                }
                let mut text = fill(&g.template, &vars);
                for term in &excludes {
                    text.push_str(&exclusion(term));
                }
                let params = self
                    .params
                    .iter()
                    .chain(g.params.iter())
                    .map(|(k, v)| (k.clone(), fill(&value_text(v), &vars)))
                    .collect();
                out.push(Query {
                    group: gname.clone(),
                    text,
                    params,
                    vars,
                });
                n += 1;
            }
        }
        out
    }
}

fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// ` -term`, or ` -"two words"` for a phrase.
fn exclusion(term: &str) -> String {
    let t = term.trim();
    if t.contains(char::is_whitespace) {
        format!(" -\"{t}\"")
    } else {
        format!(" -{t}")
    }
}

/// Names inside `{...}`.
fn placeholders(t: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = t;
    while let Some(i) = rest.find('{') {
        match rest[i + 1..].find('}') {
            Some(j) => {
                out.push(rest[i + 1..i + 1 + j].trim().to_string());
                rest = &rest[i + 2 + j..];
            }
            None => break,
        }
    }
    out
}

/// Replaces each `{name}` with its value; collapses the doubled spaces an empty value leaves.
fn fill(t: &str, vars: &BTreeMap<String, String>) -> String {
    let mut s = t.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> QueryFile {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.toml");
        std::fs::write(&p, text).unwrap();
        QueryFile::load(&p).map_err(|e| e.to_string()).unwrap().0
    }

    #[test]
    fn rows_cross_skip_limit_and_exclusions() {
        let qf = parse(
            r#"
domain = "arson"
kind = "micro"
exclude = ["documentary"]
[[groups]]
template = "{actor} {action} {target}"
rows = [{ actor = "man" }, { actor = "arsonist" }]
cross = { action = ["sets fire to", "torches"], target = ["car", "shop"] }
skip = [{ actor = "arsonist", target = "shop" }]
exclude = ["news report"]
params = { relevance_language = "en", published_after = "{actor}" }
"#,
        );
        let q = qf.expand();
        let texts: Vec<&str> = q.iter().map(|q| q.text.as_str()).collect();
        // BTreeMap order of vocabularies: action, then target (fastest).
        assert_eq!(texts.len(), 6);
        assert_eq!(
            texts[0],
            "man sets fire to car -documentary -\"news report\""
        );
        assert_eq!(
            texts[1],
            "man sets fire to shop -documentary -\"news report\""
        );
        assert_eq!(
            texts[4],
            "arsonist sets fire to car -documentary -\"news report\""
        );
        assert!(
            !texts
                .iter()
                .any(|t| t.starts_with("arsonist") && t.contains("shop"))
        );
        assert_eq!(q[5].params["published_after"], "arsonist");
        assert_eq!(q[5].params["relevance_language"], "en");
    }

    #[test]
    fn unknown_placeholder_names_the_template_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.toml");
        std::fs::write(
            &p,
            "domain = \"x\"\nkind = \"macro\"\n[[groups]]\ntemplate = \"{city} protest {year}\"\nrows = [{ year = 2020 }]\n",
        )
        .unwrap();
        let e = QueryFile::load(&p).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(":4:"), "{e}");
        assert!(e.contains("{city}"), "{e}");
    }
}
