//! The perceptual hash of a frame: 64 bits from the low frequencies of its 2-D DCT (the
//! classic pHash). The frame is reduced to a 32×32 grey thumbnail (area averaging), transformed,
//! and each of the 8×8 coefficients just above the constant term says whether it is above their
//! median. Scaling and re-encoding barely move those coefficients, and a crop of a few per cent
//! moves a few bits, where a byte hash or a pixel difference would change completely.

use image::{DynamicImage, GrayImage};

/// The side of the grey thumbnail the DCT runs on.
const SIDE: usize = 32;
/// Frames whose thumbnail varies less than this (standard deviation, grey levels 0–255) are
/// flat (black, fades, a plain slate): their hashes would match every other flat frame.
pub const MIN_CONTRAST: f64 = 2.0;

/// cos(π(2n+1)k / 2N) for the coefficients 1..=8 used (the DCT-II basis).
fn basis() -> [[f64; SIDE]; 8] {
    let mut b = [[0.0; SIDE]; 8];
    for (k, row) in b.iter_mut().enumerate() {
        for (n, v) in row.iter_mut().enumerate() {
            *v = (std::f64::consts::PI * (2 * n + 1) as f64 * (k + 1) as f64 / (2 * SIDE) as f64)
                .cos();
        }
    }
    b
}

/// The 64-bit hash of an image, or none when it is flat (`MIN_CONTRAST`).
pub fn phash(img: &DynamicImage) -> Option<u64> {
    phash_grey(&img.to_luma8())
}

/// The centre crops hashed besides the whole frame, as their side's share of the frame's: a
/// copy cropped evenly by up to ~12 % a side is near one of them (a crop scales the picture up,
/// which moves the DCT's coefficients more than a re-encode does).
pub const VIEWS: [f64; 3] = [1.0, 0.9, 0.8];

/// The hashes of a frame's `VIEWS`, the whole frame first; none when the frame is flat.
pub fn frame_hashes(img: &DynamicImage) -> Vec<u64> {
    let grey = img.to_luma8();
    let Some(full) = phash_grey(&grey) else {
        return vec![];
    };
    let (w, h) = grey.dimensions();
    let mut out = vec![full];
    for s in &VIEWS[1..] {
        let (cw, ch) = ((w as f64 * s).round() as u32, (h as f64 * s).round() as u32);
        let view = image::imageops::crop_imm(&grey, (w - cw) / 2, (h - ch) / 2, cw, ch);
        out.extend(phash_grey(&view.to_image()));
    }
    out
}

fn phash_grey(grey: &GrayImage) -> Option<u64> {
    let small = image::imageops::thumbnail(grey, SIDE as u32, SIDE as u32);
    let px: Vec<f64> = small.pixels().map(|p| p.0[0] as f64).collect();
    if px.len() != SIDE * SIDE {
        return None;
    }
    let mean = px.iter().sum::<f64>() / px.len() as f64;
    let var = px.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / px.len() as f64;
    if var.sqrt() < MIN_CONTRAST {
        return None;
    }
    let b = basis();
    // Separable: the rows first (8 coefficients each), then the columns of that.
    let mut rows = [[0.0f64; 8]; SIDE];
    for (y, r) in rows.iter_mut().enumerate() {
        let line = &px[y * SIDE..(y + 1) * SIDE];
        for (k, c) in r.iter_mut().enumerate() {
            *c = line.iter().zip(&b[k]).map(|(p, w)| p * w).sum();
        }
    }
    let mut coeffs = Vec::with_capacity(64);
    for by in &b {
        for kx in 0..8 {
            coeffs.push(rows.iter().zip(by).map(|(r, w)| r[kx] * w).sum::<f64>());
        }
    }
    let mut sorted = coeffs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = (sorted[31] + sorted[32]) / 2.0;
    Some(
        coeffs
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > median)
            .fold(0u64, |h, (i, _)| h | (1 << i)),
    )
}

