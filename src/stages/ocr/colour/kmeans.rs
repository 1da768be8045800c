//! The clusters a region's colour is measured on: pixels in CIE Lab, grouped by k-means seeded
//! at lightness quantiles (deterministic: the same patch always gives the same clusters).

use palette::{IntoColor, Lab, Srgb};

/// sRGB to CIE Lab through a table of linearised channel values (the power function per pixel
/// was most of the colour analysis' time).
pub(super) fn lab(p: [u8; 3]) -> [f32; 3] {
    static LINEAR: std::sync::OnceLock<[f32; 256]> = std::sync::OnceLock::new();
    let lin = LINEAR.get_or_init(|| {
        std::array::from_fn(|v| {
            Srgb::new(v as u8, 0, 0)
                .into_format::<f32>()
                .into_linear()
                .red
        })
    });
    let l: Lab = palette::LinSrgb::new(lin[p[0] as usize], lin[p[1] as usize], lin[p[2] as usize])
        .into_color();
    [l.l, l.a, l.b]
}

/// k-means, fitted on at most ~6000 evenly strided pixels, then every pixel assigned once.
pub(super) fn kmeans(labs: &[[f32; 3]], k: usize) -> Vec<usize> {
    let stride = labs.len().div_ceil(6000).max(1);
    let sample: Vec<[f32; 3]> = labs.iter().step_by(stride).copied().collect();
    let centres = kmeans_fit(&sample, k);
    labs.iter().map(|p| nearest(&centres, p)).collect()
}

fn nearest(centres: &[[f32; 3]], p: &[f32; 3]) -> usize {
    let d = |c: &[f32; 3]| (p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2) + (p[2] - c[2]).powi(2);
    (0..centres.len())
        .min_by(|&a, &b| d(&centres[a]).total_cmp(&d(&centres[b])))
        .unwrap_or(0)
}

fn kmeans_fit(labs: &[[f32; 3]], k: usize) -> Vec<[f32; 3]> {
    let mut by_l: Vec<usize> = (0..labs.len()).collect();
    by_l.sort_by(|&a, &b| labs[a][0].total_cmp(&labs[b][0]));
    let mut centres: Vec<[f32; 3]> = (0..k)
        .map(|i| labs[by_l[((2 * i + 1) * labs.len()) / (2 * k)]])
        .collect();
    let mut assign = vec![0usize; labs.len()];
    for _ in 0..12 {
        let mut changed = false;
        for (i, p) in labs.iter().enumerate() {
            let best = nearest(&centres, p);
            if assign[i] != best {
                assign[i] = best;
                changed = true;
            }
        }
        let mut sums = vec![[0f64; 4]; k];
        for (i, p) in labs.iter().enumerate() {
            let s = &mut sums[assign[i]];
            s[0] += p[0] as f64;
            s[1] += p[1] as f64;
            s[2] += p[2] as f64;
            s[3] += 1.0;
        }
        for (c, s) in centres.iter_mut().zip(&sums) {
            if s[3] > 0.0 {
                *c = [
                    (s[0] / s[3]) as f32,
                    (s[1] / s[3]) as f32,
                    (s[2] / s[3]) as f32,
                ];
            }
        }
        if !changed {
            break;
        }
    }
    centres
}
