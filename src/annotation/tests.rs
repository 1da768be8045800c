use super::import::{fields_of, validate};
use super::*;
use crate::benchmark::review::kappa::{cohen_kappa, fleiss_kappa};
use serde_json::{Value, json};

#[test]
fn kappas_of_known_tables() {
    // Cohen: 20 items, agreement 0.7, chance 0.5 -> 0.4.
    let a: Vec<&str> = [vec!["yes"; 10], vec!["no"; 10]].concat();
    let b: Vec<&str> = [vec!["yes"; 7], vec!["no"; 3], vec!["yes"; 3], vec!["no"; 7]].concat();
    assert!((cohen_kappa(&a, &b).unwrap() - 0.4).abs() < 1e-12);
    assert_eq!(cohen_kappa(&["yes", "no"], &["yes", "no"]), Some(1.0));
    // Fleiss (Wikipedia's 10-item, 14-rater, 5-category example): 0.210.
    let t = vec![
        vec![0., 0., 0., 0., 14.],
        vec![0., 2., 6., 4., 2.],
        vec![0., 0., 3., 5., 6.],
        vec![0., 3., 9., 2., 0.],
        vec![2., 2., 8., 1., 1.],
        vec![7., 7., 0., 0., 0.],
        vec![3., 2., 6., 3., 0.],
        vec![2., 5., 3., 2., 2.],
        vec![6., 5., 2., 1., 0.],
        vec![0., 2., 2., 3., 7.],
    ];
    assert!((fleiss_kappa(&t).unwrap() - 0.2099).abs() < 1e-3);
}

#[test]
fn timeline_frames_become_seconds_and_bad_fields_are_named() {
    let result: Vec<Value> = serde_json::from_value(json!([
        {"from_name": "spans", "type": "timelinelabels", "value": {"ranges": [{"start": 31, "end": 60}], "timelinelabels": ["risk_signal"]}},
        {"from_name": "risk_label", "type": "choices", "value": {"choices": ["yes"]}},
        {"from_name": "risk_signal_first", "type": "textarea", "value": {"text": ["a car swerves"]}}
    ]))
    .unwrap();
    let f = fields_of(&result, 30.0);
    assert_eq!(f["risk_signal_start"], json!(1.0));
    assert_eq!(f["risk_signal_end"], json!(2.0));
    assert_eq!(f["risk_label"], json!("yes"));
    let mut a = Annotation {
        video_id: "v".into(),
        annotator: "x".into(),
        risk_signal_start: Some(3.0),
        risk_signal_end: Some(2.0),
        accident_start: Some(1.0),
        accident_end: Some(99.0),
        risk_label: "yes".into(),
        ..Default::default()
    };
    let fields: Vec<String> = validate(&a, Some(10.0))
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(
        fields,
        ["risk_signal_end", "accident_end", "risk_signal_description"]
    );
    a.risk_label = "maybe".into();
    assert!(validate(&a, None).iter().any(|(f, _)| f == "risk_label"));
}

fn drafted() -> crate::record::QuestionItem {
    crate::record::QuestionItem {
        item_id: "i".into(),
        level: "observable_evidence".into(),
        question: "What is shown on screen throughout the clip?".into(),
        options: ["Coloured test bars", "A crowd", "A desk", "A map"]
            .map(String::from)
            .to_vec(),
        answer: "A".into(),
        permutation: vec![0, 1, 2, 3],
        kept: true,
        attempts: 1,
        ..Default::default()
    }
}

fn results(pairs: &[(&str, &[&str])]) -> Vec<Value> {
    pairs
        .iter()
        .map(|(name, v)| {
            if ["decision", "answer", "level"].contains(name) {
                json!({"from_name": name, "type": "choices", "value": {"choices": v}})
            } else {
                json!({"from_name": name, "type": "textarea", "value": {"text": v}})
            }
        })
        .collect()
}

/// A review by r1 of `drafted()` with these results, checked against a taxonomy of two levels.
fn review(
    r: &[(&str, &[&str])],
) -> Result<crate::benchmark::review::items::ItemReview, Vec<(String, String)>> {
    let levels = vec![
        "observable_evidence".to_string(),
        "beyond_clip_reasoning".into(),
    ];
    super::items::review_of(&drafted(), &results(r), &levels, "r1", "v")
}