/// The `frame_hashes` of an encoded image (JPEG, PNG, …).
pub fn frame_hashes_bytes(data: &[u8]) -> Result<Vec<u64>, image::ImageError> {
    Ok(frame_hashes(&image::load_from_memory(data)?))
}

/// How many of the 64 bits differ.
pub fn distance(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage};

    /// A scene drawn at any size from the same continuous picture: a disc, bars and a ramp
    /// (`shift` moves everything, so two shifts are two different scenes).
    fn scene(w: u32, h: u32, shift: f64) -> DynamicImage {
        DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
            let (u, v) = (x as f64 / w as f64, y as f64 / h as f64);
            let disc = ((u - 0.3 - shift).powi(2) + (v - 0.4).powi(2)).sqrt() < 0.2;
            let bar = ((u * 5.0 + shift * 7.0).floor() as i64) % 2 == 0 && v > 0.7;
            let g = (255.0 * (1.0 - v)) as u8;
            match (disc, bar) {
                (true, _) => Rgb([230, 40, 40]),
                (_, true) => Rgb([20, 20, 200]),
                _ => Rgb([g / 2, g, 60]),
            }
        }))
    }

    /// Another picture altogether: a checkerboard and diagonal stripes.
    fn other(w: u32, h: u32) -> DynamicImage {
        DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
            let check = ((x * 6 / w) + (y * 4 / h)) % 2 == 0;
            let stripe = ((x + 2 * y) / 37) % 3 == 0;
            Rgb([
                if check { 240 } else { 10 },
                if stripe { 200 } else { 30 },
                90,
            ])
        }))
    }

    #[test]
    fn identical_images_are_at_distance_zero() {
        let a = phash(&scene(640, 360, 0.0)).unwrap();
        let b = phash(&scene(640, 360, 0.0)).unwrap();
        assert_eq!(distance(a, b), 0);
    }

    #[test]
    fn a_resized_or_reencoded_or_slightly_cropped_copy_is_near() {
        let a = phash(&scene(1280, 720, 0.0)).unwrap();
        let small = phash(&scene(320, 180, 0.0)).unwrap();
        assert!(distance(a, small) <= 4, "resized: {}", distance(a, small));
        // A JPEG round trip at low quality.
        let mut jpeg = vec![];
        scene(1280, 720, 0.0)
            .write_with_encoder(image::codecs::jpeg::JpegEncoder::new_with_quality(
                &mut jpeg, 30,
            ))
            .unwrap();
        let re = frame_hashes_bytes(&jpeg).unwrap()[0];
        assert!(distance(a, re) <= 4, "re-encoded: {}", distance(a, re));
        // 4 % off every side.
        let cropped = scene(1280, 720, 0.0).crop_imm(51, 29, 1178, 662);
        let c = phash(&cropped).unwrap();
        assert!(distance(a, c) <= 10, "cropped: {}", distance(a, c));
        // 10 % off every side: far from the whole frame, near its centre view.
        let cropped = scene(1280, 720, 0.0).crop_imm(128, 72, 1024, 576);
        let c = phash(&cropped).unwrap();
        let views = frame_hashes(&scene(1280, 720, 0.0));
        assert_eq!(views.len(), 3);
        assert_eq!(views[0], a);
        assert!(
            distance(views[2], c) <= 4,
            "centre view: {}",
            distance(views[2], c)
        );
        assert!(distance(a, c) > distance(views[2], c), "{}", distance(a, c));
    }

    #[test]
    fn different_images_are_far_and_flat_ones_have_no_hash() {
        let a = phash(&scene(640, 360, 0.0)).unwrap();
        let b = phash(&other(640, 360)).unwrap();
        let c = phash(&scene(640, 360, 0.25)).unwrap();
        assert!(distance(a, b) >= 20, "other picture: {}", distance(a, b));
        assert!(distance(a, c) >= 14, "moved scene: {}", distance(a, c));
        let black = DynamicImage::ImageRgb8(RgbImage::new(640, 360));
        assert_eq!(phash(&black), None);
        assert!(frame_hashes(&black).is_empty());
    }
}
