//! Times the parts of frame sampling on one video: seek + decode, RGB conversion, JPEG.
//! `cargo run --release --example grab_profile -- VIDEO [N]`
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::PathBuf::from(&args[1]);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let t = Instant::now();
    let probe = vidcurate::engines::ffmpeg::probe(&path).unwrap();
    println!("probe {:?}", t.elapsed());
    let d = probe.video_duration_secs;
    let targets: Vec<f64> = (0..n).map(|i| d * (i as f64 + 0.5) / n as f64).collect();
    let t = Instant::now();
    let (grabs, decoded) =
        vidcurate::engines::ffmpeg::grab_at_counted(&path, &targets, None).unwrap();
    println!("grab {:?} ({decoded} frames decoded)", t.elapsed());
    let t = Instant::now();
    for g in &grabs {
        let mut buf = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut buf, 90)
            .encode_image(&g.image)
            .unwrap();
    }
    println!("image crate jpeg x{} {:?}", grabs.len(), t.elapsed());
    let t = Instant::now();
    for g in &grabs {
        let _ = vidcurate::engines::ffmpeg::jpeg(&g.image, 90).unwrap();
    }
    println!("libjpeg-turbo (ours) x{} {:?}", grabs.len(), t.elapsed());
}
