//! Pixel operations the OCR pipeline needs, written to match what RapidOCR 1.4.4 gets from Pillow
//! and OpenCV: image files read by content (image, libjpeg-turbo for JPEG as Pillow does),
//! `cv2.resize` INTER_LINEAR bit for bit, `warpPerspective` INTER_CUBIC with replicated borders,
//! so boxes and crops compare one to one with RapidOCR. Reads image files; calls libturbojpeg.

use super::OcrError;
use image::{DynamicImage, ImageDecoder, ImageFormat, RgbImage};
use std::path::Path;

/// Loads an image by its content (not its extension), applies EXIF orientation, and turns it
/// into RGB the way RapidOCR 1.4.4's `LoadImage` does where that reads text (see `flatten`).
/// JPEGs are decoded by libjpeg-turbo (`decode_jpeg`), as Pillow decodes them for RapidOCR.
/// Where RapidOCR's loader loses the text, we do not copy it: palette images are expanded to
/// their colours (RapidOCR reads the palette indices as grey: the same pixels for a grey ramp
/// palette, the usual one of a page saved as 8-bit palette), CMYK is converted (RapidOCR takes
/// it for RGBA), 16-bit grey is scaled to 8 bits (RapidOCR passes the raw 16-bit values on), and
/// the EXIF orientation is applied (RapidOCR ignores it; both read upright text the same, and a
/// phone photo stored sideways is read here the way it is shown).
pub fn load_image(path: &Path) -> Result<RgbImage, OcrError> {
    let err = |error: image::ImageError| OcrError::Image {
        path: path.to_path_buf(),
        error,
    };
    // An unreadable file is reported as the I/O error it is (`ImageError::IoError` shows just it).
    let io = |e: std::io::Error| err(image::ImageError::IoError(e));
    let reader = image::ImageReader::open(path)
        .map_err(io)?
        .with_guessed_format()
        .map_err(io)?;
    // GIFs decode with an alpha channel but are palette pictures (PIL's mode "P"), not RGBA:
    // they keep their colours, transparent pixels over white.
    let format = reader.format();
    let gif = format == Some(ImageFormat::Gif);
    if format.is_none() {
        return Err(OcrError::NotAnImage {
            path: path.to_path_buf(),
        });
    }
    let mut decoder = reader.into_decoder().map_err(err)?;
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let turbo = match format {
        Some(ImageFormat::Jpeg) => decode_jpeg(&std::fs::read(path).map_err(io)?),
        _ => None,
    };
    let mut img = match turbo {
        Some(rgb) => DynamicImage::ImageRgb8(rgb),
        None => DynamicImage::from_decoder(decoder).map_err(err)?,
    };
    // Pillow opens a palette PNG as indices ("P") whatever its tRNS chunk says, and RapidOCR
    // never sees an alpha channel there; image-png expands a tRNS palette to RGBA, which
    // `flatten` would invert like a transparent RGBA picture.
    if format == Some(ImageFormat::Png) && png_is_palette(path) && img.color().has_alpha() {
        img = DynamicImage::ImageRgb8(img.to_rgb8());
    }
    img.apply_orientation(orientation);
    Ok(if gif { over_white(&img) } else { flatten(img) })
}

/// A YCbCr, RGB or grey JPEG decoded by libjpeg-turbo with its defaults (accurate integer IDCT,
/// "fancy" triangular chroma upsampling), which is what Pillow's bundled libjpeg-turbo gives
/// RapidOCR. image's own decoder (zune-jpeg) upsamples 4:2:0 chroma differently and is off by a
/// few levels on many pixels, enough to lose small low-contrast text that RapidOCR reads.
/// `None` for CMYK/YCCK and for files libjpeg-turbo rejects or warns about (truncated data):
/// those are left to image's decoder, as before.
pub fn decode_jpeg(data: &[u8]) -> Option<RgbImage> {
    let mut d = turbojpeg::Decompressor::new().ok()?;
    let header = d.read_header(data).ok()?;
    use turbojpeg::Colorspace as Cs;
    if !matches!(header.colorspace, Cs::YCbCr | Cs::RGB | Cs::Gray) {
        return None;
    }
    let (w, h) = (header.width, header.height);
    let mut pixels = vec![0u8; w * h * 3];
    let out = turbojpeg::Image {
        pixels: pixels.as_mut_slice(),
        width: w,
        pitch: w * 3,
        height: h,
        format: turbojpeg::PixelFormat::RGB,
    };
    d.decompress(data, out).ok()?;
    RgbImage::from_raw(w as u32, h as u32, pixels)
}

