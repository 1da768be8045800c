//! Colour of a text region, per pixel of its strokes (MVFNDB §3.1 measures text pixels, not the
//! background).
//!
//! Rule (written down because the result depends on it): the pixels of the region's bounding box
//! and of a margin around it (a third of the box height) are clustered into up to 5 colours
//! (k-means in CIE Lab, seeded at lightness quantiles). Detection boxes fit the ink, so the margin
//! shows background only: a cluster spread over the margin is background (bars, gradients, a
//! caption box); text clusters stay inside the box.
//! Of the others, the text fill is the cluster least in contact with the background: an outline or a
//! shadow sits between fill and background, and anti-aliased edge pixels touch the background,
//! while the fill's pixels touch only the outline or edge. Nothing assumes dark-on-light or
//! light-on-dark. The dominant colour is taken from the fill's core pixels (those whose four
//! neighbours are also fill), which JPEG chroma blur and anti-aliasing leave pure.

use image::RgbImage;
use palette::{FromColor, Hsv, IntoColor, Lab, Srgb};

pub const HUE_BINS: usize = 72; // 5° bins: 0–5° and 25–30° are distinct
pub const SV_BINS: usize = 20;
/// Pixels below this saturation or value have no meaningful hue; they are not counted in the
/// hue histogram (they would all pile up at 0°, i.e. "red").
pub const MIN_CHROMA: f32 = 0.15;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegionColour {
    pub text_h: f32,
    pub text_s: f32,
    pub text_v: f32,
    pub text_color: String,
    pub bg_h: f32,
    pub bg_s: f32,
    pub bg_v: f32,
    pub bg_color: String,
    pub stroke_pixels: u32,
    pub hue_hist: Vec<u32>,
    pub sat_hist: Vec<u32>,
    pub val_hist: Vec<u32>,
    /// Spread of the fill: circular std of hue (degrees) and std of value.
    pub hue_spread: f32,
    pub val_spread: f32,
    /// Std of the background cluster's lightness: low for a caption box.
    pub bg_uniformity: f32,
}

/// Name of a colour in a small fixed palette.
pub fn colour_name(h: f32, s: f32, v: f32) -> &'static str {
    if v < 0.2 {
        return "black";
    }
    if s < MIN_CHROMA {
        return if v > 0.8 { "white" } else { "gray" };
    }
    match h {
        h if !(15.0..345.0).contains(&h) => "red",
        h if h < 45.0 => "orange",
        h if h < 70.0 => "yellow",
        h if h < 170.0 => "green",
        h if h < 200.0 => "cyan",
        h if h < 260.0 => "blue",
        h if h < 300.0 => "purple",
        _ => "pink",
    }
}

fn hsv(p: [u8; 3]) -> (f32, f32, f32) {
    let c: Hsv = Hsv::from_color(Srgb::new(p[0], p[1], p[2]).into_format::<f32>());
    (c.hue.into_positive_degrees(), c.saturation, c.value)
}

/// Circular mean of hues (degrees) and their circular standard deviation.
fn hue_stats(hues: &[f32]) -> (f32, f32) {
    if hues.is_empty() {
        return (0.0, 0.0);
    }
    let (s, c) = hues.iter().fold((0f64, 0f64), |(s, c), h| {
        let r = (*h as f64).to_radians();
        (s + r.sin(), c + r.cos())
    });
    let n = hues.len() as f64;
    let mean = s.atan2(c).to_degrees().rem_euclid(360.0);
    let r = ((s / n).powi(2) + (c / n).powi(2)).sqrt().clamp(1e-12, 1.0);
    (mean as f32, (-2.0 * r.ln()).sqrt().to_degrees() as f32)
}