#[test]
fn item_reviews_are_checked_and_classed_against_the_drafted_item() {
    use crate::benchmark::review::items::edit_class;
    let d = drafted();
    // Accept with nothing else: the drafted item as is.
    let r = review(&[("decision", &["accept"])]).unwrap();
    assert_eq!(
        (r.options.clone(), r.answer.clone()),
        (d.options.clone(), d.answer.clone())
    );
    assert_eq!(edit_class(&d, &r, 0.5), "accepted");
    // One word more: minor; a new question and right option: rewritten.
    let r = review(&[
        ("decision", &["edit"]),
        (
            "question",
            &["What is shown on the screen throughout the clip?"],
        ),
    ])
    .unwrap();
    assert_eq!(edit_class(&d, &r, 0.5), "minor_edit");
    let r = review(&[
        ("decision", &["edit"]),
        ("question", &["Which colour comes first?"]),
        ("option_a", &["White"]),
    ])
    .unwrap();
    assert_eq!(edit_class(&d, &r, 0.5), "rewritten");
    // An emptied option is dropped and the letters close up.
    let r = review(&[
        ("decision", &["edit"]),
        ("option_b", &[""]),
        ("answer", &["C"]),
    ])
    .unwrap();
    assert_eq!(r.options, ["Coloured test bars", "A desk", "A map"]);
    assert_eq!(r.answer, "B");
    let r = review(&[
        ("decision", &["reject"]),
        ("reject_reason", &["gives it away"]),
    ])
    .unwrap();
    assert_eq!(edit_class(&d, &r, 0.5), "rejected");
}

#[test]
fn bad_item_reviews_name_their_fields() {
    // Bad reviews name their fields.
    let fields = |r: Result<_, Vec<(String, String)>>| -> Vec<String> {
        r.unwrap_err().into_iter().map(|(f, _)| f).collect()
    };
    assert_eq!(
        fields(review(&[("decision", &["edit"]), ("answer", &["A", "C"])])),
        ["answer"]
    );
    assert_eq!(
        fields(review(&[
            ("decision", &["edit"]),
            ("option_d", &["coloured test bars!"])
        ])),
        ["options"]
    );
    assert_eq!(
        fields(review(&[
            ("decision", &["edit"]),
            ("answer", &["B"]),
            ("option_b", &[""])
        ])),
        ["answer"]
    );
    assert_eq!(
        fields(review(&[("decision", &["reject"])])),
        ["reject_reason"]
    );
    assert_eq!(fields(review(&[("decision", &["maybe"])])), ["decision"]);
    assert_eq!(
        fields(review(&[
            ("decision", &["edit"]),
            ("question", &[" "]),
            ("level", &["elsewhere"])
        ])),
        ["question", "level"]
    );
}

/// An exported task of `d` as Label Studio gives it back, with one accepting annotation.
fn task_of(d: &crate::record::QuestionItem) -> Value {
    let mut data = json!({
        "item_id": d.item_id, "level": d.level, "question": d.question, "answer": d.answer,
    });
    for (i, o) in d.options.iter().enumerate() {
        data[format!(
            "option_{}",
            crate::benchmark::formats::letter(i).to_lowercase()
        )] = json!(o);
    }
    json!({
        "id": 7,
        "data": data,
        "annotations": [{
            "id": 1, "completed_by": {"email": "r1@example.org"},
            "updated_at": "2026-12-01T00:00:00Z",
            "result": results(&[("decision", &["accept"])]),
        }],
    })
}

#[test]
fn a_review_applies_to_the_draft_it_was_made_of() {
    let levels = vec!["observable_evidence".to_string()];
    let d = drafted();
    let video = "v".to_string();
    let import = |task: &Value, now: &crate::record::QuestionItem| {
        let drafted = std::collections::HashMap::from([(now.item_id.as_str(), (&video, now))]);
        let mut report = Default::default();
        let rows = super::items::reviews_of_task(task, &drafted, &levels, 0.5, &mut report);
        (rows, report)
    };
    let (rows, report) = import(&task_of(&d), &d);
    assert_eq!(rows.len(), 1, "{:?}", report.problems);
    assert!(rows[0].is_of(&d));
    // The same id drafted again with another question: the stored review is not of it, and an
    // export of the old draft imported now is kept out, saying why.
    let mut again = d.clone();
    again.question = "Which colour is on the left?".into();
    assert!(!rows[0].is_of(&again));
    let (rows, report) = import(&task_of(&d), &again);
    assert!(rows.is_empty());
    assert_eq!(report.problems.len(), 1);
    assert!(
        report.problems[0].reason.contains("drafted again"),
        "{:?}",
        report.problems
    );
    // A review stored before drafts were recorded applies as it did.
    let legacy = crate::benchmark::review::items::ItemReview {
        drafted: None,
        ..Default::default()
    };
    assert!(legacy.is_of(&again));
}