/// Whether a PNG file's header says colour type 3 (palette).
fn png_is_palette(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 26];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head[12..16] == b"IHDR"
        && head[25] == 3
}

fn over_white(img: &DynamicImage) -> RgbImage {
    let rgba = img.to_rgba8();
    RgbImage::from_fn(rgba.width(), rgba.height(), |x, y| {
        let p = rgba.get_pixel(x, y).0;
        let a = p[3] as u32;
        image::Rgb([0, 1, 2].map(|c| ((p[c] as u32 * a + 255 * (255 - a) + 127) / 255) as u8))
    })
}

/// Alpha as RapidOCR 1.4.4 removes it. Grey + alpha: the grey where alpha is not 0, plus
/// 255 − alpha (dark text on transparent comes out dark on white). RGBA: the colours where alpha
/// is not 0; if anything is left that is not black, the picture is inverted (so white text on a
/// transparent background becomes black on white, and an opaque RGBA picture is read as its
/// negative, as RapidOCR does), else 255 − alpha is added (black text on transparent).
fn flatten(img: DynamicImage) -> RgbImage {
    use image::ColorType;
    match img.color() {
        ColorType::La8 | ColorType::La16 => {
            let la = img.to_luma_alpha8();
            RgbImage::from_fn(la.width(), la.height(), |x, y| {
                let [g, a] = la.get_pixel(x, y).0;
                let v = if a > 0 { g } else { 0 }.saturating_add(255 - a);
                image::Rgb([v, v, v])
            })
        }
        c if c.has_alpha() => {
            let rgba = img.to_rgba8();
            let masked = |p: &image::Rgba<u8>| {
                if p.0[3] > 0 {
                    [p.0[0], p.0[1], p.0[2]]
                } else {
                    [0, 0, 0]
                }
            };
            let any_colour = rgba.pixels().any(|p| masked(p) != [0, 0, 0]);
            RgbImage::from_fn(rgba.width(), rgba.height(), |x, y| {
                let p = rgba.get_pixel(x, y);
                let m = masked(p);
                image::Rgb(if any_colour {
                    m.map(|v| 255 - v)
                } else {
                    m.map(|v| v.saturating_add(255 - p.0[3]))
                })
            })
        }
        _ => img.to_rgb8(),
    }
}

/// OpenCV's fixed-point weights: 11 fractional bits (`INTER_RESIZE_COEF_BITS`).
const COEF_SCALE: f32 = 2048.0;

/// First source index and the two fixed-point weights per destination coordinate, computed as
/// OpenCV 5.1's `resize` does (single-precision position, weights rounded half to even). Columns
/// are clamped to the image (`clamp`: both index and weight); rows are not — their taps are
/// clamped when read, so a border row keeps both weights, and the truncations that follow give a
/// different last bit than a clamped weight would.
fn linear_coefs(src: u32, dst: u32, clamp: bool) -> Vec<(i64, [i32; 2])> {
    let scale = 1.0 / (dst as f64 / src as f64);
    (0..dst)
        .map(|d| {
            let mut f = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let floor = f.floor();
            f -= floor;
            let mut s = floor as i64;
            if clamp && s < 0 {
                s = 0;
                f = 0.0;
            }
            if clamp && s >= src as i64 - 1 {
                s = src as i64 - 1;
                f = 0.0;
            }
            let w = |v: f32| (v * COEF_SCALE).round_ties_even() as i32;
            (s, [w(1.0 - f), w(f)])
        })
        .collect()
}

