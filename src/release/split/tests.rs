use super::*;

fn items(n: usize, strata: &[&str], group_size: usize) -> Vec<Item> {
    (0..n)
        .map(|i| Item {
            video_id: format!("v{i:04}"),
            stratum: strata[i % strata.len()].to_string(),
            group: format!("g{}", i / group_size),
            cluster: None,
        })
        .collect()
}

#[test]
fn ratios_parse_and_normalise() {
    assert_eq!(parse_ratios("70/10/20").unwrap(), vec![0.7, 0.1, 0.2]);
    assert_eq!(parse_ratios("0.5,0.5").unwrap(), vec![0.5, 0.5]);
    assert!(parse_ratios("70/x/20").unwrap_err().0.contains("\"x\""));
    assert!(parse_ratios("0/0").is_err());
}

#[test]
fn single_videos_land_within_one_of_every_target() {
    let ratios = [0.7, 0.1, 0.2];
    for n in [7, 10, 33, 101, 250] {
        let it = items(n, &["fake/yes", "fake/no", "real/yes"], 1);
        let placed = assign(&it, &ratios, 13);
        for stratum in ["fake/yes", "fake/no", "real/yes"] {
            let total = it.iter().filter(|i| i.stratum == stratum).count() as f64;
            for (s, r) in ratios.iter().enumerate() {
                let got = it
                    .iter()
                    .zip(&placed)
                    .filter(|(i, p)| i.stratum == stratum && **p == s)
                    .count() as f64;
                assert!(
                    (got - r * total).abs() < 1.0,
                    "n={n} {stratum} split {s}: {got} vs {}",
                    r * total
                );
            }
        }
    }
}

#[test]
fn groups_stay_whole_and_the_result_is_deterministic() {
    let ratios = [0.7, 0.1, 0.2];
    let it = items(300, &["a", "b"], 3);
    let placed = assign(&it, &ratios, 13);
    let mut where_: HashMap<&str, usize> = HashMap::new();
    for (i, p) in it.iter().zip(&placed) {
        assert_eq!(
            *where_.entry(i.group.as_str()).or_insert(*p),
            *p,
            "{} split",
            i.group
        );
    }
    // Shares close to the ratios: 100 groups of 3.
    for (s, r) in ratios.iter().enumerate() {
        let got = placed.iter().filter(|p| **p == s).count() as f64;
        assert!((got - r * 300.0).abs() <= 3.0, "split {s}: {got}");
    }
    // Same input in another order, same seed: same placement per video.
    let mut rev = it.clone();
    rev.reverse();
    let placed_rev = assign(&rev, &ratios, 13);
    let by_id = |it: &[Item], p: &[usize]| -> BTreeMap<String, usize> {
        it.iter()
            .zip(p)
            .map(|(i, p)| (i.video_id.clone(), *p))
            .collect()
    };
    assert_eq!(by_id(&it, &placed), by_id(&rev, &placed_rev));
    // Another seed places differently.
    assert_ne!(placed, assign(&it, &ratios, 14));
}