fn median(mut v: Vec<f32>) -> f32 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// sRGB to CIE Lab through a table of linearised channel values (the power function per pixel
/// was most of the colour analysis' time).
fn lab(p: [u8; 3]) -> [f32; 3] {
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
fn kmeans(labs: &[[f32; 3]], k: usize) -> Vec<usize> {
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
            let best = (0..k)
                .min_by(|&a, &b| {
                    let d = |c: &[f32; 3]| {
                        (p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2) + (p[2] - c[2]).powi(2)
                    };
                    d(&centres[a]).total_cmp(&d(&centres[b]))
                })
                .unwrap_or(0);
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

/// Measures the text colour inside the axis-aligned box (x0, y0)–(x1, y1) of `img`.
pub fn measure(img: &RgbImage, bx0: u32, by0: u32, bx1: u32, by1: u32) -> RegionColour {
    let (bx1, by1) = (bx1.min(img.width()), by1.min(img.height()));
    if bx1 <= bx0 + 2 || by1 <= by0 + 2 {
        return RegionColour::default();
    }
    let patch = Patch::around(img, (bx0, by0, bx1, by1));
    let k = 5.min(patch.px.len());
    let assign = kmeans(&patch.labs, k);
    let roles = cluster_roles(&patch, &assign, k);
    let mut out = RegionColour {
        hue_hist: vec![0; HUE_BINS],
        sat_hist: vec![0; SV_BINS],
        val_hist: vec![0; SV_BINS],
        ..Default::default()
    };
    let (stroke, bg) = split_pixels(&patch, &assign, &roles, &mut out);
    set_text_colour(&mut out, &stroke);
    set_bg_colour(&mut out, bg);
    out
}

/// The pixels one region's colour is measured on: its box plus a margin, row by row.
struct Patch {
    /// Top-left corner of box + margin in the image, and its size.
    x0: u32,
    y0: u32,
    w: usize,
    h: usize,
    /// The detection box (x0, y0, x1, y1) in the image.
    bx: (u32, u32, u32, u32),
    px: Vec<[u8; 3]>,
    labs: Vec<[f32; 3]>,
}

impl Patch {
    fn around(img: &RgbImage, bx: (u32, u32, u32, u32)) -> Self {
        let (bx0, by0, bx1, by1) = bx;
        // Detection boxes fit the ink tightly, so the analysis looks at the box plus a margin of a
        // third of its height around it: what lies in the margin is background.
        let m = ((by1 - by0) / 3).max(3);
        let (x0, y0) = (bx0.saturating_sub(m), by0.saturating_sub(m));
        let (x1, y1) = ((bx1 + m).min(img.width()), (by1 + m).min(img.height()));
        let (w, h) = ((x1 - x0) as usize, (y1 - y0) as usize);
        let px: Vec<[u8; 3]> = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .map(|(x, y)| img.get_pixel(x0 + x as u32, y0 + y as u32).0)
            .collect();
        let labs = px.iter().map(|p| lab(*p)).collect();
        Self {
            x0,
            y0,
            w,
            h,
            bx,
            px,
            labs,
        }
    }

    /// Whether pixel i lies in the detection box (not in the margin).
    #[inline]
    fn inside(&self, i: usize) -> bool {
        let (bx0, by0, bx1, by1) = self.bx;
        let (x, y) = ((i % self.w) as u32 + self.x0, (i / self.w) as u32 + self.y0);
        x >= bx0 && x < bx1 && y >= by0 && y < by1
    }

    /// The 4-neighbours of pixel i, and how many there are (no allocation: this runs twice per
    /// pixel of every region).
    #[inline]
    fn neighbours(&self, i: usize) -> ([usize; 4], usize) {
        let (w, h) = (self.w, self.h);
        let (x, y) = (i % w, i / w);
        let mut v = [0usize; 4];
        let mut n = 0;
        for (ok, j) in [
            (x > 0, i.wrapping_sub(1)),
            (x + 1 < w, i + 1),
            (y > 0, i.wrapping_sub(w)),
            (y + 1 < h, i + w),
        ] {
            if ok {
                v[n] = j;
                n += 1;
            }
        }
        (v, n)
    }
}

/// What the k-means clusters are: which are background, which one is the text fill, and the
/// largest background one.
struct Roles {
    is_bg: Vec<bool>,
    text: usize,
    bg: usize,
}

fn cluster_roles(p: &Patch, assign: &[usize], k: usize) -> Roles {
    let n = p.px.len() as f64;
    let margin = |i: usize| !p.inside(i);
    let margin_share = (0..p.px.len()).filter(|&i| margin(i)).count() as f64 / n;
    let mut share = vec![0f64; k];
    let mut in_margin = vec![0f64; k];
    for (i, &c) in assign.iter().enumerate() {
        share[c] += 1.0 / n;
        if margin(i) {
            in_margin[c] += 1.0;
        }
    }
    let margin_frac: Vec<f64> = (0..k)
        .map(|c| in_margin[c] / (share[c] * n).max(1.0))
        .collect();
    // Background is spread over the margin about as much as over the box; text barely reaches it
    // (an outline or a shadow a little, hence the factor).
    let is_bg: Vec<bool> = (0..k)
        .map(|c| share[c] > 0.0 && margin_frac[c] >= 0.4 * margin_share)
        .collect();
    let text = fill_cluster(p, assign, &is_bg, &share, &margin_frac);
    let bg = (0..k)
        .filter(|&c| is_bg[c])
        .max_by(|&a, &b| share[a].total_cmp(&share[b]))
        .unwrap_or(0);
    Roles { is_bg, text, bg }
}

/// The text fill: of the clusters that are not background (and not specks), the one least in
/// contact with the background; failing any, the one least spread over the margin.
fn fill_cluster(
    p: &Patch,
    assign: &[usize],
    is_bg: &[bool],
    share: &[f64],
    margin_frac: &[f64],
) -> usize {
    let k = share.len();
    // Contact with the background: share of a cluster's pixels with a background neighbour.
    let mut touch = vec![0f64; k];
    let mut count = vec![0f64; k];
    for i in 0..p.px.len() {
        let c = assign[i];
        count[c] += 1.0;
        let (nb, nn) = p.neighbours(i);
        if nb[..nn].iter().any(|&j| is_bg[assign[j]]) {
            touch[c] += 1.0;
        }
    }
    let candidates: Vec<usize> = (0..k).filter(|&c| !is_bg[c] && share[c] >= 0.03).collect();
    if candidates.is_empty() {
        (0..k)
            .filter(|&c| share[c] > 0.0)
            .min_by(|&a, &b| margin_frac[a].total_cmp(&margin_frac[b]))
            .unwrap_or(0)
    } else {
        *candidates
            .iter()
            .min_by(|&&a, &&b| {
                (touch[a] / count[a].max(1.0)).total_cmp(&(touch[b] / count[b].max(1.0)))
            })
            .expect("non-empty")
    }
}

/// A text pixel: (distance to the background centroid in Lab, h, s, v, core).
type StrokePixel = (f32, f32, f32, f32, bool);

/// HSV values and Lab lightness of the main background cluster's pixels.
#[derive(Default)]
struct BgPixels {
    h: Vec<f32>,
    s: Vec<f32>,
    v: Vec<f32>,
    l: Vec<f32>,
}

/// One pass over the patch: the text pixels inside the box go into `out`'s histograms and the
/// returned strokes, the main background cluster's pixels into the returned `BgPixels`.
fn split_pixels(
    p: &Patch,
    assign: &[usize],
    roles: &Roles,
    out: &mut RegionColour,
) -> (Vec<StrokePixel>, BgPixels) {
    let (text, bg) = (roles.text, roles.bg);
    let bg_c = bg_centroid(p, assign, &roles.is_bg);
    let mut stroke: Vec<StrokePixel> = vec![];
    let mut bgp = BgPixels::default();
    for i in 0..p.px.len() {
        if assign[i] != bg && !(assign[i] == text && p.inside(i)) {
            continue;
        }
        let (h_, s_, v_) = hsv(p.px[i]);
        if assign[i] == text && p.inside(i) {
            out.stroke_pixels += 1;
            out.sat_hist[((s_ * SV_BINS as f32) as usize).min(SV_BINS - 1)] += 1;
            out.val_hist[((v_ * SV_BINS as f32) as usize).min(SV_BINS - 1)] += 1;
            if s_ >= MIN_CHROMA && v_ >= MIN_CHROMA {
                out.hue_hist[((h_ / 5.0) as usize).min(HUE_BINS - 1)] += 1;
            }
            let (nb, nn) = p.neighbours(i);
            let core = nb[..nn].iter().all(|&j| assign[j] == text);
            let l = p.labs[i];
            let dist = (0..3).map(|c| (l[c] - bg_c[c]).powi(2)).sum::<f32>();
            stroke.push((dist, h_, s_, v_, core));
        } else if assign[i] == bg {
            if s_ >= MIN_CHROMA && v_ >= MIN_CHROMA {
                bgp.h.push(h_);
            }
            bgp.s.push(s_);
            bgp.v.push(v_);
            bgp.l.push(p.labs[i][0]);
        }
    }
    (stroke, bgp)
}

/// Background centroid in Lab: the text pixels farthest from it are the least mixed with it
/// (chroma subsampling and anti-aliasing blend thin strokes with what is around them).
fn bg_centroid(p: &Patch, assign: &[usize], is_bg: &[bool]) -> [f32; 3] {
    let mut bg_c = [0f64; 3];
    let mut bg_n = 0f64;
    for i in 0..p.px.len() {
        if is_bg[assign[i]] {
            for (acc, v) in bg_c.iter_mut().zip(p.labs[i]) {
                *acc += v as f64;
            }
            bg_n += 1.0;
        }
    }
    bg_c.map(|v| (v / bg_n.max(1.0)) as f32)
}

/// The dominant text colour and its spread, from the purest third of the stroke pixels (core
/// ones when enough).
fn set_text_colour(out: &mut RegionColour, stroke: &[StrokePixel]) {
    let cores = stroke.iter().filter(|p| p.4).count();
    let mut pure: Vec<_> = stroke
        .iter()
        .filter(|p| p.4 || cores < 20)
        .copied()
        .collect();
    pure.sort_by(|a, b| b.0.total_cmp(&a.0));
    pure.truncate((pure.len() / 3).max(10.min(pure.len())));
    let core_h: Vec<f32> = pure
        .iter()
        .filter(|p| p.2 >= MIN_CHROMA && p.3 >= MIN_CHROMA)
        .map(|p| p.1)
        .collect();
    let core_s: Vec<f32> = pure.iter().map(|p| p.2).collect();
    let core_v: Vec<f32> = pure.iter().map(|p| p.3).collect();
    let (hm, hs) = hue_stats(&core_h);
    out.text_h = hm;
    out.hue_spread = hs;
    let vm = core_v.iter().sum::<f32>() / core_v.len().max(1) as f32;
    out.val_spread =
        (core_v.iter().map(|v| (v - vm).powi(2)).sum::<f32>() / core_v.len().max(1) as f32).sqrt();
    out.text_s = median(core_s);
    out.text_v = median(core_v);
    out.text_color = colour_name(out.text_h, out.text_s, out.text_v).to_string();
}

/// The background's colour and how uniform its lightness is.
fn set_bg_colour(out: &mut RegionColour, bg: BgPixels) {
    out.bg_h = hue_stats(&bg.h).0;
    out.bg_s = median(bg.s);
    out.bg_v = median(bg.v);
    out.bg_color = colour_name(out.bg_h, out.bg_s, out.bg_v).to_string();
    let lm = bg.l.iter().sum::<f32>() / bg.l.len().max(1) as f32;
    out.bg_uniformity =
        (bg.l.iter().map(|l| (l - lm).powi(2)).sum::<f32>() / bg.l.len().max(1) as f32).sqrt();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hsv_rgb(h: f32, s: f32, v: f32) -> [u8; 3] {
        let c: Srgb = Srgb::from_color(Hsv::new(h, s, v));
        let c: Srgb<u8> = c.into_format();
        [c.red, c.green, c.blue]
    }

    /// A 160×60 frame: background, glyph-like bars (4 px wide) in rows 20–40, optionally a 2-px
    /// outline around them; the detection box is the glyphs' extent.
    fn synthetic(fill: [u8; 3], bg: [u8; 3], outline: Option<[u8; 3]>) -> RgbImage {
        RgbImage::from_fn(160, 60, |x, y| {
            let in_glyph =
                (20..40).contains(&y) && (x % 12) >= 4 && (x % 12) < 8 && (20..140).contains(&x);
            let near_glyph =
                (18..42).contains(&y) && (x % 12) >= 2 && (x % 12) < 10 && (18..142).contains(&x);
            image::Rgb(if in_glyph {
                fill
            } else if near_glyph && outline.is_some() {
                outline.unwrap()
            } else {
                bg
            })
        })
    }

    #[test]
    fn fill_not_outline_not_box_whatever_the_contrast() {
        let red = hsv_rgb(2.0, 0.9, 0.95);
        let orange = hsv_rgb(28.0, 0.85, 0.95);
        for (fill, bg, outline, want) in [
            (red, [240, 240, 240], None, 2.0),
            (red, [20, 20, 20], None, 2.0),
            (orange, [16, 16, 16], Some([0, 0, 0]), 28.0),
            (orange, [250, 250, 250], Some([0, 0, 0]), 28.0),
            (red, [255, 255, 255], Some([40, 40, 40]), 2.0),
        ] {
            let c = measure(&synthetic(fill, bg, outline), 20, 20, 140, 40);
            let d = ((c.text_h - want + 180.0).rem_euclid(360.0) - 180.0).abs();
            assert!(
                d <= 3.0,
                "fill hue {} want {want} (bg {bg:?} outline {outline:?})",
                c.text_h
            );
            assert_eq!(
                c.hue_hist
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, n)| **n)
                    .unwrap()
                    .0,
                (want / 5.0) as usize
            );
        }
    }

    #[test]
    fn names_and_hue_bins() {
        assert_eq!(colour_name(2.0, 0.9, 0.9), "red");
        assert_eq!(colour_name(28.0, 0.9, 0.9), "orange");
        assert_eq!(colour_name(0.0, 0.05, 0.95), "white");
        assert_eq!(colour_name(200.0, 0.9, 0.1), "black");
        let (m, s) = hue_stats(&[358.0, 2.0]);
        assert!((m < 0.5 || m > 359.5) && s < 3.0, "{m} {s}");
    }
}
