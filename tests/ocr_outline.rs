//! Outlined text is named by its ink, not by its outline (issue 48): generated 720p clips with
//! four lines each in ten ink colours, every line outlined 1 to 4 px in black, white or a
//! contrasting colour over busy backgrounds (`make_demo_corpus.py --profile outline`). Every
//! line read must be named by its ink's colour in the OCR table, and in the derived CCP item
//! that asks for its colour (the item format that reads `text_color`).

use crate::items::answer_text;
use crate::need_ffmpeg;
use crate::util::*;
use std::collections::BTreeMap;
use std::path::Path;

fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric())
        .collect::<String>()
        .to_lowercase()
}

/// A drawn line: its video, text, ink box (grown by its outline), ink colour and outline.
struct Line {
    video: String,
    text: String,
    bx: [f64; 4],
    ink: String,
    outline: String,
}

fn drawn(corpus: &Path) -> Vec<Line> {
    std::fs::read_to_string(corpus.join("ground_truth.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|t| {
            let px = t["outline_px"].as_f64().unwrap();
            let b: Vec<f64> = (0..4).map(|i| t["ink_box"][i].as_f64().unwrap()).collect();
            Line {
                video: t["video_id"].as_str().unwrap().to_string(),
                text: t["text"].as_str().unwrap().to_string(),
                bx: [b[0] - px, b[1] - px, b[2] + px, b[3] + px],
                ink: t["colour_name"].as_str().unwrap().to_string(),
                outline: format!("{} {px} px", t["outline_kind"].as_str().unwrap()),
            }
        })
        .collect()
}

/// The drawn line a region's centre lies in.
fn under<'a>(lines: &'a [Line], r: &BTreeMap<String, String>) -> Option<&'a Line> {
    let f = |k: &str| r[k].parse::<f64>().unwrap();
    let (x, y) = (
        f("center_x") * f("frame_width"),
        f("center_y") * f("frame_height"),
    );
    lines.iter().find(|l| {
        l.video == r["video_id"] && l.bx[0] <= x && x <= l.bx[2] && l.bx[1] <= y && y <= l.bx[3]
    })
}

#[test]
fn outlined_text_is_named_by_its_ink() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let corpus = d.path().join("outline");
    make_corpus(
        &corpus,
        &["--profile", "outline", "--clips", "15", "--seconds", "1"],
    );
    let truth = drawn(&corpus);
    assert!(truth.len() >= 50, "{} lines drawn", truth.len());
    let ccp = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/tasks/mvfndb/ccp.toml");
    let mut text = pipeline_with(
        "manifest = \"outline/manifest.csv\"",
        "{ count = 1, jpeg_quality = 90 }",
        &[("ocr", "ocr")],
    );
    text += &format!(
        "\n[[stages]]\nid = \"ccp\"\ntype = \"items\"\ncompute = {{ task = \"{}\", per_video = 4 }}\n",
        ccp.display()
    );
    let p = d.path().join("p.toml");
    write(&p, &text);
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Every region read on a drawn line is named by the ink.
    let (mut lines_read, mut wrong) = (std::collections::BTreeSet::new(), vec![]);
    // What each region read says, and the line it lies on: the items name their text as read.
    let mut read_on = BTreeMap::new();
    for r in table_rows_file_all(&run_dir.join("ocr")) {
        // A region is that line's, or a word of it, by where it is (its text may be misread).
        let Some(l) = under(&truth, &r) else { continue };
        lines_read.insert((l.video.clone(), l.text.clone()));
        read_on.insert((l.video.clone(), norm(&r["text"])), l);
        if r["text_color"] != l.ink {
            wrong.push(format!(
                "{} {:?}: {} outlined {} named {} (h {} s {} v {})",
                l.video,
                r["text"],
                l.ink,
                l.outline,
                r["text_color"],
                r["text_h"],
                r["text_s"],
                r["text_v"]
            ));
        }
    }
    assert!(
        lines_read.len() * 10 >= truth.len() * 9,
        "only {} of {} lines read",
        lines_read.len(),
        truth.len()
    );
    assert!(
        wrong.is_empty(),
        "named by other than the ink:\n{}",
        wrong.join("\n")
    );

    // The derived colour items answer the ink's name.
    let mut items = 0;
    for r in table_rows_file_all(&run_dir.join("ccp")) {
        let l = read_on
            .get(&(r["video_id"].clone(), norm(&r["target_text"])))
            .unwrap_or_else(|| panic!("a CCP item on text not read on a drawn line: {r:?}"));
        assert_eq!(
            answer_text(&r),
            l.ink,
            "{} outlined {}: {r:?}",
            l.text,
            l.outline
        );
        items += 1;
    }
    assert!(
        items * 10 >= truth.len() * 9,
        "only {items} CCP items on drawn lines"
    );
}
