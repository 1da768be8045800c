//! `vidcurate ocr`: the OCR engine on images and sampled video frames, outside any run, one
//! JSON line per image in input order. Reads the files named; calls the engines only (OCR,
//! FFmpeg); writes stdout.

use crate::engines::ocr::{
    DetProfile, EngineKind, FrameMemory, OcrEngine, OcrParams, Region, Reuse, ReuseCounts, imgops,
};
use crate::error::{Exit, RunError};
use std::path::PathBuf;

/// Read the text in images or videos (PP-OCRv4, RapidOCR 1.4.4's procedure).
///
/// Prints one JSON object per image or sampled video frame:
/// {"source", "frame", "timestamp_secs", "regions": [{"text", "score", "box": [[x,y] x4], "angle"}]}.
/// Images are read by content (any extension), with EXIF orientation applied.
#[derive(clap::Args)]
pub struct Args {
    /// Images or videos.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// No detection: recognise each whole image as one text line (word crops).
    #[arg(long)]
    pub no_det: bool,
    /// No angle classification.
    #[arg(long)]
    pub no_cls: bool,
    /// Frames sampled uniformly from each video.
    #[arg(long, default_value_t = 16)]
    pub frames: u32,
    /// The library the models run on: auto (OpenVINO where it loads, else ONNX Runtime),
    /// openvino, or onnxruntime (RapidOCR's own).
    #[arg(long, value_enum, default_value_t = EngineKind::Auto)]
    pub engine: EngineKind,
    /// The size detection runs at: capped (RapidOCR's, with the long side capped at 1280, as
    /// the `ocr` stage by default), rapidocr (RapidOCR 1.4.4's own, for parity) or paddleocr.
    #[arg(long, value_enum, default_value_t = DetProfile::Capped)]
    pub det_profile: DetProfile,
    /// OCR workers, one thread each [default: the number of cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Treat the inputs as consecutive frames and reuse what earlier ones found, as the
    /// `ocr` stage does: `on`, `verify` (read everything, count differences), or `off`.
    /// The inputs are cut into one run of consecutive items per thread.
    #[arg(long, value_enum, default_value_t = ReuseArg::Off)]
    pub reuse: ReuseArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ReuseArg {
    Off,
    On,
    Verify,
}

/// One image to read: a file, or a frame already decoded from a video.
enum OcrItem {
    File(PathBuf),
    Frame {
        source: String,
        index: usize,
        timestamp_secs: f64,
        image: image::RgbImage,
    },
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    let reuse = match a.reuse {
        ReuseArg::Off => Reuse::Off,
        ReuseArg::On => Reuse::On,
        ReuseArg::Verify => Reuse::Verify,
    };
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    let params = a.det_profile.apply(OcrParams {
        use_cls: !a.no_cls,
        engine: a.engine,
        ..Default::default()
    });
    let engine = OcrEngine::load(&crate::paths::models_dir(), threads, params)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    let reused = std::sync::Mutex::new(ReuseCounts::default());
    let read =
        |img: &image::RgbImage, memory: &mut FrameMemory| -> Result<Vec<Region>, ItemError> {
            if a.no_det {
                Ok(vec![engine.ocr_line(img)?])
            } else {
                let (regions, c) = engine.ocr_frame(img, memory, reuse)?;
                reused.lock().unwrap_or_else(|e| e.into_inner()).add(&c);
                Ok(regions)
            }
        };
    let (items, mut failed) = collect_items(&a.files, a.frames);
    let chained = reuse != Reuse::Off && !a.no_det;
    // One thread per OCR worker; results are printed in input order as they arrive.
    in_order_on_threads(
        &items,
        engine.workers(),
        chained,
        |item, memory: &mut FrameMemory| match item {
            OcrItem::File(p) => imgops::load_image(p)
                .map_err(ItemError::from)
                .and_then(|img| read(&img, memory))
                .map(|regions| json_line(&p.display().to_string(), None, regions)),
            OcrItem::Frame {
                source,
                index,
                timestamp_secs,
                image,
            } => read(image, memory)
                .map(|regions| json_line(source, Some((*index, *timestamp_secs)), regions)),
        },
        |r| match r {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("vidcurate: {e}");
                failed += 1;
            }
        },
    );
    if chained {
        report_reuse(
            &reused.into_inner().unwrap_or_else(|e| e.into_inner()),
            reuse,
        );
    }
    Ok(if failed == 0 {
        Exit::Done
    } else {
        Exit::Rejected
    })
}

fn json_line(source: &str, frame: Option<(usize, f64)>, regions: Vec<Region>) -> String {
    serde_json::json!({
        "source": source,
        "frame": frame.map(|f| f.0),
        "timestamp_secs": frame.map(|f| f.1),
        "regions": regions,
    })
    .to_string()
}

