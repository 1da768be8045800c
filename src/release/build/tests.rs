use super::*;

#[test]
fn perturbations_are_permutations_or_single_frames() {
    let v = perturbations(16, 13, "abc");
    let names: Vec<&str> = v.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "original",
            "shuffled",
            "halves_swapped",
            "reversed",
            "first_frame",
            "last_frame"
        ]
    );
    let mut sorted = v[1].1.clone();
    sorted.sort();
    assert_eq!(sorted, v[0].1);
    assert_ne!(
        v[1].1, v[0].1,
        "a shuffle of 16 frames that changes nothing"
    );
    assert_eq!(v[2].1[..8], v[0].1[8..]);
    assert_eq!(v[3].1[0], 15);
    assert_eq!(v[4].1, vec![0]);
    assert_eq!(v[5].1, vec![15]);
    // Stable for a video and seed; another seed, another shuffle.
    assert_eq!(perturbations(16, 13, "abc")[1], v[1]);
    assert_ne!(perturbations(16, 14, "abc")[1], v[1]);
    assert!(perturbations(0, 13, "x").iter().all(|(_, o)| o.is_empty()));
}

#[test]
fn features_follow_the_datasets_yaml_form() {
    let schema = Schema::new(vec![
        Field::new(
            "tags",
            plain(&DataType::LargeList(Arc::new(Field::new(
                "element",
                DataType::LargeUtf8,
                true,
            )))),
            true,
        ),
        Field::new(
            "prov",
            DataType::List(Arc::new(Field::new(
                "item",
                DataType::Struct(vec![Field::new("rank", DataType::UInt32, true)].into()),
                true,
            ))),
            true,
        ),
    ]);
    let mut y = String::new();
    for f in schema.fields() {
        y += &format!("- name: {}\n", f.name());
        feature_yaml(f.data_type(), false, 2, &mut y);
    }
    assert_eq!(
        y,
        "- name: tags\n  list: string\n- name: prov\n  list:\n  - name: rank\n    dtype: uint32\n"
    );
}
