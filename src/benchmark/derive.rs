//! Items whose reference vidcurate measured (MVFNDB's CCP, CPP, KEG and SAC): the rules a task
//! file names under `[reference] from = "derived"`.
//!
//! Reads one video's OCR regions (`record::TextRegion`), its sampled frames' times and its shot
//! count, as the stage that builds items hands them over. Writes nothing, calls nothing, caches
//! nothing: the stage persists what this returns.
//!
//! - A target is a creator-added text, identified by its text with whitespace collapsed (two
//!   readings that differ are two targets). Targets are taken longest-on-screen first, ties by
//!   first appearance, at most `per_video`.
//! - Key frame: the sampled frame where the target's region has the most stroke pixels (the
//!   clearest reading), ties by the earliest.
//! - `text_colour`: the answer is the key region's named colour bin (the OCR stage's palette of
//!   its stroke pixels' HSV); the distractors are the colours that occur most in the run
//!   (`pool`), then the task's own options in order, never the answer twice.
//! - `text_cell`: the answer is the key region's grid cell among the task's options (the OCR
//!   stage's 5 × 6 grid names).
//! - `text_ranges`: the runs of consecutive sampled frames showing the text; a run covers its
//!   frames and half the gap to each neighbouring sample (to 0 and the duration at the ends), so
//!   a range is off the drawn time by at most one sampling interval.
//! - `shot_count`: the shots stage's count, marked for people (a cut is not an angle).
//!
//! Shown options are shuffled by a permutation seeded by the item id, so the answer's letter
//! does not follow the palette's order.

use super::formats::Answer;
use super::seeded_permutation;
use crate::record::TextRegion;
use std::collections::BTreeMap;

/// A derived item before it is stored: what it asks about, the right answer, and where that
/// came from.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedItem {
    /// `<video>:<task>:<k>`: stable for the video, task and place.
    pub item_id: String,
    pub target_text: String,
    /// The key frame (0-based index among the sampled frames) and its time.
    pub key_frame: Option<u32>,
    pub key_time_secs: Option<f64>,
    /// The options shown, in shown order (empty for formats without options).
    pub options: Vec<String>,
    pub answer: Answer,
    /// People must confirm the answer before it is a reference.
    pub for_review: bool,
    /// What the answer was read from: `stage.column` for each column.
    pub from_columns: Vec<String>,
}

/// A creator-added text and where it is seen.
struct Target<'a> {
    text: String,
    /// Its regions, in frame order.
    regions: Vec<&'a TextRegion>,
}

/// A reading with its whitespace collapsed: the target text as shown in the question.
fn normalise_spaces(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Creator-added texts of a video, longest on screen first (ties: first seen). Readings whose
/// letters and digits are at least 80 % alike (`engines::ocr::text::similarity`, the rule the
/// creator-added verdict uses for "the same text") are one target, named by its most frequent
/// reading: a misread character on one frame does not split a target or its ranges.
fn targets(regions: &[TextRegion]) -> Vec<Target<'_>> {
    use crate::engines::ocr::text::{normalise, similarity};
    let mut by_text: BTreeMap<String, Vec<&TextRegion>> = BTreeMap::new();
    for r in regions.iter().filter(|r| r.creator_added) {
        let t = normalise_spaces(&r.text);
        if !t.is_empty() {
            by_text.entry(t).or_default().push(r);
        }
    }
    // Most frequent reading first (ties by text, for a stable choice), then each reading joins
    // the first target it is alike.
    let mut readings: Vec<(String, Vec<&TextRegion>)> = by_text.into_iter().collect();
    readings.sort_by_key(|(t, rs)| (std::cmp::Reverse(rs.len()), t.clone()));
    let mut out: Vec<Target> = vec![];
    for (text, regions) in readings {
        let key = normalise(&text);
        match out
            .iter_mut()
            .find(|t| similarity(&normalise(&t.text), &key) >= 0.8)
        {
            Some(t) => t.regions.extend(regions),
            None => out.push(Target { text, regions }),
        }
    }
    for t in &mut out {
        t.regions.sort_by_key(|r| r.frame_index);
        t.regions.dedup_by_key(|r| r.frame_index);
    }
    out.sort_by_key(|t| (std::cmp::Reverse(t.regions.len()), t.regions[0].frame_index));
    out
}

