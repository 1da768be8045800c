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