/// Bilinear resize, bit for bit `cv2.resize(img, (w, h))` of opencv-python 5.1 (the one RapidOCR
/// 1.4.4 runs here): fixed-point horizontal pass, then the vertical pass in its SIMD form —
/// each row's product truncated to 16 bits before the sum is rounded — which OpenCV uses for
/// every pixel. A float resize differs by one on ~12 % of pixels, enough to move a space in a
/// recognised line. Checked against cv2 by `tests/fixtures/ocr/make_reference.py`.
pub fn resize_linear(src: &RgbImage, w: u32, h: u32) -> RgbImage {
    let (sw, sh) = src.dimensions();
    if (sw, sh) == (w, h) {
        return src.clone();
    }
    let xs = linear_coefs(sw, w, true);
    let ys = linear_coefs(sh, h, false);
    let s = src.as_raw();
    let stride = sw as usize * 3;
    let row_len = w as usize * 3;
    let hrow = |y: usize| -> Vec<i32> {
        let base = y * stride;
        let mut r = vec![0i32; row_len];
        for (dx, &(sx, [a0, a1])) in xs.iter().enumerate() {
            let (x0, x1) = (sx as usize, (sx as usize + 1).min(sw as usize - 1));
            for c in 0..3 {
                r[dx * 3 + c] = s[base + x0 * 3 + c] as i32 * a0 + s[base + x1 * 3 + c] as i32 * a1;
            }
        }
        r
    };
    let mut out = vec![0u8; row_len * h as usize];
    // Each source row's horizontal pass, kept while rows below still need it.
    let mut cache: Vec<Option<Vec<i32>>> = vec![None; sh as usize];
    let last = sh as i64 - 1;
    let mut kept_from = 0;
    for (dy, &(sy, [b0, b1])) in ys.iter().enumerate() {
        let (y0, y1) = (sy.clamp(0, last) as usize, (sy + 1).clamp(0, last) as usize);
        for y in [y0, y1] {
            if cache[y].is_none() {
                cache[y] = Some(hrow(y));
            }
        }
        let (r0, r1) = (cache[y0].as_ref().unwrap(), cache[y1].as_ref().unwrap());
        let o = &mut out[dy * row_len..(dy + 1) * row_len];
        for i in 0..row_len {
            let v = (((r0[i] >> 4) * b0) >> 16) + (((r1[i] >> 4) * b1) >> 16);
            o[i] = ((v + 2) >> 2).clamp(0, 255) as u8;
        }
        // Rows above are never needed again.
        cache[kept_from..y0].iter_mut().for_each(|r| *r = None);
        kept_from = kept_from.max(y0);
    }
    RgbImage::from_raw(w, h, out).expect("sized above")
}