fn key_region<'a>(t: &Target<'a>) -> &'a TextRegion {
    t.regions
        .iter()
        .copied()
        .max_by_key(|r| (r.stroke_pixels, std::cmp::Reverse(r.frame_index)))
        .expect("a target has a region")
}

/// The options shown for a colour item: the answer and `shown - 1` distractors.
fn colour_options(
    answer: &str,
    pool: &[(String, u64)],
    palette: &[String],
    shown: usize,
) -> Vec<String> {
    let mut ranked: Vec<&(String, u64)> = pool.iter().collect();
    // Most frequent first; equal counts in palette order (then by name) for a stable choice.
    let rank = |c: &str| palette.iter().position(|p| p == c).unwrap_or(usize::MAX);
    ranked.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then(rank(&a.0).cmp(&rank(&b.0)))
            .then(a.0.cmp(&b.0))
    });
    let mut out = vec![answer.to_string()];
    for c in ranked.iter().map(|(c, _)| c).chain(palette.iter()) {
        if out.len() >= shown {
            break;
        }
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// What a derived rule needs besides the regions.
pub struct DeriveInput<'a> {
    pub video_id: &'a str,
    pub task: &'a str,
    /// The task's options (CCP's palette, CPP's 30 cells) and how many an item shows.
    pub options: &'a [String],
    pub shown: Option<usize>,
    /// Colours that occur in the run with their region counts (CCP's distractors).
    pub pool: &'a [(String, u64)],
    /// Times of the video's sampled frames, by frame index.
    pub frame_times: &'a [f64],
    pub duration_secs: Option<f64>,
    pub per_video: usize,
}

fn shuffled(id: &str, options: Vec<String>, answer: usize) -> (Vec<String>, usize) {
    let perm = seeded_permutation(options.len(), id);
    let shown: Vec<String> = perm.iter().map(|i| options[*i].clone()).collect();
    let at = perm.iter().position(|i| *i == answer).unwrap_or(0);
    (shown, at)
}

/// Items of a text rule (`text_colour`, `text_cell`, `text_ranges`); a target the rule cannot
/// answer (a cell name outside the task's options) is skipped, and said in the second value.
pub fn text_items(
    rule: &str,
    regions: &[TextRegion],
    cx: &DeriveInput,
) -> (Vec<DerivedItem>, Vec<String>) {
    let (mut items, mut skipped) = (vec![], vec![]);
    for (k, t) in targets(regions).into_iter().take(cx.per_video).enumerate() {
        let key = key_region(&t);
        let item_id = format!("{}:{}:{k}", cx.video_id, cx.task);
        let mut item = DerivedItem {
            item_id: item_id.clone(),
            target_text: t.text.clone(),
            key_frame: Some(key.frame_index),
            key_time_secs: Some(key.timestamp_secs),
            options: vec![],
            answer: Answer::Count(0),
            for_review: false,
            from_columns: vec![],
        };
        let cols = |c: &[&str]| -> Vec<String> { c.iter().map(|c| format!("ocr.{c}")).collect() };
        match rule {
            "text_colour" => {
                let shown = cx.shown.unwrap_or(cx.options.len()).max(2);
                let opts = colour_options(&key.text_color, cx.pool, cx.options, shown);
                let (opts, at) = shuffled(&item_id, opts, 0);
                (item.options, item.answer) = (opts, Answer::Choice(at));
                item.from_columns = cols(&["text", "creator_added", "text_color"]);
            }
            "text_cell" => {
                let Some(i) = cx.options.iter().position(|o| *o == key.grid_cell) else {
                    skipped.push(format!(
                        "{item_id}: cell {:?} is not one of the task's options",
                        key.grid_cell
                    ));
                    continue;
                };
                (item.options, item.answer) = (cx.options.to_vec(), Answer::Choice(i));
                item.from_columns = cols(&["text", "creator_added", "grid_cell"]);
            }
            "text_ranges" => {
                item.answer = Answer::Ranges(ranges(&t, cx.frame_times, cx.duration_secs));
                (item.key_frame, item.key_time_secs) = (None, None);
                item.from_columns =
                    cols(&["text", "creator_added", "frame_index", "timestamp_secs"]);
            }
            other => {
                skipped.push(format!("{item_id}: {other} is not a text rule"));
                continue;
            }
        }
        items.push(item);
    }
    (items, skipped)
}

