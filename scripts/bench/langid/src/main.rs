//! # langid-bench
//!
//! Measures language-identification crates for vidcurate's per-video `language` field
//! (`language`, or `mixed` when title, description, transcript and OCR text disagree),
//! before one is chosen. Nothing here is used by the main crate.
//!
//! What it measures, on the hand-written, labelled set in `samples.tsv` (columns `kind`,
//! `lang`, `text`; kinds `title`, `description`, `transcript`, `ocr`; 240 English,
//! 240 Chinese (simplified, traditional and code-mixed) and 80 for each of es, pt, fr, de,
//! ru, ja, ko, hi, ar, id):
//!
//! * accuracy per kind (macro over languages), per language, macro over languages, and on
//!   texts under 20 characters (titles and OCR are short), and on the Chinese subsets
//!   (traditional script, English words inside Chinese);
//! * the same for a "script rule" in front of each crate: Han characters > 0.3 of the
//!   letters (and no kana / hangul, which would make it Japanese / Korean) → `zh`,
//!   otherwise the crate decides;
//! * the per-video aggregation the issue asks for, on synthetic videos built from the
//!   samples: monolingual videos (the n-th title, description, transcript and OCR text of
//!   one language) must come out as that language, EN/ZH videos as `mixed`;
//! * time per 1,000 detections (release build, one thread, models preloaded; the
//!   detector's construction time is reported apart);
//! * with `--rss`, the peak resident memory of the process (use it with `--only`).
//!
//! Build size, cold build time and dependency counts are measured by `measure_build.sh`,
//! which builds this harness once per crate (`--no-default-features --features X`).
//!
//! Run (see RESULTS.md for the measured numbers):
//!
//! ```text
//! cd scripts/bench/langid
//! CARGO_TARGET_DIR=/work/target-langid cargo run --release            # all tables
//! CARGO_TARGET_DIR=/work/target-langid cargo run --release -- --errors "lingua (high, 12)"
//! ```
//!
//! Options: `--samples PATH` (default: samples.tsv beside Cargo.toml), `--only SUBSTR`
//! (run only detectors whose name contains SUBSTR), `--errors NAME` (print every wrong
//! answer of the detector NAME), `--rss` (print peak RSS), `--no-timing`.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

/// The labels of the evaluation set, ISO 639-1.
const LANGS: [&str; 12] = ["en", "zh", "es", "pt", "fr", "de", "ru", "ja", "ko", "hi", "ar", "id"];
const KINDS: [&str; 4] = ["title", "description", "transcript", "ocr"];
/// "Short" texts: fewer characters than this.
const SHORT: usize = 20;

struct Sample {
    kind: String,
    lang: String,
    text: String,
    chars: usize,
    trad: bool,
    code_mixed: bool,
}

/// A detector returns the ISO 639-1 code for the twelve languages above, the crate's own
/// code for any other language it names, or "und" when it gives no answer.
type DetectFn = Rc<dyn Fn(&str) -> &'static str>;

struct Detector {
    name: String,
    detect: DetectFn,
    init_ms: f64,
}

// ---------------------------------------------------------------------------------------
// Script rule

fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2EBEF
        | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F | 0x3007)
}

fn is_kana(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x309F | 0x30A0..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9D)
}

fn is_hangul(c: char) -> bool {
    matches!(c as u32, 0xAC00..=0xD7AF | 0x1100..=0x11FF | 0x3130..=0x318F | 0xA960..=0xA97F)
}

/// `Some("zh")` when Han characters are more than 0.3 of the letters and there is no kana
/// or hangul; `None` means "let the crate decide".
fn script_rule(text: &str) -> Option<&'static str> {
    let (mut letters, mut han, mut kana_or_hangul) = (0usize, 0usize, 0usize);
    for c in text.chars() {
        if is_han(c) {
            han += 1;
            letters += 1;
        } else if is_kana(c) || is_hangul(c) {
            kana_or_hangul += 1;
            letters += 1;
        } else if c.is_alphabetic() {
            letters += 1;
        }
    }
    (letters > 0 && kana_or_hangul == 0 && han as f64 > 0.3 * letters as f64).then_some("zh")
}