/// Solves the 3×3 homography mapping `from[i]` to `to[i]` (as `cv2.getPerspectiveTransform`).
pub fn perspective(from: &[[f64; 2]; 4], to: &[[f64; 2]; 4]) -> Option<[f64; 9]> {
    let mut a = [[0f64; 9]; 8];
    for i in 0..4 {
        let ([x, y], [u, v]) = (from[i], to[i]);
        a[i] = [x, y, 1.0, 0.0, 0.0, 0.0, -x * u, -y * u, u];
        a[i + 4] = [0.0, 0.0, 0.0, x, y, 1.0, -x * v, -y * v, v];
    }
    for col in 0..8 {
        let piv = (col..8).max_by(|&r, &s| a[r][col].abs().total_cmp(&a[s][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        for r in 0..8 {
            if r != col {
                let f = a[r][col] / a[col][col];
                for k in col..9 {
                    a[r][k] -= f * a[col][k];
                }
            }
        }
    }
    let mut m = [0f64; 9];
    for i in 0..8 {
        m[i] = a[i][8] / a[i][i];
    }
    m[8] = 1.0;
    Some(m)
}

fn cubic_weights(t: f32) -> [f32; 4] {
    const A: f32 = -0.75;
    let w0 = ((A * (t + 1.0) - 5.0 * A) * (t + 1.0) + 8.0 * A) * (t + 1.0) - 4.0 * A;
    let w1 = ((A + 2.0) * t - (A + 3.0)) * t * t + 1.0;
    let w2 = ((A + 2.0) * (1.0 - t) - (A + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0;
    [w0, w1, w2, 1.0 - w0 - w1 - w2]
}

/// Crops the quadrilateral `pts` (tl, tr, br, bl) to a `w`×`h` upright image, as RapidOCR's
/// `get_rotate_crop_image` (perspective warp, bicubic, replicated border). Axis-aligned integer
/// boxes, the usual case, are a plain copy — the warp would give the same pixels.
pub fn crop_quad(src: &RgbImage, pts: &[[f64; 2]; 4], w: u32, h: u32) -> RgbImage {
    let (sw, sh) = (src.width() as i64, src.height() as i64);
    let get = |x: i64, y: i64| {
        src.get_pixel(x.clamp(0, sw - 1) as u32, y.clamp(0, sh - 1) as u32)
            .0
    };
    let aligned = pts
        .iter()
        .all(|p| p[0].fract() == 0.0 && p[1].fract() == 0.0)
        && pts[1][0] - pts[0][0] == w as f64
        && pts[1][1] == pts[0][1]
        && pts[3][1] - pts[0][1] == h as f64
        && pts[3][0] == pts[0][0]
        && pts[2][0] == pts[1][0]
        && pts[2][1] == pts[3][1];
    let mut out = RgbImage::new(w.max(1), h.max(1));
    if aligned {
        let (x0, y0) = (pts[0][0] as i64, pts[0][1] as i64);
        for (x, y, p) in out.enumerate_pixels_mut() {
            p.0 = get(x0 + x as i64, y0 + y as i64);
        }
        return out;
    }
    let dst = [
        [0.0, 0.0],
        [w as f64, 0.0],
        [w as f64, h as f64],
        [0.0, h as f64],
    ];
    // The map from output pixels back to source coordinates.
    let Some(m) = perspective(&dst, pts) else {
        return out;
    };
    for (x, y, p) in out.enumerate_pixels_mut() {
        let (xf, yf) = (x as f64, y as f64);
        let d = m[6] * xf + m[7] * yf + m[8];
        let sx = (m[0] * xf + m[1] * yf + m[2]) / d;
        let sy = (m[3] * xf + m[4] * yf + m[5]) / d;
        let (ix, iy) = (sx.floor() as i64, sy.floor() as i64);
        let (wx, wy) = (
            cubic_weights((sx - sx.floor()) as f32),
            cubic_weights((sy - sy.floor()) as f32),
        );
        let mut acc = [0f32; 3];
        for (j, wyj) in wy.iter().enumerate() {
            for (i, wxi) in wx.iter().enumerate() {
                let q = get(ix - 1 + i as i64, iy - 1 + j as i64);
                for c in 0..3 {
                    acc[c] += q[c] as f32 * wxi * wyj;
                }
            }
        }
        p.0 = [0, 1, 2].map(|c| acc[c].round().clamp(0.0, 255.0) as u8);
    }
    out
}

/// Writes `img` resized to height `h` (width ⌈h·w/h⌉ capped at `max_w`) into a CHW BGR tensor of
/// width `max_w`, normalised to [-1, 1] and zero-padded on the right (PaddleOCR rec/cls input).
pub fn to_line_tensor(img: &RgbImage, h: u32, max_w: u32, out: &mut [f32]) {
    let ratio = img.width() as f64 / img.height() as f64;
    let rw = ((h as f64 * ratio).ceil() as u32).clamp(1, max_w);
    let resized = resize_linear(img, rw, h);
    let plane = (h * max_w) as usize;
    out.iter_mut().for_each(|v| *v = 0.0);
    for (x, y, p) in resized.enumerate_pixels() {
        let i = (y * max_w + x) as usize;
        // BGR channel order: the Paddle models were trained on OpenCV images.
        out[i] = p.0[2] as f32 / 127.5 - 1.0;
        out[plane + i] = p.0[1] as f32 / 127.5 - 1.0;
        out[2 * plane + i] = p.0[0] as f32 / 127.5 - 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RapidOCR 1.4.4's alpha rules, pixel by pixel (values worked out from its cv2 calls).
    #[test]
    fn alpha_is_removed_as_rapidocr_does() {
        // Grey + alpha: grey where alpha > 0, plus 255 - alpha (saturating).
        let la = image::GrayAlphaImage::from_raw(3, 1, vec![0, 255, 100, 128, 7, 0]).unwrap();
        let out = flatten(DynamicImage::ImageLumaA8(la));
        let got: Vec<u8> = out.pixels().map(|p| p.0[0]).collect();
        assert_eq!(got, vec![0, 227, 255]);
        // RGBA with colour left after masking: the masked picture inverted.
        let white_text = image::RgbaImage::from_raw(
            2,
            1,
            vec![255, 255, 255, 255, /* transparent */ 9, 9, 9, 0],
        )
        .unwrap();
        let out = flatten(DynamicImage::ImageRgba8(white_text));
        assert_eq!(out.get_pixel(0, 0).0, [0, 0, 0]);
        assert_eq!(out.get_pixel(1, 0).0, [255, 255, 255]);
        // Opaque RGBA: read as its negative.
        let opaque = image::RgbaImage::from_raw(1, 1, vec![200, 30, 10, 255]).unwrap();
        assert_eq!(
            flatten(DynamicImage::ImageRgba8(opaque)).get_pixel(0, 0).0,
            [55, 225, 245]
        );
        // Nothing but black left: 255 - alpha is added instead (black text on transparent).
        let black_text =
            image::RgbaImage::from_raw(2, 1, vec![0, 0, 0, 255, 40, 40, 40, 0]).unwrap();
        let out = flatten(DynamicImage::ImageRgba8(black_text));
        assert_eq!(out.get_pixel(0, 0).0, [0, 0, 0]);
        assert_eq!(out.get_pixel(1, 0).0, [255, 255, 255]);
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/ocr")
            .join(name)
    }

    fn png(name: &str) -> RgbImage {
        image::open(fixture(name)).unwrap().to_rgb8()
    }

    fn differing(a: &RgbImage, b: &RgbImage) -> usize {
        assert_eq!(a.dimensions(), b.dimensions());
        a.as_raw()
            .iter()
            .zip(b.as_raw())
            .filter(|(x, y)| x != y)
            .count()
    }

    /// cv2.resize's own output (tests/fixtures/ocr/make_reference.py), up, down, to line height
    /// and by an exact half.
    #[test]
    fn resize_is_bit_exact_with_opencv() {
        let src = png("resize_src.png");
        for (w, h) in [(160, 64), (141, 48), (30, 48), (32, 12), (61, 48), (7, 5)] {
            let want = png(&format!("resize_{w}x{h}.png"));
            assert_eq!(differing(&resize_linear(&src, w, h), &want), 0, "{w}x{h}");
        }
        let half = png("resize_half_src.png");
        assert_eq!(
            differing(&resize_linear(&half, 31, 12), &png("resize_half_31x12.png")),
            0
        );
    }

    /// A 4:2:0 camera JPEG decodes to the pixels RapidOCR's loader (Pillow, libjpeg-turbo) gives;
    /// image's own decoder does not, which is what lost small low-contrast signs.
    #[test]
    fn camera_jpeg_decodes_as_rapidocr_loads_it() {
        let path = fixture("camera_420.jpg");
        let want = png("camera_420.rapidocr.png");
        assert_eq!(differing(&load_image(&path).unwrap(), &want), 0);
        let zune = image::open(&path).unwrap().to_rgb8();
        assert!(
            differing(&zune, &want) > 0,
            "the fixture no longer tells the decoders apart"
        );
    }

    /// A grey palette PNG with a tRNS entry, named .jpg: RapidOCR reads it as the grey page it
    /// is; expanding the tRNS to alpha made us read its negative.
    #[test]
    fn palette_png_with_transparency_loads_as_rapidocr_loads_it() {
        let got = load_image(&fixture("palette_trns_png.jpg")).unwrap();
        assert_eq!(differing(&got, &png("palette_trns_png.rapidocr.png")), 0);
    }

    #[test]
    fn resize_matches_opencv_half_pixel_mapping() {
        // 4 -> 2 pixels: OpenCV samples at source 0.5 and 2.5, i.e. the means of pairs.
        let src = RgbImage::from_fn(4, 1, |x, _| image::Rgb([[0, 100, 200, 250][x as usize]; 3]));
        let out = resize_linear(&src, 2, 1);
        assert_eq!(out.get_pixel(0, 0).0[0], 50);
        assert_eq!(out.get_pixel(1, 0).0[0], 225);
    }

    #[test]
    fn rotated_crop_recovers_a_tilted_patch() {
        // A 40x20 image whose pixel value is x; crop a quad that is the full image in reverse x
        // order: the crop must be mirrored.
        let src = RgbImage::from_fn(40, 20, |x, _| image::Rgb([(x * 5) as u8; 3]));
        let pts = [[39.5, 0.0], [0.5, 0.0], [0.5, 20.0], [39.5, 20.0]];
        let out = crop_quad(&src, &pts, 39, 20);
        assert!(
            out.get_pixel(0, 10).0[0] > 180,
            "left of the crop is the right of the source"
        );
        assert!(out.get_pixel(38, 10).0[0] < 20);
        let m = perspective(
            &[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]],
            &[[2.0, 3.0], [4.0, 3.0], [4.0, 5.0], [2.0, 5.0]],
        )
        .unwrap();
        assert!(
            (m[0] - 2.0).abs() < 1e-9 && (m[2] - 2.0).abs() < 1e-9 && (m[5] - 3.0).abs() < 1e-9
        );
    }
}
