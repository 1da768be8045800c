//! Agreement between people: Cohen's kappa for two raters, Fleiss' for more. Pure computation.

/// Cohen's kappa of two raters' labels (same items).
pub fn cohen_kappa(a: &[&str], b: &[&str]) -> Option<f64> {
    let n = a.len() as f64;
    if a.is_empty() || a.len() != b.len() {
        return None;
    }
    let po = a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / n;
    let mut cats: Vec<&str> = a.iter().chain(b).copied().collect();
    cats.sort_unstable();
    cats.dedup();
    let pe: f64 = cats
        .iter()
        .map(|c| {
            (a.iter().filter(|x| *x == c).count() as f64 / n)
                * (b.iter().filter(|x| *x == c).count() as f64 / n)
        })
        .sum();
    if (1.0 - pe).abs() < 1e-12 {
        return Some(if po == 1.0 { 1.0 } else { 0.0 });
    }
    Some((po - pe) / (1.0 - pe))
}

/// Fleiss' kappa: `counts[item][category]`, every item rated by the same number of raters.
pub fn fleiss_kappa(counts: &[Vec<f64>]) -> Option<f64> {
    let n_items = counts.len() as f64;
    let raters: f64 = counts.first()?.iter().sum();
    if raters < 2.0
        || counts
            .iter()
            .any(|c| (c.iter().sum::<f64>() - raters).abs() > 1e-9)
    {
        return None;
    }
    let k = counts[0].len();
    let p_j: Vec<f64> = (0..k)
        .map(|j| counts.iter().map(|c| c[j]).sum::<f64>() / (n_items * raters))
        .collect();
    let p_i: Vec<f64> = counts
        .iter()
        .map(|c| (c.iter().map(|x| x * x).sum::<f64>() - raters) / (raters * (raters - 1.0)))
        .collect();
    let p_bar = p_i.iter().sum::<f64>() / n_items;
    let pe: f64 = p_j.iter().map(|p| p * p).sum();
    if (1.0 - pe).abs() < 1e-12 {
        return Some(if (p_bar - 1.0).abs() < 1e-12 {
            1.0
        } else {
            0.0
        });
    }
    Some((p_bar - pe) / (1.0 - pe))
}

/// Krippendorff's alpha of two raters on an interval scale (every unit rated by both):
/// 1 − D_o / D_e, D_o the mean squared difference within units, D_e over all pairs of values.
/// None with fewer than two units or no spread at all.
pub fn krippendorff_alpha_interval(pairs: &[(f64, f64)]) -> Option<f64> {
    let units: Vec<Vec<f64>> = pairs.iter().map(|(a, b)| vec![*a, *b]).collect();
    krippendorff_alpha(&units, |a, b| (a - b) * (a - b))
}

/// Krippendorff's alpha for any distance `delta` (δ², zero for equal values): `units[u]` are
/// the values the raters gave unit u (a unit with fewer than two is not pairable and left out).
/// D_o = (1/n) Σ_u Σ_{i≠j} δ(v_ui, v_uj) / (m_u − 1); D_e = Σ_{i≠j} δ(v_i, v_j) / (n (n − 1))
/// over all n pairable values; alpha = 1 − D_o / D_e. None with fewer than two units or no
/// spread at all. Interval data: δ = (a − b)²; time ranges: 1 − IoU; texts: 1 − similarity.
pub fn krippendorff_alpha<T>(units: &[Vec<T>], delta: impl Fn(&T, &T) -> f64) -> Option<f64> {
    let pairable: Vec<&Vec<T>> = units.iter().filter(|u| u.len() >= 2).collect();
    if pairable.len() < 2 {
        return None;
    }
    let all: Vec<&T> = pairable.iter().flat_map(|u| u.iter()).collect();
    let n = all.len() as f64;
    let d_o = pairable
        .iter()
        .map(|u| pair_sum(u.iter(), &delta) / (u.len() as f64 - 1.0))
        .sum::<f64>()
        / n;
    let d_e = pair_sum(all.iter().copied(), &delta) / (n * (n - 1.0));
    if d_e <= 0.0 {
        return None;
    }
    Some(1.0 - d_o / d_e)
}

/// Σ δ(x, y) over the ordered pairs of two of `values` (within a unit, or over all of them).
fn pair_sum<'a, T: 'a>(
    values: impl Iterator<Item = &'a T> + Clone,
    delta: &impl Fn(&T, &T) -> f64,
) -> f64 {
    let mut s = 0.0;
    for (i, x) in values.clone().enumerate() {
        for (j, y) in values.clone().enumerate() {
            if i != j {
                s += delta(x, y);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_is_one_for_agreement_and_falls_with_disagreement() {
        assert_eq!(
            krippendorff_alpha_interval(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]),
            Some(1.0)
        );
        // Values 1, 2 | 2, 3: D_o = 1; D_e = 16 / 12 over the 12 ordered pairs of 1, 2, 2, 3
        // (squared differences 1, 1, 4, 0, 1, 1, each twice): alpha = 1 − 12 / 16.
        let a = krippendorff_alpha_interval(&[(1.0, 2.0), (2.0, 3.0)]).unwrap();
        assert!((a - 0.25).abs() < 1e-12, "{a}");
        assert_eq!(krippendorff_alpha_interval(&[(2.0, 2.0), (2.0, 2.0)]), None);
        // Three raters on one unit and two on another equal the pairs' weighting: unit 1
        // (1, 1, 2) contributes 4 / 2 = 2 within, unit 2 (3, 3) none; n = 5 values 1, 1, 2, 3, 3,
        // D_o = 2 / 5; their ordered pairs' squared differences sum to 2·(0+1+4+4+1+4+4+1+1+0)
        // = 40, D_e = 40 / 20 = 2: alpha = 1 − 0.4 / 2 = 0.8.
        let units = vec![vec![1.0, 1.0, 2.0], vec![3.0, 3.0], vec![9.0]];
        let a = krippendorff_alpha(&units, |x: &f64, y: &f64| (x - y) * (x - y)).unwrap();
        assert!((a - 0.8).abs() < 1e-12, "{a}");
    }
}
