//! Colour of a text region, per pixel of its strokes (MVFNDB §3.1 measures text pixels, not the
//! background).
//!
//! Rule (written down because the result depends on it): the pixels of the region's bounding box
//! and of a margin around it (a third of the box height) are clustered into up to 5 colours
//! (k-means in CIE Lab, seeded at lightness quantiles; 8 when no cluster is left for the text).
//! Detection boxes fit the ink, so the margin shows background only: a cluster spread over the
//! margin is background (bars, gradients, a caption box); text clusters stay inside the box.
//! Of the others, the text fill is the cluster least in contact with the background: an outline or a
//! shadow sits between fill and background, and anti-aliased edge pixels touch the background,
//! while the fill's pixels touch only the outline or edge. Nothing assumes dark-on-light or
//! light-on-dark. The dominant colour is taken from the fill's core pixels (those whose four
//! neighbours are also fill), which JPEG chroma blur and anti-aliasing leave pure.
//! Ink of the background's own colour (black text outlined in white over a dark scene, green text
//! outlined over a green bar) falls in background clusters, and the outline would be taken for
//! the fill. Such ink is cut off from the background by its outline: when the would-be fill
//! borders the background, the pixels it encloses are the ink if there are at least half as many
//! of them as of it (a letter's holes, the only other such pixels, are far fewer).

mod kmeans;

use image::RgbImage;
use kmeans::{kmeans, lab};
use palette::{FromColor, Hsv, Srgb};

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

/// Population standard deviation (0 for none).
fn std_dev(v: &[f32]) -> f32 {
    let n = v.len().max(1) as f32;
    let m = v.iter().sum::<f32>() / n;
    (v.iter().map(|x| (x - m).powi(2)).sum::<f32>() / n).sqrt()
}

