//! The LLM judge's agreement with the people who made the same judgments (MVFNDB B.3's judged
//! metrics): Cohen's kappa on hit / miss for a hit-rate metric, Krippendorff's alpha (interval)
//! on a 0–5 rating; the judge against each person, against the people's consensus (majority of
//! hit / miss, mean of the ratings), and the people among themselves.
//!
//! Pure computation: reads nothing, writes nothing, calls nothing, caches nothing. The units
//! come from `evaluate --judge … --people EXPORT.json`, which pairs the judge's verdicts with a
//! Label Studio export.

use super::kappa::{cohen_kappa, krippendorff_alpha, krippendorff_alpha_interval};
use super::nominal_kappa;
use serde::Serialize;
use std::collections::BTreeMap;

/// One judgment both sides were asked for (an element of an answer, or an answer's rating):
/// the judge's value (None: it left it unjudged) and each person's.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit<V> {
    pub judge: Option<V>,
    pub people: BTreeMap<String, V>,
}

/// An agreement coefficient and the number of judgments (units) it compares. None when it is
/// undefined (fewer than two units for alpha, no spread at all).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Agreement {
    pub value: Option<f64>,
    pub n: usize,
}

/// How far the judge agrees with people on one metric.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JudgeAgreement {
    /// "Cohen's kappa" (hit / miss) or "Krippendorff's alpha (interval)" (0–5).
    pub measure: String,
    /// What the consensus is: "majority" (ties left out) or "mean".
    pub consensus: String,
    /// person → the judge against that person, on the units both judged.
    pub per_person: BTreeMap<String, Agreement>,
    /// The judge against the people's consensus.
    pub with_consensus: Agreement,
    /// Units whose people split evenly on hit / miss: no majority, left out of `with_consensus`.
    pub ties: usize,
    /// The people among themselves: Cohen's kappa for two, Fleiss' for more (hit / miss);
    /// Krippendorff's alpha over every person's ratings.
    pub among_people: Agreement,
    /// Units at least one person judged.
    pub judged_by_people: usize,
    /// Of those, the units the judge left unjudged: not compared.
    pub unjudged_by_judge: usize,
}

fn hit_label(h: bool) -> &'static str {
    if h { "hit" } else { "miss" }
}

/// The judge against each person, `agree` comparing the units both judged (values as `T`).
fn per_person<V: Copy, T: From<V>>(
    units: &[Unit<V>],
    agree: impl Fn(&[(T, T)]) -> Agreement,
) -> BTreeMap<String, Agreement> {
    let who: std::collections::BTreeSet<&String> =
        units.iter().flat_map(|u| u.people.keys()).collect();
    who.into_iter()
        .map(|p| {
            let pairs: Vec<(T, T)> = units
                .iter()
                .filter_map(|u| Some((T::from(u.judge?), T::from(*u.people.get(p)?))))
                .collect();
            (p.clone(), agree(&pairs))
        })
        .collect()
}

fn counted<V>(units: &[Unit<V>], out: &mut JudgeAgreement) {
    let judged: Vec<&Unit<V>> = units.iter().filter(|u| !u.people.is_empty()).collect();
    out.judged_by_people = judged.len();
    out.unjudged_by_judge = judged.iter().filter(|u| u.judge.is_none()).count();
}

/// The judge's agreement with people on hit / miss judgments (a hit-rate metric's elements).
pub fn hit_agreement(units: &[Unit<bool>]) -> JudgeAgreement {
    let mut out = JudgeAgreement {
        measure: "Cohen's kappa".into(),
        consensus: "majority".into(),
        ..Default::default()
    };
    counted(units, &mut out);
    let kappa = |pairs: &[(bool, bool)]| Agreement {
        value: {
            let (a, b): (Vec<&str>, Vec<&str>) = pairs
                .iter()
                .map(|(x, y)| (hit_label(*x), hit_label(*y)))
                .unzip();
            cohen_kappa(&a, &b)
        },
        n: pairs.len(),
    };
    out.per_person = per_person(units, kappa);
    let mut pairs = vec![];
    for u in units.iter().filter(|u| !u.people.is_empty()) {
        let Some(j) = u.judge else { continue };
        let hits = u.people.values().filter(|h| **h).count();
        let misses = u.people.len() - hits;
        if hits == misses {
            out.ties += 1;
        } else {
            pairs.push((j, hits > misses));
        }
    }
    out.with_consensus = kappa(&pairs);
    let labelled: Vec<BTreeMap<&str, &str>> = units
        .iter()
        .map(|u| {
            u.people
                .iter()
                .map(|(p, h)| (p.as_str(), hit_label(*h)))
                .collect()
        })
        .collect();
    let (value, n) = nominal_kappa(&labelled);
    out.among_people = Agreement { value, n };
    out
}

