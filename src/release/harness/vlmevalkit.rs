//! VLMEvalKit's custom multiple-choice dataset, one per split: `harness/vlmevalkit/
//! <Name>_<split>.tsv` and its CircularEval copy `<Name>_<split>_CIRC.tsv` (`<Name>.tsv` for
//! items of no split). Copy them into `$LMUData` and pass `--data <Name>_test`: a model is
//! scored on the test split, the others being there to tune it on.
//!
//! What VLMEvalKit's loader asks of such a file (`vlmeval/dataset/__init__.py::build_dataset`,
//! `image_base.py::ImageBaseDataset.__init__`, `utils/multiple_choice.py::mcq_circular_eval`):
//! a `question` column and `A`, `B` make it a `CustomMCQDataset` when `image` or `image_path`
//! is there; `image` is one base64 image, or a Python list of them (several frames), or — at
//! most 64 characters — the `index` of another row whose images it shares; `image_path` holds
//! the file names the decoded images are saved under, a list as long as `image`'s; rows without
//! an image are dropped. CircularEval groups rows by `index % 1_000_000`: the original at
//! `index` < 1,000,000 and each rotated copy at `r * 1_000_000 + index`.
//!
//! Here `category` is the level (a task's category for a task's TSV), `l2-category` the video's
//! split; `item_id`, `video_id` and `rotation` are extra columns VLMEvalKit carries along and
//! `vidcurate evaluate` reads.

use super::{Frame, Item, read_frames, write_text};
use crate::error::RunError;
use base64::Engine;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where rotated copies start: VLMEvalKit's circular grouping is `index % 1_000_000`.
pub const CIRCULAR_OFFSET: usize = 1_000_000;

/// A TSV cell: quoted when it holds a tab, a newline or a quote, as pandas' reader expects.
fn cell(s: &str) -> String {
    if s.contains(['\t', '\n', '\r', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A Python list literal of strings (what VLMEvalKit's `toliststr` reads back).
fn py_list(xs: &[String]) -> String {
    serde_json::to_string(xs).unwrap_or_default()
}

fn images(release: &Path, frames: &[Frame]) -> Result<Vec<String>, RunError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    frames
        .iter()
        .map(|f| match &f.bytes {
            Some(b) => Ok(b64.encode(b)),
            None => {
                let p = release.join(&f.path);
                let b = std::fs::read(&p).map_err(crate::error::io(&p))?;
                Ok(b64.encode(b))
            }
        })
        .collect()
}

/// Writes `<name>_<split>.tsv` and its CircularEval copy `<name>_<split>_CIRC.tsv` for each
/// split of `items`, in the order the items come (`<name>.tsv` for items of no split).
pub(super) fn write(release: &Path, name: &str, items: &[Item]) -> Result<Vec<PathBuf>, RunError> {
    let frames = read_frames(release)?;
    let mut written = vec![];
    for split in super::first_seen(items, |i| &i.split) {
        let of: Vec<&Item> = items.iter().filter(|i| i.split == split).collect();
        let file = if split.is_empty() {
            name.to_string()
        } else {
            format!("{name}_{}", super::ident(split))
        };
        written.extend(write_split(release, &file, &of, &frames)?);
    }
    Ok(written)
}

/// What would stop `write` half-way, checked before any harness writes a file: an item whose
/// video has no frames in the release, or a split past the circular indices.
pub(super) fn check(release: &Path, items: &[Item]) -> Result<(), RunError> {
    let frames = read_frames(release)?;
    if let Some(it) = items
        .iter()
        .find(|i| frames.get(&i.video_id).is_none_or(|f| f.is_empty()))
    {
        return Err(no_frames(release, &it.video_id));
    }
    for split in super::first_seen(items, |i| &i.split) {
        let n = items.iter().filter(|i| i.split == split).count();
        if n >= CIRCULAR_OFFSET {
            return Err(too_many(n));
        }
    }
    Ok(())
}

fn no_frames(release: &Path, video_id: &str) -> RunError {
    RunError::Config(format!(
        "{}: video {video_id} has no frames in the release; VLMEvalKit shows frames as images \
         (release with --frames paths or --frames bytes, or export --for lmms-eval alone)",
        release.join("data").display(),
    ))
}

fn too_many(n: usize) -> RunError {
    RunError::Config(format!(
        "{n} items: VLMEvalKit's circular indices allow under {CIRCULAR_OFFSET}"
    ))
}

/// Writes `<name>.tsv` and its CircularEval copy `<name>_CIRC.tsv` of `items`.
fn write_split(
    release: &Path,
    name: &str,
    items: &[&Item],
    frames: &HashMap<String, Vec<Frame>>,
) -> Result<Vec<PathBuf>, RunError> {
    if items.len() >= CIRCULAR_OFFSET {
        return Err(too_many(items.len()));
    }
    let width = items.iter().map(|i| i.options.len()).max().unwrap_or(0);
    let letters: Vec<char> = ('A'..='Z').take(width).collect();
    let mut plain = header(&letters);
    let mut circ = plain.clone();
    for (i, it) in items.iter().enumerate() {
        let fs = frames
            .get(&it.video_id)
            .filter(|f| !f.is_empty())
            .ok_or_else(|| no_frames(release, &it.video_id))?;
        let imgs = images(release, fs)?;
        let paths: Vec<String> = (0..fs.len())
            .map(|k| format!("{}_{k:05}.jpg", super::ident(&it.video_id)))
            .collect();
        for r in 0..it.options.len() {
            let line = tsv_line(it, i, r, width, &letters, &imgs, &paths);
            if r == 0 {
                plain += &line;
            }
            circ += &line;
        }
    }
    let dir = release.join("harness/vlmevalkit");
    Ok(vec![
        write_text(&dir.join(format!("{name}.tsv")), &plain)?,
        write_text(&dir.join(format!("{name}_CIRC.tsv")), &circ)?,
    ])
}

/// The header line: the option letters' columns between the question and the answer.
fn header(letters: &[char]) -> String {
    let mut head = vec!["index".to_string(), "question".into()];
    head.extend(letters.iter().map(|c| c.to_string()));
    head.extend(
        [
            "answer",
            "category",
            "l2-category",
            "image",
            "image_path",
            "item_id",
            "video_id",
            "rotation",
        ]
        .map(String::from),
    );
    head.join("\t") + "\n"
}

/// The line of item `i` with its options rotated `r` places (0: the original).
fn tsv_line(
    it: &Item,
    i: usize,
    r: usize,
    width: usize,
    letters: &[char],
    imgs: &[String],
    paths: &[String],
) -> String {
    let n = it.options.len();
    let answer = (it.answer.as_bytes().first().copied().unwrap_or(b'A') - b'A') as usize;
    let index = r * CIRCULAR_OFFSET + i;
    let mut row = vec![index.to_string(), cell(&it.question)];
    for k in 0..width {
        row.push(if k < n {
            cell(&it.options[(k + r) % n])
        } else {
            String::new()
        });
    }
    // Letter k shows option (k + r) mod n, so the right option sits at (answer - r).
    row.push(letters[(answer + n - r) % n].to_string());
    row.push(cell(&it.level));
    row.push(cell(&it.split));
    // Rotated copies share the original's images by its index (VLMEvalKit's ≤ 64 rule).
    row.push(if r == 0 {
        if imgs.len() == 1 {
            imgs[0].clone()
        } else {
            py_list(imgs)
        }
    } else {
        i.to_string()
    });
    row.push(cell(&py_list(paths)));
    row.push(cell(&it.item_id));
    row.push(cell(&it.video_id));
    row.push(r.to_string());
    row.join("\t") + "\n"
}
