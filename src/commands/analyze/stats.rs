//! The statistics beside each comparison: two-sample Kolmogorov–Smirnov for per-region values,
//! chi-square of homogeneity for binned counts (with Cramér's V as the effect size).

use statrs::distribution::{ChiSquared, ContinuousCDF};

#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    pub test: &'static str,
    pub n_a: u64,
    pub n_b: u64,
    pub statistic: f64,
    pub p_value: f64,
    /// KS: D itself; chi-square: Cramér's V.
    pub effect_size: f64,
}

/// Asymptotic p-value of the Kolmogorov distribution, Q(λ) = 2 Σ (−1)^(k−1) e^(−2k²λ²).
fn kolmogorov_q(lambda: f64) -> f64 {
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    for k in 1..=100 {
        let term = (-2.0 * (k * k) as f64 * lambda * lambda).exp();
        sum += if k % 2 == 1 { term } else { -term };
        if term < 1e-12 {
            break;
        }
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

/// The values one group gives a KS test. The OCR table stores its measures as 32-bit floats,
/// kept as such (half the memory of `f64`, the same order and ties); shot counts and answer
/// fields are `f64`.
#[derive(Debug, Clone, PartialEq)]
pub enum Sample {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Sample {
    fn len(&self) -> usize {
        match self {
            Sample::F32(v) => v.len(),
            Sample::F64(v) => v.len(),
        }
    }

    fn at(&self, i: usize) -> f64 {
        match self {
            Sample::F32(v) => f64::from(v[i]),
            Sample::F64(v) => v[i],
        }
    }

    /// Ascending, in place: the test sorts what it is given rather than a copy of it.
    fn sort(&mut self) {
        match self {
            Sample::F32(v) => v.sort_unstable_by(|x, y| x.total_cmp(y)),
            Sample::F64(v) => v.sort_unstable_by(|x, y| x.total_cmp(y)),
        }
    }
}

/// Two-sample KS test (Stephens' small-sample correction of λ); sorts both samples in place.
pub fn ks_two_sample(a: &mut Sample, b: &mut Sample) -> Option<TestResult> {
    if a.len() == 0 || b.len() == 0 {
        return None;
    }
    a.sort();
    b.sort();
    let (la, lb) = (a.len(), b.len());
    let (na, nb) = (la as f64, lb as f64);
    let (mut i, mut j, mut d) = (0usize, 0usize, 0f64);
    while i < la && j < lb {
        let x = a.at(i).min(b.at(j));
        while i < la && a.at(i) <= x {
            i += 1;
        }
        while j < lb && b.at(j) <= x {
            j += 1;
        }
        d = d.max((i as f64 / na - j as f64 / nb).abs());
    }
    let en = (na * nb / (na + nb)).sqrt();
    let p = kolmogorov_q((en + 0.12 + 0.11 / en) * d);
    Some(TestResult {
        test: "ks_2samp",
        n_a: la as u64,
        n_b: lb as u64,
        statistic: d,
        p_value: p,
        effect_size: d,
    })
}

/// Chi-square test of homogeneity of two count vectors over the same bins (empty bins dropped).
pub fn chi_square(a: &[f64], b: &[f64]) -> Option<TestResult> {
    let (ta, tb): (f64, f64) = (a.iter().sum(), b.iter().sum());
    if ta <= 0.0 || tb <= 0.0 {
        return None;
    }
    let total = ta + tb;
    let (mut chi, mut bins) = (0f64, 0usize);
    for (x, y) in a.iter().zip(b) {
        let col = x + y;
        if col <= 0.0 {
            continue;
        }
        bins += 1;
        for (obs, row) in [(x, ta), (y, tb)] {
            let exp = row * col / total;
            chi += (obs - exp).powi(2) / exp;
        }
    }
    if bins < 2 {
        return None;
    }
    let df = (bins - 1) as f64;
    // The survival function, not 1 - cdf: that is 0 as soon as the cdf rounds to 1 (p < 1e-16).
    let p = ChiSquared::new(df).map(|d| d.sf(chi)).unwrap_or(f64::NAN);
    Some(TestResult {
        test: "chi2_homogeneity",
        n_a: ta as u64,
        n_b: tb as u64,
        statistic: chi,
        p_value: p,
        effect_size: (chi / total).sqrt(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ks_separates_shifted_samples_and_not_identical_ones() {
        let a: Vec<f64> = (0..200).map(|i| i as f64 / 200.0).collect();
        let b: Vec<f64> = (0..200).map(|i| 0.5 + i as f64 / 200.0).collect();
        let r = ks_two_sample(&mut Sample::F64(a.clone()), &mut Sample::F64(b)).unwrap();
        assert!(
            (r.statistic - 0.5).abs() < 0.01 && r.p_value < 1e-10,
            "{r:?}"
        );
        let same = ks_two_sample(&mut Sample::F64(a.clone()), &mut Sample::F64(a.clone())).unwrap();
        assert!(same.statistic == 0.0 && same.p_value > 0.99);
        // 32-bit samples, given unsorted, test as their 64-bit values do.
        let a32: Vec<f32> = a.iter().rev().map(|x| *x as f32).collect();
        let b64: Vec<f64> = (0..150).map(|i| 0.3 + i as f64 / 300.0).collect();
        let wide = ks_two_sample(
            &mut Sample::F64(a32.iter().map(|x| f64::from(*x)).collect()),
            &mut Sample::F64(b64.clone()),
        );
        let narrow = ks_two_sample(&mut Sample::F32(a32), &mut Sample::F64(b64));
        assert_eq!(wide, narrow);
    }

    #[test]
    fn chi_square_matches_a_textbook_table() {
        // [[10, 20], [30, 40]]: chi2 = 0.7937, df 1, p = 0.373.
        let r = chi_square(&[10.0, 20.0], &[30.0, 40.0]).unwrap();
        assert!(
            (r.statistic - 0.7937).abs() < 1e-3 && (r.p_value - 0.373).abs() < 1e-3,
            "{r:?}"
        );
    }

    #[test]
    fn a_very_small_chi_square_p_value_does_not_round_to_zero() {
        // [[300, 100], [100, 300]]: chi2 = 200 on 1 df, p = erfc(10) = 2.0885e-45 (1 - cdf gave
        // exactly 0).
        let r = chi_square(&[300.0, 100.0], &[100.0, 300.0]).unwrap();
        assert!((r.statistic - 200.0).abs() < 1e-9, "{r:?}");
        assert!(
            (r.p_value / 2.088_487_583_762_545e-45 - 1.0).abs() < 1e-3,
            "{r:?}"
        );
    }
}
