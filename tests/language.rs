//! The language stage on real fields: titles and descriptions from a manifest, transcripts from
//! captions beside the media, and on-screen text read by the OCR stage from generated frames
//! (English drawn with drawtext; Chinese from RapidOCR's `ch_en_num.jpg` test image). Then
//! `split --stratify language` and the release card's language table.

use crate::judge::{err, run_with_key};
use crate::need_ffmpeg;
use crate::util::*;
use std::collections::BTreeMap;
use std::path::Path;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf";

/// Two seconds of `input` (ffmpeg input arguments) through the filter `vf`, as H.264.
fn encode(input: &[&str], vf: &str, path: &Path) {
    let mut args = input.to_vec();
    args.extend([
        "-t",
        "2",
        "-r",
        "25",
        "-vf",
        vf,
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
    ]);
    args.push(path.to_str().unwrap());
    ffmpeg(&args);
}

/// `text` in white on dark blue, 640×360.
fn english_text_clip(path: &Path, text: &str) {
    encode(
        &["-f", "lavfi", "-i", "color=c=0x102040:s=640x360:r=25"],
        &format!("drawtext=fontfile={FONT}:text='{text}':fontsize=40:fontcolor=white:x=40:y=150"),
        path,
    );
}

/// A still image.
fn still_clip(path: &Path, image: &Path) {
    encode(
        &["-loop", "1", "-i", image.to_str().unwrap()],
        "scale=trunc(iw/2)*2:trunc(ih/2)*2",
        path,
    );
}

fn captions(path: &Path, text: &str) {
    write(
        path,
        &format!(
            r#"{{"events":[{{"tStartMs":100,"dDurationMs":1500,"segs":[{{"utf8":"{text}"}}]}}]}}"#
        ),
    );
}

#[test]
fn language_per_video_from_titles_transcripts_and_on_screen_text() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let v = dir.path().join("v");
    std::fs::create_dir_all(&v).unwrap();
    english_text_clip(&v.join("bread.mp4"), "BAKE FRESH BREAD AT HOME TODAY");
    captions(
        &v.join("bread.en.json3"),
        "so today we are going to bake a simple loaf of bread with only flour water salt and yeast",
    );
    still_clip(
        &v.join("promo.mp4"),
        &fixtures().join("ocr").join("ch_en_num.jpg"),
    );
    captions(
        &v.join("promo.zh.json3"),
        "大家好，今天给大家介绍一下这家店的促销活动，所有商品都是正品，价格也非常实惠",
    );
    english_text_clip(&v.join("hotpot.mp4"), "HOT POT IN CHENGDU");
    captions(
        &v.join("hotpot.zh.json3"),
        "大家好，今天我们来到成都，带大家去吃最地道的火锅，这家店已经开了二十多年了",
    );
    write(
        &dir.path().join("m.csv"),
        "id,path,title,description\n\
         bread,v/bread.mp4,How to bake fresh bread at home in one hour,A simple loaf for beginners with only four ingredients.\n\
         promo,v/promo.mp4,正品促销：本周的优惠活动全部介绍,这家店的所有商品本周都有折扣，欢迎大家来看看。\n\
         hotpot,v/hotpot.mp4,Street food tour in Chengdu: the best hot pot we found,We spent a whole day eating our way through the city.\n",
    );
    let p = dir.path().join("p.toml");
    write(
        &p,
        &(pipeline(
            "manifest = \"m.csv\"",
            "{ mode = \"uniform\", count = 2 }",
            "[services.asr]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\n",
        ) + "\n[[stages]]\nid = \"transcript\"\ntype = \"transcript\"\ncompute = { service = \"asr\" }\n\
             \n[[stages]]\nid = \"ocr\"\ntype = \"ocr\"\n\
             \n[[stages]]\nid = \"lang\"\ntype = \"language\"\n"),
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert!(o.status.success(), "{}", err(&o));
    let rows: BTreeMap<String, BTreeMap<String, String>> = table_rows_file_all(&out.join("lang"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r))
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let field = |v: &str, f: &str| rows[v][f].clone();
    // Every field in English.
    assert_eq!(field("bread", "language"), "en", "{:?}", rows["bread"]);
    assert_eq!(field("bread", "ocr_language"), "en", "{:?}", rows["bread"]);
    assert_eq!(field("bread", "transcript_language"), "en");
    assert_eq!(field("bread", "voters"), "title,description,transcript,ocr");
    // Chinese title, description, speech and on-screen text (the OCR of a real product ad).
    assert_eq!(field("promo", "language"), "zh", "{:?}", rows["promo"]);
    assert_eq!(field("promo", "ocr_language"), "zh", "{:?}", rows["promo"]);
    assert_eq!(field("promo", "title_language"), "zh");
    // English title and sign, Chinese speech: mixed.
    assert_eq!(field("hotpot", "language"), "mixed", "{:?}", rows["hotpot"]);
    assert_eq!(field("hotpot", "transcript_language"), "zh");
    assert_eq!(field("hotpot", "title_language"), "en");
    // "HOT POT IN CHENGDU" is 18 characters: too short to vote.
    assert_eq!(field("hotpot", "voters"), "title,description,transcript");

    // Stratified by the stage's column: one video per language stratum.
    let o = run(
        &[
            "split",
            out.to_str().unwrap(),
            "--stratify",
            "language",
            "--ratios",
            "50/50",
            "--names",
            "a,b",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let strata: BTreeMap<String, String> = table_rows_file(&out.join("splits/default.parquet"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r["stratum"].clone()))
        .collect();
    assert_eq!(
        strata,
        [("bread", "en"), ("hotpot", "mixed"), ("promo", "zh")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .into()
    );
    // The stage named, as an unknown bare name is not.
    let o = run(
        &[
            "split",
            out.to_str().unwrap(),
            "--stratify",
            "lang.ocr_language",
            "--name",
            "ocr",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let o = run(
        &[
            "split",
            out.to_str().unwrap(),
            "--stratify",
            "nosuch.language",
            "--name",
            "x",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("no stage `nosuch`"), "{}", err(&o));

    let rel = dir.path().join("rel");
    let o = run(
        &[
            "release",
            out.to_str().unwrap(),
            "--out",
            rel.to_str().unwrap(),
            "--frames",
            "none",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    let table: Vec<&str> = card
        .lines()
        .skip_while(|l| *l != "## Languages")
        .filter(|l| l.starts_with("| "))
        .take(4)
        .collect();
    assert_eq!(
        table[0], "| language | videos (all splits) | share | a | b |",
        "{card}"
    );
    let mut langs: Vec<&str> = table[1..]
        .iter()
        .map(|l| l.split(" | ").next().unwrap().trim_start_matches("| "))
        .collect();
    langs.sort();
    assert_eq!(langs, ["en", "mixed", "zh"], "{card}");
    assert!(
        table[1..].iter().all(|l| l.contains("| 1 | 33.3 % |")),
        "{card}"
    );
}