// ---------------------------------------------------------------------------------------
// Crates

#[allow(dead_code)]
fn iso3_to_1(code: &'static str) -> &'static str {
    match code {
        "eng" => "en",
        "cmn" | "zho" => "zh",
        "spa" => "es",
        "por" => "pt",
        "fra" => "fr",
        "deu" => "de",
        "rus" => "ru",
        "jpn" => "ja",
        "kor" => "ko",
        "hin" => "hi",
        "ara" | "arb" => "ar",
        "ind" => "id",
        other => other,
    }
}

#[cfg(feature = "whatlang")]
fn whatlang_detectors(out: &mut Vec<Detector>, want: &dyn Fn(&str) -> bool) {
    use whatlang::{Detector as W, Lang};
    if want("whatlang (all 70)") {
        let t = Instant::now();
        let all = W::new();
        out.push(Detector {
            name: "whatlang (all 70)".into(),
            init_ms: ms(t),
            detect: Rc::new(move |s| all.detect_lang(s).map_or("und", |l| iso3_to_1(l.code()))),
        });
    }
    if want("whatlang (12 allowed)") {
        let t = Instant::now();
        let allow = W::with_allowlist(vec![
            Lang::Eng, Lang::Cmn, Lang::Spa, Lang::Por, Lang::Fra, Lang::Deu,
            Lang::Rus, Lang::Jpn, Lang::Kor, Lang::Hin, Lang::Ara, Lang::Ind,
        ]);
        out.push(Detector {
            name: "whatlang (12 allowed)".into(),
            init_ms: ms(t),
            detect: Rc::new(move |s| allow.detect_lang(s).map_or("und", |l| iso3_to_1(l.code()))),
        });
    }
}

#[cfg(feature = "whichlang")]
fn whichlang_detectors(out: &mut Vec<Detector>, want: &dyn Fn(&str) -> bool) {
    if want("whichlang (16 fixed)") {
        out.push(Detector {
            name: "whichlang (16 fixed)".into(),
            init_ms: 0.0,
            detect: Rc::new(|s| iso3_to_1(whichlang::detect_language(s).three_letter_code())),
        });
    }
}

#[cfg(feature = "lingua")]
fn lingua_detectors(out: &mut Vec<Detector>, want: &dyn Fn(&str) -> bool) {
    use lingua::{Language, LanguageDetectorBuilder};
    #[allow(unreachable_patterns)]
    fn code(l: Language) -> &'static str {
        match l {
            Language::English => "en",
            Language::Chinese => "zh",
            Language::Spanish => "es",
            Language::Portuguese => "pt",
            Language::French => "fr",
            Language::German => "de",
            Language::Russian => "ru",
            Language::Japanese => "ja",
            Language::Korean => "ko",
            Language::Hindi => "hi",
            Language::Arabic => "ar",
            Language::Indonesian => "id",
            _ => "other",
        }
    }
    let langs = [
        Language::English, Language::Chinese, Language::Spanish, Language::Portuguese,
        Language::French, Language::German, Language::Russian, Language::Japanese,
        Language::Korean, Language::Hindi, Language::Arabic, Language::Indonesian,
    ];
    type Configure = fn(&mut LanguageDetectorBuilder) -> &mut LanguageDetectorBuilder;
    let variants: [(&str, Configure); 3] = [
        ("lingua (high, 12)", |b| b),
        ("lingua (high, 12, min-distance 0.1)", |b| b.with_minimum_relative_distance(0.1)),
        ("lingua (low, 12)", |b| b.with_low_accuracy_mode()),
    ];
    for (name, configure) in variants {
        if !want(name) {
            continue;
        }
        let t = Instant::now();
        let mut builder = LanguageDetectorBuilder::from_languages(&langs);
        let det = configure(&mut builder).with_preloaded_language_models().build();
        out.push(Detector {
            name: name.into(),
            init_ms: ms(t),
            detect: Rc::new(move |s| det.detect_language_of(s).map_or("und", code)),
        });
    }
}