/// The images to read: files that decode as images, else the video's uniformly sampled frames;
/// a file that is neither is reported and counted.
fn collect_items(files: &[PathBuf], frames: u32) -> (Vec<OcrItem>, usize) {
    let mut items = vec![];
    let mut failed = 0;
    for f in files {
        if image::ImageReader::open(f)
            .and_then(|r| r.with_guessed_format())
            .is_ok_and(|r| r.format().is_some())
        {
            items.push(OcrItem::File(f.clone()));
            continue;
        }
        let source = f.display().to_string();
        let probe = match crate::engines::ffmpeg::probe(f) {
            Ok(p) => p,
            Err(e) => {
                eprintln!(
                    "vidcurate: {source}: neither an image nor a video ({}: {})",
                    e.reason, e.detail
                );
                failed += 1;
                continue;
            }
        };
        let n = frames.max(1);
        let targets: Vec<f64> = (0..n)
            .map(|i| probe.video_duration_secs * (i as f64 + 0.5) / n as f64)
            .collect();
        match crate::engines::ffmpeg::grab_at(f, &targets, None) {
            Ok(grabs) => {
                items.extend(
                    grabs
                        .into_iter()
                        .enumerate()
                        .map(|(index, g)| OcrItem::Frame {
                            source: source.clone(),
                            index,
                            timestamp_secs: g.timestamp_secs,
                            image: g.image,
                        }),
                )
            }
            Err(e) => {
                eprintln!("vidcurate: {source}: {}", e.detail);
                failed += 1;
            }
        }
    }
    (items, failed)
}

fn report_reuse(c: &ReuseCounts, reuse: Reuse) {
    eprintln!(
        "reuse: detection reused on {}/{} images; recognition reused on {}/{} lines",
        c.det_reused, c.frames, c.rec_reused, c.lines
    );
    if reuse == Reuse::Verify {
        eprintln!(
            "verify: {} images read differently than from scratch, {} reused texts differ, {} images' boxes moved more than {} px",
            c.text_mismatch,
            c.rec_mismatch,
            c.det_mismatch,
            crate::engines::ocr::reuse::QUAD_PX
        );
    }
}

/// Why one image gave no line: the engine's error, or a panic caught on its thread.
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error("{0}")]
    Ocr(#[from] crate::engines::ocr::OcrError),
    #[error("item {item}: OCR failed: {msg}")]
    Panicked { item: usize, msg: String },
}

/// Runs `work` on every item with `threads` threads and hands the results to `emit` in input
/// order, as soon as each one's turn comes. `chained`: each thread takes one run of consecutive
/// items and carries its state `S` from one to the next; else items go to whichever thread is
/// free, each with a fresh state. A panic in `work` is that item's error (the printer must never
/// wait for a slot a dead thread would have filled).
fn in_order_on_threads<T: Sync, S: Default>(
    items: &[T],
    threads: usize,
    chained: bool,
    work: impl Fn(&T, &mut S) -> Result<String, ItemError> + Sync,
    mut emit: impl FnMut(Result<String, ItemError>),
) {
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<String, ItemError>)>();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = threads.max(1);
    let per_chain = items.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let tx = tx.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || {
                let mut state = S::default();
                let mut k = 0;
                loop {
                    let i = if chained {
                        k += 1;
                        if k > per_chain {
                            break;
                        }
                        t * per_chain + k - 1
                    } else {
                        state = S::default();
                        next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    };
                    let Some(item) = items.get(i) else { break };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        work(item, &mut state)
                    }))
                    .unwrap_or_else(|p| {
                        let msg = crate::error::panic_message(p.as_ref());
                        Err(ItemError::Panicked { item: i + 1, msg })
                    });
                    if tx.send((i, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut waiting = std::collections::BTreeMap::new();
        let mut printed = 0;
        for (i, r) in rx {
            waiting.insert(i, r);
            while let Some(r) = waiting.remove(&printed) {
                emit(r);
                printed += 1;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::in_order_on_threads;

    #[test]
    fn ordered_results_survive_a_panicking_worker() {
        for chained in [false, true] {
            let items: Vec<u32> = (0..20).collect();
            let mut got = vec![];
            in_order_on_threads(
                &items,
                3,
                chained,
                // The state counts the items this thread has seen in its current run.
                |&n, seen: &mut u32| {
                    *seen += 1;
                    if n == 7 {
                        panic!("model exploded");
                    }
                    std::thread::sleep(std::time::Duration::from_millis((20 - n as u64) % 5));
                    Ok(format!("{n}/{seen}"))
                },
                |r| got.push(r),
            );
            assert_eq!(got.len(), 20);
            for (i, r) in got.iter().enumerate() {
                if i == 7 {
                    let e = r.as_ref().unwrap_err();
                    assert!(e.to_string().contains("model exploded"), "{e}");
                    continue;
                }
                let (n, seen) = r.as_deref().unwrap().split_once('/').unwrap();
                assert_eq!(n, i.to_string());
                // Chained: runs of 7, 7 and 6 items, the state carried along each run.
                let want = if chained { i % 7 + 1 } else { 1 };
                assert_eq!(seen, want.to_string(), "item {i}, chained {chained}");
            }
        }
    }
}
