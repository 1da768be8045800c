//! The statistics beside each comparison: two-sample Kolmogorov–Smirnov for per-region values,
//! chi-square of homogeneity for binned counts (with Cramér's V as the effect size).

use super::spill::{Merge, Spilled};
use statrs::distribution::{ChiSquared, ContinuousCDF};
use std::sync::Arc;

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
/// kept as such (half the memory of `f64`, the same order and ties), partly on disk past the
/// budget (`spill`); shot counts and answer fields are `f64`.
#[derive(Debug)]
pub enum Sample {
    F32(Vec<f32>),
    F64(Vec<f64>),
    Spilled(Spilled, Arc<tempfile::NamedTempFile>),
}

impl Sample {
    fn len(&self) -> usize {
        match self {
            Sample::F32(v) => v.len(),
            Sample::F64(v) => v.len(),
            Sample::Spilled(s, _) => s.len(),
        }
    }

    /// The values in ascending order: sorted in place (the test sorts what it is given rather
    /// than a copy of it), or merged back from disk (which empties the sample).
    fn sorted(&mut self) -> std::io::Result<Sorted<'_>> {
        Ok(match self {
            Sample::F32(v) => {
                v.sort_unstable_by(f32::total_cmp);
                Sorted::F32(v.iter())
            }
            Sample::F64(v) => {
                v.sort_unstable_by(f64::total_cmp);
                Sorted::F64(v.iter())
            }
            Sample::Spilled(s, file) => Sorted::Merge(Merge::new(std::mem::take(s), file.clone())?),
        })
    }
}

/// A sample's values in ascending order, as `f64`.
enum Sorted<'a> {
    F32(std::slice::Iter<'a, f32>),
    F64(std::slice::Iter<'a, f64>),
    Merge(Merge),
}

impl Sorted<'_> {
    /// The read error that ended a merge early, if one did.
    fn error(self) -> std::io::Result<()> {
        match self {
            Sorted::Merge(Merge { error: Some(e), .. }) => Err(e),
            _ => Ok(()),
        }
    }
}

impl Iterator for Sorted<'_> {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        match self {
            Sorted::F32(it) => it.next().map(|x| f64::from(*x)),
            Sorted::F64(it) => it.next().copied(),
            Sorted::Merge(m) => m.next().map(f64::from),
        }
    }
}

/// Two-sample KS test (Stephens' small-sample correction of λ); sorts both samples in place
/// (or merges them back from disk). Err: a spilled sample could not be read back.
pub fn ks_two_sample(a: &mut Sample, b: &mut Sample) -> std::io::Result<Option<TestResult>> {
    let (la, lb) = (a.len(), b.len());
    if la == 0 || lb == 0 {
        return Ok(None);
    }
    let (na, nb) = (la as f64, lb as f64);
    let (mut xs, mut ys) = (a.sorted()?, b.sorted()?);
    let (mut x, mut y) = (xs.next(), ys.next());
    let (mut i, mut j, mut d) = (0usize, 0usize, 0f64);
    while let (Some(p), Some(q)) = (x, y) {
        let m = p.min(q);
        let before = (i, j);
        while x.is_some_and(|v| v <= m) {
            i += 1;
            x = xs.next();
        }
        while y.is_some_and(|v| v <= m) {
            j += 1;
            y = ys.next();
        }
        if (i, j) == before {
            // Both at NaN, which compares with nothing: D can no longer grow.
            break;
        }
        d = d.max((i as f64 / na - j as f64 / nb).abs());
    }
    xs.error()?;
    ys.error()?;
    let en = (na * nb / (na + nb)).sqrt();
    let p = kolmogorov_q((en + 0.12 + 0.11 / en) * d);
    Ok(Some(TestResult {
        test: "ks_2samp",
        n_a: la as u64,
        n_b: lb as u64,
        statistic: d,
        p_value: p,
        effect_size: d,
    }))
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
        let r = ks_two_sample(&mut Sample::F64(a.clone()), &mut Sample::F64(b))
            .unwrap()
            .unwrap();
        assert!(
            (r.statistic - 0.5).abs() < 0.01 && r.p_value < 1e-10,
            "{r:?}"
        );
        let same = ks_two_sample(&mut Sample::F64(a.clone()), &mut Sample::F64(a.clone()))
            .unwrap()
            .unwrap();
        assert!(same.statistic == 0.0 && same.p_value > 0.99);
        // 32-bit samples, given unsorted, test as their 64-bit values do.
        let a32: Vec<f32> = a.iter().rev().map(|x| *x as f32).collect();
        let b64: Vec<f64> = (0..150).map(|i| 0.3 + i as f64 / 300.0).collect();
        let wide = ks_two_sample(
            &mut Sample::F64(a32.iter().map(|x| f64::from(*x)).collect()),
            &mut Sample::F64(b64.clone()),
        );
        let narrow = ks_two_sample(&mut Sample::F32(a32), &mut Sample::F64(b64));
        assert_eq!(wide.unwrap(), narrow.unwrap());
    }

    #[test]
    fn a_sample_partly_on_disk_tests_as_the_same_values_in_memory() {
        let a: Vec<f32> = (0..5_000)
            .map(|i| ((i * 7_919) % 1_000) as f32 / 100.0)
            .collect();
        let b: Vec<f32> = (0..3_000)
            .map(|i| ((i * 104_729) % 997) as f32 / 90.0)
            .collect();
        let mut file = super::super::spill::SpillFile::default();
        let mut s = Spilled::default();
        for chunk in a.chunks(1_200) {
            s.held.extend_from_slice(chunk);
            file.write(&mut s).unwrap();
        }
        s.held.extend_from_slice(&a[..10]);
        let mut all = a.clone();
        all.extend_from_slice(&a[..10]);
        let file = file.into_shared().unwrap();
        let memory = ks_two_sample(&mut Sample::F32(all), &mut Sample::F32(b.clone()));
        let disk = ks_two_sample(&mut Sample::Spilled(s, file), &mut Sample::F32(b));
        let (memory, disk) = (memory.unwrap().unwrap(), disk.unwrap().unwrap());
        assert_eq!(memory, disk);
        assert!(memory.statistic > 0.05 && memory.n_a == 5_010, "{memory:?}");
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
