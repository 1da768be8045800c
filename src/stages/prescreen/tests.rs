//! The prescreen's verdicts on hand-made regions: each criterion's patterns, its thresholds and
//! the rows a run stores.

use super::*;

#[test]
fn date_and_time_patterns_in_several_languages() {
    let hit = |t: &str| DATE_TIME.iter().any(|re| re.is_match(t));
    for t in [
        "May 25th, 2025",
        "25 mai 2024",
        "13:00",
        "1:05 PM",
        "2024-05-25",
        "25/05/2024",
        "2025年5月25日",
        "5월 25일",
        "12 de octubre",
        "14h30",
    ] {
        assert!(hit(t), "{t}");
    }
    for t in ["BREAKING NEWS", "Score 3-1", "Route 66", "version 2.0"] {
        assert!(!hit(t), "{t}");
    }
    assert!(SNS.is_match("Like & Share"));
    assert!(SNS.is_match("follow @citynews24"));
    assert!(SNS.is_match("#protest"));
    assert!(!SNS.is_match("The crowd gathered"));
}

fn region(frame: u32, text: &str, cx: f32, cy: f32, creator: bool) -> TextRegion {
    // Only what the verdicts read: the size and colour the OCR stage measures play no part.
    TextRegion {
        frame_index: frame,
        text: text.into(),
        score: 0.95,
        center_x: cx,
        center_y: cy,
        creator_added: creator,
        ..Default::default()
    }
}

fn stage(places: &[&str]) -> PrescreenStage {
    PrescreenStage {
        cfg: PrescreenConfig::default(),
        select: PrescreenSelect::default(),
        places: places
            .iter()
            .map(|p| Regex::new(&format!(r"(?i)\b{}\b", regex::escape(p))).unwrap())
            .collect(),
    }
}

#[test]
fn three_certain_failures_drop_the_video_two_do_not() {
    let s = stage(&["Nairobi"]);
    let mut regions = vec![];
    for f in 0..8u32 {
        // A channel logo in the top-right corner of every frame.
        regions.push(region(f, "CITY TV", 0.9, 0.08, true));
        // Changing subtitles in the bottom band.
        regions.push(region(
            f,
            &format!("and then we walked to line {f}"),
            0.5,
            0.9,
            true,
        ));
    }
    // A date stamp on two frames, and a place name once.
    regions.push(region(2, "25/05/2024 13:00", 0.2, 0.1, true));
    regions.push(region(3, "25/05/2024 13:01", 0.2, 0.1, true));
    regions.push(region(4, "Live from Nairobi", 0.5, 0.5, true));
    let v = s.judge(&regions, 8, Some(1));
    assert_eq!(v.logo, Verdict::Fail, "{}", v.logo_evidence);
    assert_eq!(v.subtitles, Verdict::Fail, "{}", v.subtitles_evidence);
    assert_eq!(v.time_date, Verdict::Fail, "{}", v.time_date_evidence);
    assert_eq!(v.location, Verdict::Fail);
    assert_eq!(v.jump_cuts, Verdict::Pass);
    assert_eq!(v.certain_failures, 4);
    assert_eq!(v.failed_criteria, "1,2,3,10");
    assert!(!crate::stages::RowThresholds::keep(&s.select, &[v]));
    // Logo and subtitles only: the quality model could still keep it (10 of 12).
    let two: Vec<TextRegion> = regions.into_iter().take(16).collect();
    let v = s.judge(&two, 8, Some(1));
    assert_eq!(v.certain_failures, 2);
    assert!(crate::stages::RowThresholds::keep(&s.select, &[v]));
    // Scene text (not creator-added) in a corner is no logo.
    let scene: Vec<TextRegion> = (0..8).map(|f| region(f, "EXIT", 0.9, 0.1, false)).collect();
    assert_eq!(s.judge(&scene, 8, None).logo, Verdict::Pass);
}

