//! `language`: the language of each video, from its title, description, transcript and
//! on-screen text (HarmVideoBench §3.1 reports its videos as 55.8 % English, 28.5 % Chinese and
//! 15.7 % mixed: this stage's `language` column is that table).
//!
//! Reads: the source's title and description; the transcript when a `transcript` stage ran
//! before this one; the on-screen text when an `ocr` stage did (each distinct line once, in
//! frame order). A field a pipeline has not produced is absent, not an error. Calls: lingua
//! (its n-gram models are compiled into the binary; high-accuracy mode) on the CPU pool. Caches
//! nothing beyond its shards. Writes: one row per video: each field's language and the video's
//! `language`.
//!
//! The rule, measured in `scripts/bench/langid/RESULTS.md` (per-video table, `long`): a field
//! votes when the detector names a language for it and it has at least `min_chars` characters;
//! when no field is that long, the short ones vote. Every vote the same: that language; votes
//! that differ: `mixed`; no vote: `und`. Short fields are left out because a 12-character OCR
//! line or title is where the detector errs (93.4 % right under 20 characters against 99.7 %
//! over): counting them as votes turned 8 % of the monolingual test videos `mixed`.

use crate::config::{ConfigError, Seg};
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::StageTask;
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use lingua::{Language, LanguageDetector, LanguageDetectorBuilder};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// The fields a video's language is read from, in the order of the row's columns.
pub const FIELDS: [&str; 4] = ["title", "description", "transcript", "ocr"];

/// `compute` settings of a `language` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LanguageConfig {
    /// The fields that vote (any of title, description, transcript, ocr).
    pub fields: Vec<String>,
    /// ISO 639-1 codes the detector chooses among (default: all it is built with: en zh es pt
    /// fr de ru ja ko hi ar id). Fewer languages, fewer confusions, when a corpus is known to
    /// hold only some.
    pub languages: Vec<String>,
    /// A field shorter than this (in characters, after trimming) votes only when no field is
    /// this long.
    pub min_chars: usize,
    /// Characters of each field read (the start of a long transcript decides as well as all of
    /// it, and the detector's time grows with the text).
    pub max_chars: usize,
}

impl Default for LanguageConfig {
    fn default() -> Self {
        Self {
            fields: FIELDS.iter().map(|s| s.to_string()).collect(),
            languages: vec![],
            min_chars: 20,
            max_chars: 2000,
        }
    }
}

/// One video's languages: ISO 639-1 codes, "" for a field that is absent or that the detector
/// could not place (no letters).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VideoLanguage {
    /// The video's: a code, `mixed` when the voting fields disagree, `und` when none voted.
    pub language: String,
    pub title_language: String,
    pub description_language: String,
    pub transcript_language: String,
    pub ocr_language: String,
    /// The fields that voted, comma-separated, in `FIELDS` order.
    pub voters: String,
}

/// The languages this binary's detector knows (Cargo.toml's lingua features).
pub fn known_languages() -> Vec<Language> {
    let mut all: Vec<Language> = Language::all().into_iter().collect();
    all.sort_by_key(|l| code(*l));
    all
}

fn code(l: Language) -> String {
    l.iso_code_639_1().to_string()
}

/// The stage; its detector is shared with the CPU-pool jobs that use it.
pub struct LanguageStage(Arc<Detecting>);

struct Detecting {
    cfg: LanguageConfig,
    languages: Vec<Language>,
    /// Built on first use (a few milliseconds: the models are read in place).
    detector: OnceLock<LanguageDetector>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "language",
    about: "language per video from title, description, transcript and on-screen text (lingua), or `mixed` when they disagree (split --stratify language)",
    build: super::build_plain::<LanguageConfig>,
    reselect: None,
    summary: None,
    release: crate::stages::Release::PerVideo,
    keys: &[("compute", crate::config::keys_of::<LanguageConfig>)],
};