/// The judge's agreement with people on a 0–5 rating.
pub fn rating_agreement(units: &[Unit<u8>]) -> JudgeAgreement {
    let mut out = JudgeAgreement {
        measure: "Krippendorff's alpha (interval)".into(),
        consensus: "mean".into(),
        ..Default::default()
    };
    counted(units, &mut out);
    let alpha = |pairs: &[(f64, f64)]| Agreement {
        value: krippendorff_alpha_interval(pairs),
        n: pairs.len(),
    };
    out.per_person = per_person(units, alpha);
    // The mean is no rating anyone gave, but the interval metric compares it as it would one.
    let pairs: Vec<(f64, f64)> = units
        .iter()
        .filter(|u| !u.people.is_empty())
        .filter_map(|u| {
            let mean =
                u.people.values().map(|x| f64::from(*x)).sum::<f64>() / u.people.len() as f64;
            Some((f64::from(u.judge?), mean))
        })
        .collect();
    out.with_consensus = alpha(&pairs);
    let values: Vec<Vec<f64>> = units
        .iter()
        .map(|u| u.people.values().map(|x| f64::from(*x)).collect())
        .collect();
    out.among_people = Agreement {
        value: krippendorff_alpha(&values, |a: &f64, b: &f64| (a - b) * (a - b)),
        n: values.iter().filter(|v| v.len() >= 2).count(),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit<V: Copy>(judge: Option<V>, a: Option<V>, b: Option<V>) -> Unit<V> {
        let mut people = BTreeMap::new();
        for (who, v) in [("a", a), ("b", b)] {
            if let Some(v) = v {
                people.insert(who.to_string(), v);
            }
        }
        Unit { judge, people }
    }

    fn agreement(value: Option<f64>, n: usize) -> Agreement {
        Agreement { value, n }
    }

    #[test]
    fn hits_against_each_person_the_majority_and_each_other() {
        // The judge says hit on 4 units and miss on 4; a agrees everywhere, b flips one of each.
        // A ninth unit the judge left unjudged: a hit, b miss.
        let j = [true, true, true, true, false, false, false, false];
        let mut units: Vec<Unit<bool>> = j
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                unit(
                    Some(x),
                    Some(x),
                    Some(if i == 0 || i == 4 { !x } else { x }),
                )
            })
            .collect();
        units.push(unit(None, Some(true), Some(false)));
        let g = hit_agreement(&units);
        assert_eq!(g.per_person["a"], agreement(Some(1.0), 8));
        // b: p_o = 6/8, both 4 / 4 hit / miss so p_e = 1/2: kappa = (0.75 − 0.5) / 0.5.
        assert_eq!(g.per_person["b"], agreement(Some(0.5), 8));
        // The two flipped units tie; the 6 left agree with the judge, 3 hits and 3 misses.
        assert_eq!(g.ties, 2);
        assert_eq!(g.with_consensus, agreement(Some(1.0), 6));
        // a against b on all 9: p_o = 6/9; a 5 hits, b 4: p_e = 40/81; kappa = 14/41.
        let k = g.among_people.value.unwrap();
        assert!((k - 14.0 / 41.0).abs() < 1e-12, "{k}");
        assert_eq!(g.among_people.n, 9);
        assert_eq!((g.judged_by_people, g.unjudged_by_judge), (9, 1));
    }

    #[test]
    fn ratings_against_each_person_the_mean_and_each_other() {
        let units = vec![
            unit(Some(1u8), Some(1), Some(2)),
            unit(Some(2), Some(2), Some(2)),
            unit(Some(3), Some(3), Some(3)),
            unit(Some(4), Some(4), Some(5)),
            unit(None, Some(0), None),
        ];
        let g = rating_agreement(&units);
        assert_eq!(g.per_person["a"], agreement(Some(1.0), 4));
        // Judge against b: values 1 2 | 2 2 | 3 3 | 4 5, D_o = 4/8, Σ over ordered pairs of
        // squared differences = 2·(8·72 − 22²) = 184 over 56 pairs: alpha = 1 − 28/184 = 39/46.
        let b = g.per_person["b"].value.unwrap();
        assert!((b - 39.0 / 46.0).abs() < 1e-12, "{b}");
        // Against the mean 1.5, 2, 3, 4.5: D_o = 1/8, pairs 2·(8·65.5 − 21²) = 166: 159/166.
        let m = g.with_consensus.value.unwrap();
        assert!((m - 159.0 / 166.0).abs() < 1e-12, "{m}");
        let p = g.among_people.value.unwrap();
        assert!((p - 39.0 / 46.0).abs() < 1e-12, "{p}");
        assert_eq!((g.among_people.n, g.unjudged_by_judge), (4, 1));
    }
}
