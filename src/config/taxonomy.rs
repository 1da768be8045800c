//! Taxonomy files: the levels a question stage drafts items for, with their definitions and the
//! boundary tests that separate each level from the next (HarmVideoBench §2.2, B.1, Table 4 is
//! the default, `pipelines/taxonomies/harmvideobench.toml`). A new benchmark is a new taxonomy file.
//!
//! ```toml
//! name = "HarmVideoBench"
//! rule = "If the answer is directly seen or heard …"     # the one-line rule for all levels
//! options = 4                                          # options per item (2..=8)
//!
//! [[levels]]
//! name = "observable_evidence"       # [a-z0-9_]+, unique: the `level` column's value
//! title = "Observable Evidence"
//! definition = "…"                   # what an item of this level asks
//! boundary = "…"                     # the test against the next level (Table 4)
//! context_note = false               # items must say what context beyond the clip they need
//! ```
//! Reads the file; errors name file:line:key and exit 2 like every configuration error.

use super::{ConfigError, Seg, SourceText, plain_name};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Taxonomy {
    pub name: String,
    /// The rule that assigns an item to a level, in one or two sentences.
    #[serde(default)]
    pub rule: String,
    #[serde(default = "default_options")]
    pub options: usize,
    #[serde(default)]
    pub levels: Vec<Level>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Level {
    pub name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub definition: String,
    /// The operational test against the next level (empty for the last level).
    #[serde(default)]
    pub boundary: String,
    /// Items of this level must record the missing context that justifies the answer (B.1).
    #[serde(default)]
    pub context_note: bool,
}

fn default_options() -> usize {
    4
}

/// HarmVideoBench's three levels, as shipped in `pipelines/taxonomies/harmvideobench.toml`.
pub const HARMVIDEOBENCH: &str = include_str!("../../pipelines/taxonomies/harmvideobench.toml");

impl Taxonomy {
    /// Reads and checks a taxonomy file.
    pub fn load(path: &Path) -> Result<(Taxonomy, SourceText), ConfigError> {
        let text = super::read_file(path)?;
        Self::parse(path, text)
    }

    /// Checks the text of a taxonomy file; `path` names it in errors.
    pub fn parse(path: &Path, text: String) -> Result<(Taxonomy, SourceText), ConfigError> {
        let src = SourceText::new(path, text);
        let t: Taxonomy = src.parse_typed()?;
        t.check(&src)?;
        Ok((t, src))
    }

    fn check(&self, src: &SourceText) -> Result<(), ConfigError> {
        let key = |k: &str| vec![Seg::Key(k.into())];
        if self.name.trim().is_empty() {
            return Err(src.error_at(&key("name"), "the taxonomy needs a name"));
        }
        if !(2..=8).contains(&self.options) {
            return Err(src.error_at(
                &key("options"),
                format!("options must be 2..8, got {}", self.options),
            ));
        }
        if self.levels.is_empty() {
            return Err(src.error_at(&[], "a taxonomy needs at least one [[levels]] table"));
        }
        let at =
            |i: usize, k: &str| vec![Seg::Key("levels".into()), Seg::Index(i), Seg::Key(k.into())];
        for (i, l) in self.levels.iter().enumerate() {
            if !plain_name(&l.name) {
                return Err(src.error_at(
                    &at(i, "name"),
                    format!(
                        "a level's name is its `level` column value: lower-case letters, digits and _, got {:?}",
                        l.name
                    ),
                ));
            }
            if let Some(j) = self.levels[..i].iter().position(|o| o.name == l.name) {
                return Err(src.error_at(
                    &at(i, "name"),
                    format!("level {:?} is already levels[{j}]", l.name),
                ));
            }
            if l.definition.trim().is_empty() {
                return Err(src.error_at(
                    &at(i, "definition"),
                    format!(
                        "level {:?} has no definition: the model drafts its items from it",
                        l.name
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn level(&self, name: &str) -> Option<&Level> {
        self.levels.iter().find(|l| l.name == name)
    }

    /// The taxonomy as the drafting prompt states it: the rule, then each level's definition
    /// and its boundary test against the next.
    pub fn prompt_text(&self) -> String {
        let mut s = String::new();
        if !self.rule.trim().is_empty() {
            s += &format!("Rule: {}\n\n", self.rule.trim());
        }
        for (i, l) in self.levels.iter().enumerate() {
            let title = if l.title.is_empty() {
                &l.name
            } else {
                &l.title
            };
            s += &format!("Level `{}` ({title}): {}\n", l.name, l.definition.trim());
            if let Some(next) = self.levels.get(i + 1)
                && !l.boundary.trim().is_empty()
            {
                s += &format!("  Boundary with `{}`: {}\n", next.name, l.boundary.trim());
            }
            if l.context_note {
                s += "  Items of this level must state, in context_note, the missing context or reasoning step that justifies the answer.\n";
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Taxonomy, ConfigError> {
        Taxonomy::parse(Path::new("t.toml"), text.to_string()).map(|(t, _)| t)
    }

    #[test]
    fn the_shipped_taxonomy_has_the_papers_three_levels() {
        let t = parse(HARMVIDEOBENCH).unwrap();
        let names: Vec<&str> = t.levels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "observable_evidence",
                "clip_internal_meaning",
                "beyond_clip_reasoning"
            ]
        );
        assert_eq!(t.options, 4);
        assert!(t.level("beyond_clip_reasoning").unwrap().context_note);
        let p = t.prompt_text();
        assert!(p.contains("Boundary with `clip_internal_meaning`"), "{p}");
        assert!(p.contains("well-informed annotator"), "{p}");
    }

    #[test]
    fn bad_taxonomies_name_the_line_and_key() {
        let e = parse("name = \"x\"\n[[levels]]\nname = \"a\"\ndefinition = \"d\"\ncolour = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.toml:5") && e.contains("colour"), "{e}");
        let e = parse("name = \"x\"\n[[levels]]\nname = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.toml:2") && e.contains("levels[0].definition"),
            "{e}"
        );
        let e = parse(
            "name = \"x\"\n[[levels]]\nname = \"a\"\ndefinition = \"d\"\n[[levels]]\nname = \"a\"\ndefinition = \"e\"\n",
        )
        .unwrap_err().to_string();
        assert!(
            e.contains("t.toml:6") && e.contains("already levels[0]"),
            "{e}"
        );
        let e = parse("name = \"x\"\n").unwrap_err().to_string();
        assert!(e.contains("at least one [[levels]]"), "{e}");
        let e = parse("name = \"x\"\noptions = 1\n[[levels]]\nname = \"a\"\ndefinition = \"d\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.toml:2") && e.contains("options"), "{e}");
    }
}