#[allow(dead_code)]
fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Builds the detectors whose name (or "rule + " name) passes `only`.
fn detectors(only: Option<&str>) -> Vec<Detector> {
    #[allow(unused_variables)]
    let want = |name: &str| only.is_none_or(|o| name.contains(o) || format!("rule + {name}").contains(o));
    #[allow(unused_mut)]
    let mut base: Vec<Detector> = Vec::new();
    #[cfg(feature = "whatlang")]
    whatlang_detectors(&mut base, &want);
    #[cfg(feature = "whichlang")]
    whichlang_detectors(&mut base, &want);
    #[cfg(feature = "lingua")]
    lingua_detectors(&mut base, &want);
    // "rule + X": the script rule first, X for everything it leaves.
    let mut out = Vec::new();
    for d in base {
        let inner = d.detect.clone();
        let rule = Detector {
            name: format!("rule + {}", d.name),
            init_ms: d.init_ms,
            detect: Rc::new(move |s| script_rule(s).unwrap_or_else(|| inner(s))),
        };
        out.push(d);
        out.push(rule);
    }
    // The zero-dependency baseline: the script rule alone, English for everything else
    // (HarmVideoBench is 56 % English, 28 % Chinese).
    out.push(Detector {
        name: "script rule only (else en)".into(),
        init_ms: 0.0,
        detect: Rc::new(|s| script_rule(s).unwrap_or("en")),
    });
    out.retain(|d| only.is_none_or(|o| d.name.contains(o)));
    out
}

// ---------------------------------------------------------------------------------------
// Data

/// Characters that exist only in traditional script (their simplified forms differ);
/// used to report the traditional-script subset of the Chinese samples.
const TRAD_ONLY: &str = "帶銅飽開遊戲機買嗎間東裡貓這樣頭戰灣環蓮們學會鐘麼時頻週攤紹薦評測記訂閱啟鈴鐺務請聯繫謝結讓驚訝點準鬧還實來藍終練兩個說經畫質優過續內裝緻麵湯濃後臉煩邊隻給塊餅禮強連現錄沒歡課觀見門問題國電話視訊語長書車對發為與體動種氣錢飯麗愛聽讀寫應該從進選區處總雙萬雞魚鳥龍風業廣幾顏單變專條親難覺歲號張爾當隊決斷層歷壓韓鐵關廳醫藥樂園員興歸舊閃燈線";

