//! OCR against RapidOCR's own test images and what RapidOCR's tests assert for them.

use crate::util::*;
use std::path::Path;

fn ocr(args: &[&str]) -> Vec<serde_json::Value> {
    let o = run(
        &[&["ocr"], args].concat(),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn fixture(name: &str) -> String {
    fixtures().join("ocr").join(name).display().to_string()
}

#[test]
fn det_cls_rec_finds_the_18_regions_of_ch_en_num() {
    let out = ocr(&[&fixture("ch_en_num.jpg"), &fixture("empty_black.jpg")]);
    let regions = out[0]["regions"].as_array().unwrap();
    assert_eq!(regions.len(), 18);
    assert_eq!(regions[0]["text"], "正品促销");
    for r in regions {
        assert!(r["score"].as_f64().unwrap() >= 0.5);
        let b = r["box"].as_array().unwrap();
        assert_eq!(b.len(), 4);
        assert!(
            b.iter()
                .all(|p| p[0].as_f64().unwrap() <= 323.0 && p[1].as_f64().unwrap() <= 430.0)
        );
    }
    assert!(
        out[1]["regions"].as_array().unwrap().is_empty(),
        "empty_black has no text"
    );
}

#[test]
fn no_det_reads_word_crops_and_turns_upside_down_ones() {
    let out = ocr(&[
        "--no-det",
        &fixture("text_rec.jpg"),
        &fixture("text_cls.jpg"),
    ]);
    assert_eq!(out[0]["regions"][0]["text"], "韩国小馆");
    assert_eq!(out[1]["regions"][0]["angle"][0], "180");
    assert_eq!(out[1]["regions"][0]["text"], "怪我咯");
    // Without the classifier the upside-down crop is not read correctly.
    let plain = ocr(&["--no-det", "--no-cls", &fixture("text_cls.jpg")]);
    assert_ne!(plain[0]["regions"][0]["text"], "怪我咯");
}

#[test]
fn images_load_by_content_with_exif_orientation_and_odd_pixel_formats() {
    let d = tempfile::tempdir().unwrap();
    let src = image::open(fixtures().join("ocr/text_rec.jpg")).unwrap();
    // A PNG named .dat, an RGBA PNG, a palette GIF, a greyscale PNG.
    let png = d.path().join("word.dat");
    src.save_with_format(&png, image::ImageFormat::Png).unwrap();
    let rgba = d.path().join("rgba.png");
    image::DynamicImage::ImageRgba8(src.to_rgba8())
        .save(&rgba)
        .unwrap();
    let gray = d.path().join("gray.png");
    image::DynamicImage::ImageLuma8(image::imageops::colorops::grayscale(&src.to_rgb8()))
        .save(&gray)
        .unwrap();
    let gif = d.path().join("pal.gif");
    src.save_with_format(&gif, image::ImageFormat::Gif).unwrap();
    // EXIF orientation 3 (rotate 180) on an upside-down copy: loading must turn it back.
    let flipped = d.path().join("flipped.jpg");
    image::imageops::rotate180(&src.to_rgb8())
        .save(&flipped)
        .unwrap();
    add_exif_orientation(&flipped, 3);
    let paths: Vec<String> = [&png, &rgba, &gray, &gif, &flipped]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let args: Vec<&str> = std::iter::once("--no-det")
        .chain(std::iter::once("--no-cls"))
        .chain(paths.iter().map(|s| s.as_str()))
        .collect();
    let out = ocr(&args);
    for (o, p) in out.iter().zip(&paths) {
        assert_eq!(o["regions"][0]["text"], "韩国小馆", "{p}");
    }
}

/// White text on a transparent background (a logo or subtitle exported as PNG): RapidOCR 1.4.4
/// keeps the colours where alpha is set and inverts them, so it reads such files; compositing
/// over white (what we did before) left white on white and read nothing.
#[test]
fn white_text_on_transparent_is_read() {
    let d = tempfile::tempdir().unwrap();
    let src = image::open(fixtures().join("ocr/text_rec.jpg"))
        .unwrap()
        .to_luma8();
    // The fixture's light letters become opaque white; its dark background fully transparent.
    let rgba = image::RgbaImage::from_fn(src.width(), src.height(), |x, y| {
        let l = src.get_pixel(x, y).0[0];
        image::Rgba([255, 255, 255, if l > 110 { 255 } else { 0 }])
    });
    let path = d.path().join("white_on_transparent.png");
    rgba.save(&path).unwrap();
    let p = path.display().to_string();
    let out = ocr(&["--no-det", "--no-cls", &p]);
    assert_eq!(out[0]["regions"][0]["text"], "韩国小馆", "{out:?}");
}

/// Inserts a minimal EXIF APP1 segment with an Orientation tag after the JPEG SOI marker.
fn add_exif_orientation(path: &Path, orientation: u16) {
    let data = std::fs::read(path).unwrap();
    let mut tiff = vec![b'M', b'M', 0, 42, 0, 0, 0, 8, 0, 1];
    tiff.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1]);
    tiff.extend_from_slice(&orientation.to_be_bytes());
    tiff.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    let mut app1 = b"Exif\0\0".to_vec();
    app1.extend_from_slice(&tiff);
    let mut out = data[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((app1.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(&app1);
    out.extend_from_slice(&data[2..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn reuse_on_consecutive_copies_of_an_image_reads_the_same_regions_once() {
    // One thread, so the three inputs are one run of consecutive frames: the second copy of
    // ch_en_num reuses everything, the black image in between is detected afresh.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (a, b) = (fixture("ch_en_num.jpg"), fixture("empty_black.jpg"));
    let o = run(
        &["ocr", "--threads", "1", "--reuse", "verify", &a, &a, &b],
        root,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("detection reused on 1/3 images; recognition reused on 18/"),
        "{stderr}"
    );
    assert!(
        stderr.contains("verify: 0 images read differently than from scratch, 0 reused texts differ, 0 images' boxes moved"),
        "{stderr}"
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["regions"], lines[1]["regions"]);
    assert!(lines[2]["regions"].as_array().unwrap().is_empty());
}

/// The two engines run the same unchanged models, so they read the same text in the same boxes
/// (RapidOCR's procedure around both): RapidOCR's small test images, and three 1080p slides
/// frames detected at 1280 x 736 (the default profile).
#[test]
fn openvino_and_onnxruntime_read_the_same_text_in_the_same_boxes() {
    let mut files: Vec<String> = [
        "ch_en_num.jpg",
        "camera_420.jpg",
        "en_rec.jpg",
        "palette_trns_png.jpg",
        "empty_black.jpg",
    ]
    .map(fixture)
    .to_vec();
    files.push(fixture_video("slides_1080p_122s.mp4").display().to_string());
    let read = |engine: &str| {
        let mut args = vec!["--engine", engine, "--frames", "3"];
        args.extend(files.iter().map(String::as_str));
        ocr(&args)
    };
    let (ov, ort) = (read("openvino"), read("onnxruntime"));
    assert_eq!(ov.len(), files.len() + 2, "five images and three frames");
    let mut lines = 0;
    for (a, b) in ov.iter().zip(&ort) {
        let (ra, rb) = (
            a["regions"].as_array().unwrap(),
            b["regions"].as_array().unwrap(),
        );
        let texts =
            |r: &[serde_json::Value]| r.iter().map(|x| x["text"].clone()).collect::<Vec<_>>();
        assert_eq!(texts(ra), texts(rb), "{}", a["source"]);
        for (x, y) in ra.iter().zip(rb) {
            let pts = |v: &serde_json::Value| {
                v["box"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()])
                    .collect::<Vec<_>>()
            };
            let worst = pts(x)
                .iter()
                .zip(pts(y))
                .map(|(p, q)| (p - q).abs())
                .fold(0.0, f64::max);
            assert!(worst <= 1.0, "{}: box moved {worst} px", x["text"]);
            let ds = (x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs();
            assert!(ds < 1e-3, "{}: score differs by {ds}", x["text"]);
        }
        lines += ra.len();
    }
    assert!(lines >= 35, "only {lines} lines read");
}

/// A missing OpenVINO is an error that names the file when asked for, and a fallback to ONNX
/// Runtime, said once, when left to `auto`.
#[test]
fn a_missing_openvino_is_named_or_falls_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let missing = "/nonexistent/libopenvino_c.so.2641";
    let with = |engine: &str| {
        std::process::Command::new(bin())
            .args(["ocr", "--engine", engine, &fixture("ch_en_num.jpg")])
            .env("VIDCURATE_OPENVINO_LIB", missing)
            .current_dir(root)
            .output()
            .unwrap()
    };
    let o = with("openvino");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(missing) && err.contains("scripts/fetch_models.sh"),
        "{err}"
    );
    let o = with("auto");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("OpenVINO did not load").count(), 1, "{err}");
    let out: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(out["regions"].as_array().unwrap().len(), 18);
}