/// The row as it was before verdicts were an enum.
#[derive(Default, Serialize, Deserialize)]
struct StringVerdicts {
    logo: String,
    logo_evidence: String,
    location: String,
    location_evidence: String,
    time_date: String,
    time_date_evidence: String,
    sns: String,
    sns_evidence: String,
    jump_cuts: String,
    jump_cuts_evidence: String,
    subtitles: String,
    subtitles_evidence: String,
    certain_failures: u32,
    failed_criteria: String,
}

/// The verdict columns keep the type and strings they had as `String` fields: old shards read
/// as the enum, new shards read as before, and the stage's fingerprint (which hashes the
/// column types) does not change.
#[test]
fn verdicts_are_stored_as_the_strings_they_were() {
    use crate::store::shards::{decode_parquet, encode_table, fields_of};
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;

    let fields = fields_of::<Prescreen>().unwrap();
    assert_eq!(fields, fields_of::<StringVerdicts>().unwrap());

    let row = Prescreen {
        logo: Verdict::Fail,
        logo_evidence: "\"CITY TV\" in a corner of 8/8 frames".into(),
        location: Verdict::LikelyFail,
        time_date: Verdict::Pass,
        sns: Verdict::Unknown,
        jump_cuts: Verdict::Pass,
        jump_cuts_evidence: "1 shot".into(),
        subtitles: Verdict::Fail,
        subtitles_evidence: "bottom-band text in 8/8 frames, 8 different lines".into(),
        certain_failures: 2,
        failed_criteria: "1,10".into(),
        ..Default::default()
    };
    let batch = serde_arrow::to_record_batch(&fields, &vec![row.clone()]).unwrap();
    let parquet = encode_table(&batch).unwrap();
    let read = decode_parquet(parquet, true).unwrap().batches.remove(0);
    for (column, want) in [
        ("logo", "fail"),
        ("location", "likely_fail"),
        ("time_date", "pass"),
        ("sns", "unknown"),
        ("jump_cuts", "pass"),
        ("subtitles", "fail"),
    ] {
        let schema = read.schema();
        let field = schema.field_with_name(column).unwrap();
        assert_eq!(field.data_type(), &DataType::LargeUtf8, "{column}");
        assert!(!field.is_nullable(), "{column}");
        let values = read.column_by_name(column).unwrap().as_string::<i64>();
        assert_eq!(values.value(0), want, "{column}");
    }
    let back: Vec<Prescreen> = serde_arrow::from_record_batch(&read).unwrap();
    assert_eq!(back, vec![row]);
}

#[test]
fn shards_written_when_verdicts_were_strings_read_as_the_enum() {
    use crate::store::shards::fields_of;
    let fields = fields_of::<Prescreen>().unwrap();
    // A shard written when verdicts were strings reads as the enum; a word that is no
    // verdict is an error, not a silent `unknown`.
    let old = |logo: &str| StringVerdicts {
        logo: logo.into(),
        location: "pass".into(),
        time_date: "likely_fail".into(),
        sns: "fail".into(),
        jump_cuts: "unknown".into(),
        subtitles: "pass".into(),
        certain_failures: 1,
        failed_criteria: "5".into(),
        ..Default::default()
    };
    let batch = serde_arrow::to_record_batch(&fields, &vec![old("fail")]).unwrap();
    let back: Vec<Prescreen> = serde_arrow::from_record_batch(&batch).unwrap();
    assert_eq!(
        [
            back[0].logo,
            back[0].location,
            back[0].time_date,
            back[0].sns,
            back[0].jump_cuts
        ],
        [
            Verdict::Fail,
            Verdict::Pass,
            Verdict::LikelyFail,
            Verdict::Fail,
            Verdict::Unknown
        ]
    );
    let batch = serde_arrow::to_record_batch(&fields, &vec![old("maybe")]).unwrap();
    assert!(serde_arrow::from_record_batch::<Vec<Prescreen>>(&batch).is_err());
}