fn strip_links(text: &str) -> String {
    text.split_whitespace()
        .filter(|w| !(w.contains("://") || w.contains('@') || w.starts_with("www.")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_code_mixed(lang: &str, text: &str) -> bool {
    if lang != "zh" {
        return false;
    }
    let t = strip_links(text);
    let mut run = 0;
    for c in t.chars() {
        if c.is_ascii_alphabetic() {
            run += 1;
            if run >= 2 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

fn load(path: &str) -> Vec<Sample> {
    let raw = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let mut out = Vec::new();
    for (i, line) in raw.lines().enumerate() {
        if i == 0 || line.trim().is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, '\t');
        let (Some(kind), Some(lang), Some(text)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("{path}:{}: want kind<TAB>lang<TAB>text", i + 1)
        };
        assert!(KINDS.contains(&kind), "{path}:{}: unknown kind {kind}", i + 1);
        assert!(LANGS.contains(&lang), "{path}:{}: unknown lang {lang}", i + 1);
        out.push(Sample {
            kind: kind.into(),
            lang: lang.into(),
            chars: text.chars().count(),
            trad: lang == "zh" && text.chars().any(|c| TRAD_ONLY.contains(c)),
            code_mixed: is_code_mixed(lang, text),
            text: text.into(),
        });
    }
    out
}

// ---------------------------------------------------------------------------------------
// Metrics

#[derive(Default, Clone, Copy)]
struct Acc {
    ok: usize,
    n: usize,
}

impl Acc {
    fn add(&mut self, ok: bool) {
        self.n += 1;
        self.ok += ok as usize;
    }
    fn pct(self) -> f64 {
        if self.n == 0 { f64::NAN } else { 100.0 * self.ok as f64 / self.n as f64 }
    }
}

fn mean(xs: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.into_iter().filter(|x| !x.is_nan()).collect();
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn f1(x: f64) -> String {
    if x.is_nan() { "–".into() } else { format!("{x:.1}") }
}

struct Report {
    name: String,
    cell: BTreeMap<(String, String), Acc>, // (kind, lang)
    lang: BTreeMap<String, Acc>,
    short_lang: BTreeMap<String, Acc>,
    short: Acc,
    und: Acc,
    trad: Acc,
    simp: Acc,
    code_mixed: Acc,
    ms_per_1k: f64,
    ms_per_1k_short: f64,
    init_ms: f64,
    video: VideoScores,
    errors: Vec<(usize, &'static str)>,
}

#[derive(Default)]
struct VideoScores {
    mono_strict: Acc,
    mixed_strict: Acc,
    mono_long: Acc,
    mixed_long: Acc,
    enzh_strict: Acc,
    enzh_long: Acc,
}

/// Synthetic videos: for each language the i-th title, description, transcript and OCR
/// text form one monolingual video; an EN and a ZH video of the same index give two mixed
/// ones (EN title+description with ZH transcript+OCR, and the reverse).
fn videos(samples: &[Sample]) -> (Vec<(String, [usize; 4])>, Vec<[usize; 4]>) {
    let mut by: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, s) in samples.iter().enumerate() {
        by.entry((s.lang.as_str(), s.kind.as_str())).or_default().push(i);
    }
    let mut mono = Vec::new();
    for lang in LANGS {
        let n = KINDS.iter().map(|k| by.get(&(lang, *k)).map_or(0, |v| v.len())).min().unwrap_or(0);
        for i in 0..n {
            mono.push((lang.to_string(), KINDS.map(|k| by[&(lang, k)][i])));
        }
    }
    let mut mixed = Vec::new();
    let by_ref = &by;
    let n = ["en", "zh"]
        .iter()
        .flat_map(|l| KINDS.iter().map(move |k| by_ref.get(&(*l, *k)).map_or(0, |v| v.len())))
        .min()
        .unwrap_or(0);
    for i in 0..n {
        let g = |l: &str, k: &str| by[&(l, k)][i];
        mixed.push([g("en", "title"), g("en", "description"), g("zh", "transcript"), g("zh", "ocr")]);
        mixed.push([g("zh", "title"), g("zh", "description"), g("en", "transcript"), g("en", "ocr")]);
    }
    (mono, mixed)
}

/// The issue's rule: all fields that have an answer agree → that language, otherwise `mixed`. With
/// `skip_short`, fields under SHORT characters do not vote unless every field is short.
fn aggregate(fields: &[usize; 4], pred: &[&'static str], samples: &[Sample], skip_short: bool) -> &'static str {
    // A field without an answer ("und") does not vote.
    let mut voters: Vec<usize> = fields.iter().copied().filter(|&i| pred[i] != "und").collect();
    if voters.is_empty() {
        return "und";
    }
    if skip_short {
        let long: Vec<usize> = voters.iter().copied().filter(|&i| samples[i].chars >= SHORT).collect();
        if !long.is_empty() {
            voters = long;
        }
    }
    let first = pred[voters[0]];
    if voters.iter().all(|&i| pred[i] == first) { first } else { "mixed" }
}

fn time_it(d: &Detector, texts: &[&str]) -> f64 {
    if texts.is_empty() {
        return f64::NAN;
    }
    for t in texts {
        std::hint::black_box((d.detect)(t));
    }
    // The fastest of five rounds of >= 0.3 s each: the machine may be busy with other work,
    // and the minimum is the least disturbed estimate.
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        let mut n = 0usize;
        while start.elapsed().as_secs_f64() < 0.3 || n == 0 {
            for t in texts {
                std::hint::black_box((d.detect)(std::hint::black_box(t)));
            }
            n += texts.len();
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e3 / n as f64 * 1000.0);
    }
    best
}

fn evaluate(d: &Detector, samples: &[Sample], timing: bool) -> Report {
    let pred: Vec<&'static str> = samples.iter().map(|s| (d.detect)(&s.text)).collect();
    let mut r = Report {
        name: d.name.clone(),
        cell: BTreeMap::new(),
        lang: BTreeMap::new(),
        short_lang: BTreeMap::new(),
        short: Acc::default(),
        und: Acc::default(),
        trad: Acc::default(),
        simp: Acc::default(),
        code_mixed: Acc::default(),
        ms_per_1k: f64::NAN,
        ms_per_1k_short: f64::NAN,
        init_ms: d.init_ms,
        video: VideoScores::default(),
        errors: Vec::new(),
    };
    for (i, s) in samples.iter().enumerate() {
        let ok = pred[i] == s.lang;
        r.und.add(pred[i] == "und");
        r.cell.entry((s.kind.clone(), s.lang.clone())).or_default().add(ok);
        r.lang.entry(s.lang.clone()).or_default().add(ok);
        if s.chars < SHORT {
            r.short.add(ok);
            r.short_lang.entry(s.lang.clone()).or_default().add(ok);
        }
        if s.lang == "zh" {
            if s.trad { r.trad.add(ok) } else { r.simp.add(ok) }
            if s.code_mixed {
                r.code_mixed.add(ok);
            }
        }
        if !ok {
            r.errors.push((i, pred[i]));
        }
    }
    let (mono, mixed) = videos(samples);
    for (lang, f) in &mono {
        r.video.mono_strict.add(aggregate(f, &pred, samples, false) == lang);
        r.video.mono_long.add(aggregate(f, &pred, samples, true) == lang);
        if lang == "en" || lang == "zh" {
            r.video.enzh_strict.add(aggregate(f, &pred, samples, false) == lang);
            r.video.enzh_long.add(aggregate(f, &pred, samples, true) == lang);
        }
    }
    for f in &mixed {
        r.video.mixed_strict.add(aggregate(f, &pred, samples, false) == "mixed");
        r.video.mixed_long.add(aggregate(f, &pred, samples, true) == "mixed");
    }
    if timing {
        let all: Vec<&str> = samples.iter().map(|s| s.text.as_str()).collect();
        let short: Vec<&str> = samples.iter().filter(|s| s.chars < SHORT).map(|s| s.text.as_str()).collect();
        r.ms_per_1k = time_it(d, &all);
        r.ms_per_1k_short = time_it(d, &short);
    }
    r
}

impl Report {
    fn kind_macro(&self, kind: &str) -> f64 {
        mean(LANGS.iter().map(|l| self.cell.get(&(kind.to_string(), l.to_string())).map_or(f64::NAN, |a| a.pct())))
    }
    fn lang_pct(&self, lang: &str) -> f64 {
        self.lang.get(lang).map_or(f64::NAN, |a| a.pct())
    }
    fn short_pct(&self, lang: &str) -> f64 {
        self.short_lang.get(lang).map_or(f64::NAN, |a| a.pct())
    }
    fn macro_all(&self) -> f64 {
        mean(LANGS.iter().map(|l| self.lang_pct(l)))
    }
    fn macro_short(&self) -> f64 {
        mean(LANGS.iter().map(|l| self.short_pct(l)))
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let path = opt("--samples").unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/samples.tsv").into());
    let only = opt("--only");
    let errors_of = opt("--errors");
    let timing = !flag("--no-timing");

    let samples = load(&path);
    let dets: Vec<Detector> = detectors(only.as_deref());
    if dets.is_empty() {
        eprintln!("no detector selected (features: whatlang, whichlang, lingua)");
    }
    let reports: Vec<Report> = dets.iter().map(|d| evaluate(d, &samples, timing)).collect();

    let n_short = samples.iter().filter(|s| s.chars < SHORT).count();
    let zh = samples.iter().filter(|s| s.lang == "zh");
    let (n_trad, n_cm) = zh.fold((0, 0), |(t, c), s| (t + s.trad as usize, c + s.code_mixed as usize));
    println!(
        "samples: {} ({} under {SHORT} chars; zh: {} traditional, {} code-mixed) from {path}\n",
        samples.len(), n_short, n_trad, n_cm
    );

    println!("## Accuracy (%) and speed\n");
    println!("Kind columns and `macro` are macro-averaged over the 12 languages; `<20 ch` is macro over languages of texts under 20 characters; EN/ZH columns are plain accuracy on that language's samples; a text without an answer counts as wrong (`no answer`: % of all texts). Speed: the fastest of five rounds, one thread.\n");
    println!("| detector | title | description | transcript | ocr | macro | <20 ch | EN | EN <20 | ZH | ZH <20 | ZH trad | ZH code-mixed | no answer | ms / 1k det | ms / 1k short | init ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &reports {
        println!(
            "| {} | {} | {} | {} | {} | **{}** | **{}** | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            f1(r.kind_macro("title")),
            f1(r.kind_macro("description")),
            f1(r.kind_macro("transcript")),
            f1(r.kind_macro("ocr")),
            f1(r.macro_all()),
            f1(r.macro_short()),
            f1(r.lang_pct("en")),
            f1(r.short_pct("en")),
            f1(r.lang_pct("zh")),
            f1(r.short_pct("zh")),
            f1(r.trad.pct()),
            f1(r.code_mixed.pct()),
            f1(r.und.pct()),
            f1(r.ms_per_1k),
            f1(r.ms_per_1k_short),
            f1(r.init_ms),
        );
    }

    println!("\n## Accuracy (%) per language (all kinds)\n");
    println!("| detector | {} |", LANGS.join(" | "));
    println!("|---|{}|", LANGS.map(|_| "---:").join("|"));
    for r in &reports {
        println!("| {} | {} |", r.name, LANGS.map(|l| f1(r.lang_pct(l))).join(" | "));
    }

    println!("\n## Accuracy (%) per language, texts under {SHORT} characters\n");
    let counts: Vec<String> = LANGS
        .iter()
        .map(|l| samples.iter().filter(|s| s.lang == *l && s.chars < SHORT).count().to_string())
        .collect();
    println!("| detector | {} |", LANGS.join(" | "));
    println!("|---|{}|", LANGS.map(|_| "---:").join("|"));
    println!("| *(n)* | {} |", counts.join(" | "));
    for r in &reports {
        println!("| {} | {} |", r.name, LANGS.map(|l| f1(r.short_pct(l))).join(" | "));
    }

    {
        let (mono, mixed) = videos(&samples);
        println!("\n## Per-video label (%) on synthetic videos ({} monolingual, {} EN/ZH mixed)\n", mono.len(), mixed.len());
    }
    println!("`strict`: the four fields must agree, else `mixed` (the issue's rule as written; a field without an answer does not vote). `long`: in addition, fields under {SHORT} characters do not vote (unless all are short).\n");
    println!("| detector | mono right, strict | EN+ZH mono right, strict | mixed found, strict | mono right, long | EN+ZH mono right, long | mixed found, long |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &reports {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            f1(r.video.mono_strict.pct()),
            f1(r.video.enzh_strict.pct()),
            f1(r.video.mixed_strict.pct()),
            f1(r.video.mono_long.pct()),
            f1(r.video.enzh_long.pct()),
            f1(r.video.mixed_long.pct()),
        );
    }

    println!("\n## Most frequent confusions (truth → answer: count)\n");
    for r in &reports {
        let mut c: BTreeMap<(String, &str), usize> = BTreeMap::new();
        for (i, p) in &r.errors {
            *c.entry((samples[*i].lang.clone(), *p)).or_default() += 1;
        }
        let mut v: Vec<_> = c.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let top: Vec<String> = v.iter().take(8).map(|((t, p), n)| format!("{t}→{p}: {n}")).collect();
        println!("- {} ({} wrong): {}", r.name, r.errors.len(), top.join(", "));
    }

    if let Some(name) = errors_of {
        println!("\n## Errors of {name}\n");
        for r in reports.iter().filter(|r| r.name == name) {
            for (i, p) in &r.errors {
                let s = &samples[*i];
                println!("{}\t{}\t→ {}\t{}", s.kind, s.lang, p, s.text);
            }
        }
    }
    if flag("--rss") {
        match peak_rss_kib() {
            Some(k) => println!("\npeak RSS: {:.1} MiB", k as f64 / 1024.0),
            None => println!("\npeak RSS: unavailable"),
        }
    }
}
