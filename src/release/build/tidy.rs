//! What a release writes of the run's settings, made to travel: no absolute path of the
//! builder's machine (paths relative to the pipeline file's folder), floats as the pipeline
//! file wrote them. The card and croissant.json both write settings through these.

use crate::store::manifest::Manifest;
use std::path::Path;

/// A stage's settings as the pipeline file wrote them: floats at their own (f32) precision,
/// not the f64 noise of their widening (`0.7`, not `0.699999988079071`), and absolute paths
/// relative to the pipeline file's folder, so the card names no folder of the builder's machine.
pub(super) fn tidy(v: &serde_json::Value, m: &Manifest) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or_default();
            let narrow = x as f32;
            if narrow as f64 == x {
                let short: f64 = narrow.to_string().parse().unwrap_or(x);
                serde_json::json!(short)
            } else {
                v.clone()
            }
        }
        Value::String(s) => Value::String(tidy_path(s, m)),
        Value::Array(a) => Value::Array(a.iter().map(|x| tidy(x, m)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), tidy(x, m))).collect()),
        other => other.clone(),
    }
}

/// An absolute path relative to the pipeline file's folder (`taxonomies/x.toml`,
/// `../data/clips`); one further away, or sharing only the root, keeps only its last two parts
/// (`…/bench/manifest.csv`), since a chain of `../../..` up to the root would name the
/// builder's folders all the same. Anything else as it is.
pub(super) fn tidy_path(p: &str, m: &Manifest) -> String {
    use std::path::Component;
    let path = Path::new(p);
    let Some(base) = Path::new(&m.pipeline_file).parent() else {
        return p.to_string();
    };
    if !path.is_absolute() {
        return p.to_string();
    }
    let (a, b): (Vec<Component>, Vec<Component>) =
        (path.components().collect(), base.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let up = b.len() - common;
    // Sharing only the root, or far up, or the pipeline named by a relative path (its folder
    // unknown): folders of the builder's machine that mean nothing to a reader.
    if up > 2 || common <= 1 || !base.is_absolute() {
        let tail: Vec<_> = a[a.len().saturating_sub(2).max(1)..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect();
        return format!("…/{}", tail.join("/"));
    }
    let mut rel = std::path::PathBuf::new();
    for _ in 0..up {
        rel.push("..");
    }
    for c in &a[common..] {
        rel.push(c);
    }
    let rel = rel.to_string_lossy().into_owned();
    if rel.is_empty() { ".".into() } else { rel }
}

/// The pipeline file's text with every absolute path in a string value made relative as
/// `tidy_path` does; comments, layout and numbers stay as the file wrote them.
pub(super) fn tidy_toml(text: &str, m: &Manifest) -> String {
    use toml_edit::{Item, Value};
    type Spans = Vec<(std::ops::Range<usize>, String)>;
    fn value(v: &Value, out: &mut Spans) {
        match v {
            Value::String(s) => {
                if let Some(span) = v.span() {
                    out.push((span, s.value().clone()));
                }
            }
            Value::Array(a) => a.iter().for_each(|x| value(x, out)),
            Value::InlineTable(t) => t.iter().for_each(|(_, x)| value(x, out)),
            _ => {}
        }
    }
    fn item(i: &Item, out: &mut Spans) {
        match i {
            Item::Value(v) => value(v, out),
            Item::Table(t) => t.iter().for_each(|(_, x)| item(x, out)),
            Item::ArrayOfTables(a) => a
                .iter()
                .for_each(|t| t.iter().for_each(|(_, x)| item(x, out))),
            Item::None => {}
        }
    }
    let Ok(doc) = toml_edit::Document::parse(text.to_string()) else {
        return text.to_string();
    };
    let mut spans = vec![];
    doc.as_table().iter().for_each(|(_, x)| item(x, &mut spans));
    spans.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = text.to_string();
    for (range, s) in spans {
        let t = tidy_path(&s, m);
        if t != s && out.get(range.clone()).is_some() {
            let quoted = serde_json::to_string(&t).expect("a string serialises");
            out.replace_range(range, &quoted);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(file: &str) -> Manifest {
        serde_json::from_value(serde_json::json!({
            "tool": "vidcurate", "tool_version": "0", "pipeline_name": "p",
            "pipeline_file": file, "pipeline_toml": "", "source": {}, "stages": [],
            "invocations": []
        }))
        .unwrap()
    }

    #[test]
    fn paths_and_floats_as_the_file_wrote_them() {
        let m = manifest("/home/ann/proj/pipelines/p.toml");
        let text = "# keep me\n[source]\ndir = \"/home/ann/proj/pipelines/clips\" # here\n[[stages]]\ncompute = { taxonomy = '/home/ann/proj/taxonomies/t.toml', temperature = 0.7, x = [\"/srv/a/b/c/d.csv\"] }\n";
        assert_eq!(
            tidy_toml(text, &m),
            "# keep me\n[source]\ndir = \"clips\" # here\n[[stages]]\ncompute = { taxonomy = \"../taxonomies/t.toml\", temperature = 0.7, x = [\"…/c/d.csv\"] }\n"
        );
        let v = serde_json::json!({"temperature": 0.7f32 as f64, "top_p": 0.1, "n": 3,
            "taxonomy": "/home/ann/proj/pipelines/tax/t.toml"});
        assert_eq!(
            tidy(&v, &m).to_string(),
            r#"{"n":3,"taxonomy":"tax/t.toml","temperature":0.7,"top_p":0.1}"#
        );
        let relative = manifest("pipelines/p.toml");
        assert_eq!(
            tidy_path("/home/ann/proj/tax/t.toml", &relative),
            "…/tax/t.toml"
        );
        assert_eq!(tidy_path("tax/t.toml", &relative), "tax/t.toml");
    }
}