impl super::PlainStage for LanguageConfig {
    const IN_FLIGHT: usize = 4;
    fn task(self, at: &[Seg], bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError> {
        let key = |k: &str| crate::config::key_at(at, k);
        for f in &self.fields {
            if !FIELDS.contains(&f.as_str()) {
                return Err(bcx.src.error_at(
                    &key("fields"),
                    format!("unknown field `{f}` (fields: {})", FIELDS.join(", ")),
                ));
            }
        }
        if self.fields.is_empty() {
            return Err(bcx.src.error_at(&key("fields"), "name at least one field"));
        }
        let known = known_languages();
        let mut languages = vec![];
        for c in &self.languages {
            match known.iter().find(|l| code(**l) == c.to_lowercase()) {
                Some(l) => languages.push(*l),
                None => {
                    let codes: Vec<String> = known.iter().map(|l| code(*l)).collect();
                    return Err(bcx.src.error_at(
                        &key("languages"),
                        format!(
                            "language `{c}` is not built in (ISO 639-1 codes: {})",
                            codes.join(" ")
                        ),
                    ));
                }
            }
        }
        if languages.len() == 1 {
            return Err(bcx.src.error_at(
                &key("languages"),
                "name at least two languages (or none: all of them)",
            ));
        }
        if languages.is_empty() {
            languages = known;
        }
        if self.max_chars < self.min_chars.max(1) {
            return Err(bcx.src.error_at(
                &key("max_chars"),
                format!("must be at least min_chars ({})", self.min_chars.max(1)),
            ));
        }
        Ok(super::processor_task(LanguageStage(Arc::new(Detecting {
            cfg: self,
            languages,
            detector: OnceLock::new(),
        }))))
    }
}

/// A video's fields as the stage reads them, `None` where the pipeline has not produced one.
pub fn video_fields(rec: &VideoRecord) -> [Option<String>; 4] {
    let ocr = rec.ocr.as_ref().map(|regions| {
        let mut seen = std::collections::HashSet::new();
        regions
            .iter()
            .map(|r| r.text.trim())
            .filter(|t| !t.is_empty() && seen.insert(*t))
            .collect::<Vec<_>>()
            .join(". ")
    });
    [
        rec.source.title.clone(),
        rec.source.description.clone(),
        rec.transcript.clone(),
        ocr,
    ]
}

/// The video's label from each field's language and length (see the module's rule).
pub fn vote(fields: &[(Option<String>, usize)], min_chars: usize) -> (String, Vec<usize>) {
    let answered: Vec<usize> = (0..fields.len())
        .filter(|&i| fields[i].0.is_some())
        .collect();
    let long: Vec<usize> = answered
        .iter()
        .copied()
        .filter(|&i| fields[i].1 >= min_chars)
        .collect();
    let voters = if long.is_empty() { answered } else { long };
    let mut codes = voters.iter().filter_map(|&i| fields[i].0.as_deref());
    let label = match codes.next() {
        None => "und".to_string(),
        Some(first) if codes.all(|c| c == first) => first.to_string(),
        Some(_) => "mixed".to_string(),
    };
    (label, voters)
}

impl Detecting {
    fn detector(&self) -> &LanguageDetector {
        self.detector.get_or_init(|| {
            LanguageDetectorBuilder::from_languages(&self.languages)
                .with_preloaded_language_models()
                .build()
        })
    }