/// Measures the text colour inside the axis-aligned box (x0, y0)–(x1, y1) of `img`.
pub fn measure(img: &RgbImage, bx0: u32, by0: u32, bx1: u32, by1: u32) -> RegionColour {
    let (bx1, by1) = (bx1.min(img.width()), by1.min(img.height()));
    if bx1 <= bx0 + 2 || by1 <= by0 + 2 {
        return RegionColour::default();
    }
    let patch = Patch::around(img, (bx0, by0, bx1, by1));
    let (assign, roles) = clusters(&patch);
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
        let step = crate::profile::span("colour.lab");
        let labs = px.iter().map(|p| lab(*p)).collect();
        drop(step);
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

/// Clusters per patch, and the count tried when the text found no cluster of its own.
const K: usize = 5;
const K_MERGED: usize = 8;

/// The patch's clusters and their roles. Five colours separate ink, outline and background in
/// most patches; where the margin shows several background colours (bars, a scene) the ink can
/// share a cluster with one of them (red ink beside a magenta bar) and no cluster is left for the
/// text: then more clusters are tried.
fn clusters(patch: &Patch) -> (Vec<usize>, Roles) {
    let _step = crate::profile::span("colour.clusters");
    let n = patch.px.len();
    let assign = kmeans(&patch.labs, K.min(n));
    let roles = cluster_roles(patch, &assign, K.min(n));
    if roles.own_cluster || n <= K {
        return (assign, roles);
    }
    let more = kmeans(&patch.labs, K_MERGED.min(n));
    let more_roles = cluster_roles(patch, &more, K_MERGED.min(n));
    // Kept only if they give the text its own cluster: otherwise (a busy scene seen through a
    // translucent box, all clusters in the margin) neither guess is better, and the first stays.
    match more_roles.own_cluster {
        true => (more, more_roles),
        false => (assign, roles),
    }
}

/// What the k-means clusters are: which are background, which one is the text fill, and the
/// largest background one.
struct Roles {
    is_bg: Vec<bool>,
    text: usize,
    bg: usize,
    /// Set when the ink is enclosed by the outline (cluster `text`) and of background colours:
    /// per pixel, whether it is such ink.
    enclosed_ink: Option<Vec<bool>>,
    /// Whether the text is a cluster of its own (not background, not specks).
    own_cluster: bool,
}

impl Roles {
    /// Whether pixel i is of the text's colour: ink, in the box or (a cluster's) beyond it.
    #[inline]
    fn is_fill(&self, assign: &[usize], i: usize) -> bool {
        match &self.enclosed_ink {
            Some(ink) => ink[i],
            None => assign[i] == self.text,
        }
    }

    /// Whether pixel i is a text pixel inside the box.
    #[inline]
    fn is_text(&self, p: &Patch, assign: &[usize], i: usize) -> bool {
        self.is_fill(assign, i) && p.inside(i)
    }
}

/// Outline pixels per enclosed ink pixel at most for the ink to be taken: a 4-px outline around
/// 5-px strokes has about 1.6; the holes of plain text are a fifth of its fill or less.
const MAX_OUTLINE_PER_INK: f64 = 2.0;
/// Share of its pixels with a background neighbour above which the would-be fill may be an
/// outline (1–4 px: a half or more) or plain text (a fifth or more), below which it is the fill
/// inside an outline (almost none).
const MIN_BG_CONTACT: f64 = 0.15;

/// When the would-be fill `text` borders the background and encloses pixels (of any cluster) the
/// patch's border cannot reach without crossing it, and those outnumber it enough to be its ink
/// rather than a letter's holes: per pixel, whether it is such ink.
fn enclosed_ink(p: &Patch, assign: &[usize], is_bg: &[bool], text: usize) -> Option<Vec<bool>> {
    let n = p.px.len();
    let (mut fill, mut contact) = (0usize, 0usize);
    for i in (0..n).filter(|&i| assign[i] == text) {
        fill += 1;
        let (nb, nn) = p.neighbours(i);
        contact += usize::from(nb[..nn].iter().any(|&j| is_bg[assign[j]]));
    }
    if is_bg[text] || (contact as f64) < MIN_BG_CONTACT * fill as f64 {
        return None;
    }
    let mut reached = vec![false; n];
    let mut stack: Vec<usize> = (0..n)
        .filter(|&i| {
            let (x, y) = (i % p.w, i / p.w);
            (x == 0 || y == 0 || x + 1 == p.w || y + 1 == p.h) && assign[i] != text
        })
        .collect();
    for &i in &stack {
        reached[i] = true;
    }
    while let Some(i) = stack.pop() {
        let (nb, nn) = p.neighbours(i);
        for &j in &nb[..nn] {
            if !reached[j] && assign[j] != text {
                reached[j] = true;
                stack.push(j);
            }
        }
    }
    let ink: Vec<bool> = (0..n)
        .map(|i| assign[i] != text && !reached[i] && p.inside(i))
        .collect();
    let count = ink.iter().filter(|x| **x).count();
    (count as f64 * MAX_OUTLINE_PER_INK >= fill as f64 && count * 33 >= n).then_some(ink)
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
    let (text, own_cluster) = fill_cluster(p, assign, &is_bg, &share, &margin_frac);
    let bg = (0..k)
        .filter(|&c| is_bg[c])
        .max_by(|&a, &b| share[a].total_cmp(&share[b]))
        .unwrap_or(0);
    let enclosed_ink = enclosed_ink(p, assign, &is_bg, text);
    Roles {
        is_bg,
        text,
        bg,
        enclosed_ink,
        own_cluster,
    }
}

/// The text fill: of the clusters that are not background (and not specks), the one least in
/// contact with the background; failing any, the one least spread over the margin (and false).
fn fill_cluster(
    p: &Patch,
    assign: &[usize],
    is_bg: &[bool],
    share: &[f64],
    margin_frac: &[f64],
) -> (usize, bool) {
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
        let c = (0..k)
            .filter(|&c| share[c] > 0.0)
            .min_by(|&a, &b| margin_frac[a].total_cmp(&margin_frac[b]))
            .unwrap_or(0);
        (c, false)
    } else {
        let c = candidates
            .iter()
            .min_by(|&&a, &&b| {
                (touch[a] / count[a].max(1.0)).total_cmp(&(touch[b] / count[b].max(1.0)))
            })
            .expect("non-empty");
        (*c, true)
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
    let bg = roles.bg;
    // Purity is distance from what the ink blends with: the background, or the outline around
    // enclosed background-coloured ink.
    let bg_c = match roles.enclosed_ink {
        Some(_) => centroid(p, |i| assign[i] == roles.text),
        None => centroid(p, |i| roles.is_bg[assign[i]]),
    };
    let mut stroke: Vec<StrokePixel> = vec![];
    let mut bgp = BgPixels::default();
    for i in 0..p.px.len() {
        let is_text = roles.is_text(p, assign, i);
        if assign[i] != bg && !is_text {
            continue;
        }
        let (h_, s_, v_) = hsv(p.px[i]);
        if is_text {
            out.stroke_pixels += 1;
            out.sat_hist[((s_ * SV_BINS as f32) as usize).min(SV_BINS - 1)] += 1;
            out.val_hist[((v_ * SV_BINS as f32) as usize).min(SV_BINS - 1)] += 1;
            if s_ >= MIN_CHROMA && v_ >= MIN_CHROMA {
                out.hue_hist[((h_ / 5.0) as usize).min(HUE_BINS - 1)] += 1;
            }
            let (nb, nn) = p.neighbours(i);
            let core = nb[..nn].iter().all(|&j| roles.is_fill(assign, j));
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

/// Centroid in Lab of the pixels `of` picks (the background's: the text pixels farthest from it
/// are the least mixed with it, as chroma subsampling and anti-aliasing blend thin strokes with
/// what is around them).
fn centroid(p: &Patch, of: impl Fn(usize) -> bool) -> [f32; 3] {
    let mut bg_c = [0f64; 3];
    let mut bg_n = 0f64;
    for i in 0..p.px.len() {
        if of(i) {
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
    out.val_spread = std_dev(&core_v);
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
    out.bg_uniformity = std_dev(&bg.l);
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
    fn background_coloured_ink_inside_its_outline_is_the_text() {
        let green = hsv_rgb(120.0, 0.8, 0.8);
        let purple = hsv_rgb(280.0, 0.65, 0.85);
        for (fill, bg, outline, want) in [
            ([12, 12, 12], [16, 16, 16], [255, 255, 255], "black"),
            ([12, 12, 12], [16, 16, 16], [32, 80, 224], "black"),
            (green, green, purple, "green"),
            ([250, 250, 250], [245, 245, 245], [0, 0, 0], "white"),
        ] {
            let c = measure(&synthetic(fill, bg, Some(outline)), 18, 18, 142, 42);
            assert_eq!(
                c.text_color, want,
                "fill {fill:?} bg {bg:?} outline {outline:?}"
            );
        }
    }

    /// Plain 10×20 glyphs, 3-px strokes around a background-coloured hole (an "O"): the holes
    /// are enclosed too, but the fill is the text.
    #[test]
    fn the_holes_of_plain_letters_are_not_the_text() {
        let (red, bg) = (hsv_rgb(2.0, 0.9, 0.95), [20, 20, 20]);
        let img = RgbImage::from_fn(160, 60, |x, y| {
            let glyph = (20..40).contains(&y) && (x % 12) < 10 && (20..140).contains(&x);
            let hole = (23..37).contains(&y) && (3..7).contains(&(x % 12));
            image::Rgb(if glyph && !hole { red } else { bg })
        });
        let c = measure(&img, 20, 20, 140, 40);
        assert_eq!(c.text_color, "red");
    }

    #[test]
    fn names_and_hue_bins() {
        assert_eq!(colour_name(2.0, 0.9, 0.9), "red");
        assert_eq!(colour_name(28.0, 0.9, 0.9), "orange");
        assert_eq!(colour_name(0.0, 0.05, 0.95), "white");
        assert_eq!(colour_name(200.0, 0.9, 0.1), "black");
        let (m, s) = hue_stats(&[358.0, 2.0]);
        assert!(!(0.5..=359.5).contains(&m) && s < 3.0, "{m} {s}");
    }
}