/// The time ranges a target is on screen: runs of consecutive sampled frames, each widened by
/// half the gap to its neighbouring samples.
fn ranges(t: &Target, times: &[f64], duration: Option<f64>) -> Vec<[f64; 2]> {
    let end = duration.unwrap_or_else(|| times.last().copied().unwrap_or(0.0));
    let time = |i: usize| times.get(i).copied();
    let before = |i: usize| match i {
        0 => 0.0,
        _ => (time(i - 1).unwrap_or(0.0) + time(i).unwrap_or(0.0)) / 2.0,
    };
    let after = |i: usize| match time(i + 1) {
        Some(n) => (time(i).unwrap_or(n) + n) / 2.0,
        None => end,
    };
    let frames: Vec<usize> = t.regions.iter().map(|r| r.frame_index as usize).collect();
    let mut out: Vec<[f64; 2]> = vec![];
    let mut run_start = frames[0];
    for w in 0..frames.len() {
        let last_of_run = frames.get(w + 1).is_none_or(|n| *n != frames[w] + 1);
        if last_of_run {
            out.push([before(run_start).max(0.0), after(frames[w]).min(end)]);
            if let Some(n) = frames.get(w + 1) {
                run_start = *n;
            }
        }
    }
    out
}

/// SAC's draft: the shot count, for people to correct.
pub fn shot_item(video_id: &str, task: &str, shots_in_video: u32) -> DerivedItem {
    DerivedItem {
        item_id: format!("{video_id}:{task}:0"),
        target_text: String::new(),
        key_frame: None,
        key_time_secs: None,
        options: vec![],
        answer: Answer::Count(shots_in_video),
        for_review: true,
        from_columns: vec!["shots.shots_in_video".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(frame: u32, t: f64, text: &str, colour: &str, cell: &str, pixels: u32) -> TextRegion {
        // Only what the rules read: the geometry and scores the OCR stage measures play no part.
        TextRegion {
            frame_index: frame,
            timestamp_secs: t,
            text: text.into(),
            grid_cell: cell.into(),
            text_color: colour.into(),
            stroke_pixels: pixels,
            creator_added: true,
            ..Default::default()
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// Video `v`, no shown count and no colour pool unless a test sets them.
    fn input<'a>(
        task: &'a str,
        options: &'a [String],
        times: &'a [f64],
        duration_secs: Option<f64>,
        per_video: usize,
    ) -> DeriveInput<'a> {
        DeriveInput {
            video_id: "v",
            task,
            options,
            shown: None,
            pool: &[],
            frame_times: times,
            duration_secs,
            per_video,
        }
    }

    #[test]
    fn colour_items_answer_the_key_regions_colour_among_colours_that_occur() {
        let regions = vec![
            region(0, 0.5, "BREAKING", "red", "top left", 100),
            region(1, 1.5, "BREAKING ", "red", "top left", 300),
            region(1, 1.5, "scene sign", "white", "middle left", 50),
        ];
        let mut regions = regions;
        regions[2].creator_added = false;
        let palette = s(&["black", "white", "gray", "red", "orange", "yellow"]);
        let pool = vec![
            ("orange".to_string(), 40),
            ("red".into(), 90),
            ("yellow".into(), 40),
        ];
        let cx = DeriveInput {
            video_id: "v1",
            shown: Some(4),
            pool: &pool,
            ..input("ccp", &palette, &[0.5, 1.5], Some(2.0), 3)
        };
        let (items, skipped) = text_items("text_colour", &regions, &cx);
        assert!(skipped.is_empty());
        assert_eq!(items.len(), 1, "scene text is no target");
        let it = &items[0];
        assert_eq!(it.target_text, "BREAKING");
        assert_eq!(it.key_frame, Some(1), "the most stroke pixels");
        let Answer::Choice(a) = it.answer else {
            panic!()
        };
        assert_eq!(it.options[a], "red");
        let mut shown = it.options.clone();
        shown.sort();
        // red, then the pool's orange and yellow (40 each: palette order), then the palette.
        assert_eq!(shown, s(&["black", "orange", "red", "yellow"]));
    }

    #[test]
    fn cell_items_answer_the_grid_cell_and_skip_one_outside_the_options() {
        let regions = vec![
            region(0, 0.5, "A", "red", "bottom center-left", 10),
            region(0, 0.5, "B", "red", "r9c9", 10),
        ];
        let cells = s(&["top far-left", "bottom center-left"]);
        let cx = input("cpp", &cells, &[0.5], None, 5);
        let (items, skipped) = text_items("text_cell", &regions, &cx);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].answer, Answer::Choice(1));
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].contains("r9c9"), "{skipped:?}");
    }

    #[test]
    fn ranges_cover_runs_of_sampled_frames_to_half_the_gap() {
        // Frames every second at 0.5, 1.5, …, 7.5; the text on frames 1–3 and 6.
        let times: Vec<f64> = (0..8).map(|i| i as f64 + 0.5).collect();
        let regions: Vec<TextRegion> = [1, 2, 3, 6]
            .iter()
            .map(|f| region(*f, times[*f as usize], "TXT", "red", "c", 5))
            .collect();
        let cx = input("keg", &[], &times, Some(8.0), 1);
        let (items, _) = text_items("text_ranges", &regions, &cx);
        assert_eq!(
            items[0].answer,
            Answer::Ranges(vec![[1.0, 4.0], [6.0, 7.0]])
        );
        // At the ends a run reaches 0 and the duration.
        let edge: Vec<TextRegion> = [0, 7]
            .iter()
            .map(|f| region(*f, times[*f as usize], "TXT", "red", "c", 5))
            .collect();
        let (items, _) = text_items("text_ranges", &edge, &cx);
        assert_eq!(
            items[0].answer,
            Answer::Ranges(vec![[0.0, 1.0], [7.0, 8.0]])
        );
    }

    #[test]
    fn a_misread_frame_stays_in_its_target_and_range() {
        // "BREAKING NEWS" on frames 0-3, read "BREAKING NEVS" on frame 2.
        let times: Vec<f64> = (0..4).map(|i| i as f64 + 0.5).collect();
        let regions: Vec<TextRegion> = [
            (0, "BREAKING NEWS"),
            (1, "BREAKING NEWS"),
            (2, "BREAKING NEVS"),
            (3, "BREAKING NEWS"),
        ]
        .iter()
        .map(|(f, t)| region(*f, times[*f as usize], t, "red", "c", 5))
        .collect();
        let t = targets(&regions);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].text, "BREAKING NEWS");
        assert_eq!(t[0].regions.len(), 4);
        let cx = input("keg", &[], &times, Some(4.0), 2);
        let (items, _) = text_items("text_ranges", &regions, &cx);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].answer, Answer::Ranges(vec![[0.0, 4.0]]));
    }

    #[test]
    fn targets_longest_on_screen_first_and_permutations_are_stable() {
        let regions = vec![
            region(0, 0.0, "short", "red", "c", 1),
            region(1, 1.0, "long", "red", "c", 1),
            region(2, 2.0, "long", "red", "c", 1),
        ];
        let t = targets(&regions);
        assert_eq!(t[0].text, "long");
        assert_eq!(t[1].text, "short");
        assert_eq!(seeded_permutation(6, "x"), seeded_permutation(6, "x"));
        let mut p = seeded_permutation(6, "y");
        p.sort();
        assert_eq!(p, (0..6).collect::<Vec<_>>());
        let item = shot_item("v", "sac", 4);
        assert!(item.for_review);
        assert_eq!(item.answer, Answer::Count(4));
    }
}