    fn detect(&self, fields: [Option<String>; 4]) -> VideoLanguage {
        let det = self.detector();
        let read: Vec<(Option<String>, usize)> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| match f {
                Some(t) if self.cfg.fields.iter().any(|n| n == FIELDS[i]) => {
                    let t: String = t.trim().chars().take(self.cfg.max_chars).collect();
                    let n = t.chars().count();
                    (det.detect_language_of(t).map(code), n)
                }
                _ => (None, 0),
            })
            .collect();
        let (language, voters) = vote(&read, self.cfg.min_chars);
        let of = |i: usize| read[i].0.clone().unwrap_or_default();
        VideoLanguage {
            language,
            title_language: of(0),
            description_language: of(1),
            transcript_language: of(2),
            ocr_language: of(3),
            voters: voters
                .iter()
                .map(|&i| FIELDS[i])
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

#[async_trait]
impl Processor for LanguageStage {
    type Row = VideoLanguage;

    fn requires(&self) -> &'static [Slot] {
        &[]
    }
    fn provides(&self) -> Slot {
        Slot::Language
    }
    fn reads(&self) -> Vec<Slot> {
        vec![Slot::Source, Slot::Ocr, Slot::Transcript]
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<VideoLanguage>, StageError> {
        let fields = video_fields(rec);
        let d = self.0.clone();
        cx.cpu.run(move || Ok(vec![d.detect(fields)])).await
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<VideoLanguage>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(cfg: LanguageConfig) -> Detecting {
        Detecting {
            cfg,
            languages: known_languages(),
            detector: OnceLock::new(),
        }
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn twelve_languages_are_built_in() {
        let codes: Vec<String> = known_languages().into_iter().map(code).collect();
        assert_eq!(
            codes,
            [
                "ar", "de", "en", "es", "fr", "hi", "id", "ja", "ko", "pt", "ru", "zh"
            ]
        );
    }

    #[test]
    fn fields_that_agree_give_their_language() {
        let s = stage(LanguageConfig::default());
        let v = s.detect([
            some("How to make fresh pasta at home with only three ingredients"),
            some("In this video I show you the easiest way to make pasta dough by hand."),
            None,
            some("STEP 1"),
        ]);
        assert_eq!(v.language, "en");
        assert_eq!(v.title_language, "en");
        assert_eq!(v.transcript_language, "");
        // "STEP 1" is short: it does not vote, whatever the detector made of it.
        assert_eq!(v.voters, "title,description");
    }

    #[test]
    fn chinese_speech_under_an_english_title_is_mixed() {
        let s = stage(LanguageConfig::default());
        let v = s.detect([
            some("Street food tour in Chengdu: the best hot pot we found"),
            None,
            some("大家好，今天我们来到成都，带大家去吃最地道的火锅，这家店已经开了二十多年了"),
            some("成都美食之旅"),
        ]);
        assert_eq!(v.transcript_language, "zh");
        assert_eq!(v.title_language, "en");
        assert_eq!(v.language, "mixed");
        assert_eq!(v.voters, "title,transcript");
    }

    #[test]
    fn short_fields_vote_when_nothing_is_long() {
        let s = stage(LanguageConfig::default());
        let v = s.detect([some("今日のニュース"), None, None, some("12:30")]);
        assert_eq!(v.language, "ja");
        // Digits alone have no language: the OCR field does not vote.
        assert_eq!(v.ocr_language, "");
        assert_eq!(v.voters, "title");
        let none = s.detect([None, Some(String::new()), None, None]);
        assert_eq!(none.language, "und");
        assert_eq!(none.voters, "");
    }

    #[test]
    fn only_the_configured_fields_vote() {
        let s = stage(LanguageConfig {
            fields: vec!["transcript".into()],
            ..Default::default()
        });
        let v = s.detect([
            some("Street food tour in Chengdu: the best hot pot we found"),
            None,
            some("大家好，今天我们来到成都，带大家去吃最地道的火锅"),
            None,
        ]);
        assert_eq!(v.language, "zh");
        assert_eq!(v.title_language, "");
    }

    #[test]
    fn the_vote_rule() {
        let f = |c: Option<&str>, n| (c.map(str::to_string), n);
        assert_eq!(vote(&[f(Some("en"), 30), f(Some("zh"), 5)], 20).0, "en");
        assert_eq!(vote(&[f(Some("en"), 30), f(Some("zh"), 25)], 20).0, "mixed");
        assert_eq!(vote(&[f(Some("en"), 3), f(Some("zh"), 5)], 20).0, "mixed");
        assert_eq!(vote(&[f(None, 30), f(Some("zh"), 5)], 20).0, "zh");
        assert_eq!(vote(&[f(None, 30), f(None, 5)], 20).0, "und");
    }
}
