use super::import::{fields_of, validate};
use super::*;
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
        task_id: None,
        annotation_id: None,
        updated_at: None,
        risk_signal_start: Some(3.0),
        risk_signal_end: Some(2.0),
        risk_visual_indicators: None,
        risk_signal_description: None,
        accident_start: Some(1.0),
        accident_end: Some(99.0),
        accident_description: None,
        risk_label: "yes".into(),
        decided_by: None,
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
