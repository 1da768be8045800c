//! `vidcurate overlap RELEASE --against OTHER…`: the videos and items a release shares with
//! other releases or id lists, and between its own splits (leakage), as a table, a CSV or
//! Parquet file, or JSON, with an exit code a script can gate on. The matching is
//! `benchmark::overlap`; this file reads the flags, prints and writes.
//!
//! Reads: the release's `data/`, `frames/`, `questions/` and `tasks/`; each OTHER. Writes:
//! `--out` only. Calls nothing.

use crate::benchmark::overlap::{self, Overlap, Thresholds, load};
use crate::error::{Exit, RunError, io};
use std::path::{Path, PathBuf};

/// Videos and questions a release shares with other releases or id lists, or between its own
/// splits.
///
/// Three checks. By id: the same YouTube id (bare ids and every URL form are reduced to the
/// id; other ids compare as written). By frames: each released frame gets a 64-bit perceptual
/// hash (DCT of a 32×32 grey thumbnail; flat frames are skipped), and so do its centre 90 %
/// and 80 %; two videos share footage when at least --min-share of the frames of the one with
/// fewer frames (and at least --min-frames) have a frame in the other within --max-distance
/// bits (whole frame or centre view, on either side); order and count do not matter, so
/// re-uploads, re-encodes at another size and even crops of up to ~12 % a side match
/// (lopsided crops, mirrored or overlaid copies may not). By
/// questions: the multiple-choice questions and the drafted task items, question plus options,
/// whose character-trigram Jaccard index reaches --min-similarity (case, spaces and
/// punctuation ignored); items whose question is their task's template are left out.
///
/// Leakage: the same three checks between the release's own splits (train against test, …),
/// unless --no-leakage.
///
/// Cost: reading the frames dominates (a JPEG decode and three hashes a frame, on every core).
/// Frames are matched through multi-index
/// hashing (four 16-bit chunks; ⌊d/4⌋-bit neighbourhoods probed): at the default distance a
/// hash costs 548 table lookups plus its true neighbours, whatever the size of the other
/// side, where comparing all pairs would cost one comparison per stored hash (10¹⁰ for
/// 100,000 frames against 100,000). Questions go through prefix filtering on their rarest
/// trigrams. Both find every pair within the thresholds.
///
/// Exit codes: 0 no overlap; 1 overlap found (the table lists it); 2 bad input (a RELEASE that
/// is not a release folder, an OTHER that is neither a release nor an id list, a bad flag).
#[derive(clap::Args)]
#[command(
    after_help = "OTHER is a release folder (data/*.parquet), a text file of YouTube ids or URLs (one a line; # starts a comment), or a CSV or Parquet file with a video_id column (and optionally url).\n\nExamples:\n  vidcurate overlap data/releases/demo\n  vidcurate overlap data/releases/demo --against data/releases/other videomme_ids.txt\n  vidcurate overlap data/releases/demo --against mvbench.csv --out overlap.csv\n  vidcurate overlap data/releases/demo --against ids.txt --json --no-frames || echo \"overlap: see the table\""
)]
pub struct Args {
    /// The release folder to check (`vidcurate release --out`).
    pub release: PathBuf,
    /// Other releases or id lists to compare with; none: only the release's own splits.
    #[arg(long, num_args = 1.., value_name = "OTHER")]
    pub against: Vec<PathBuf>,
    /// Bits (of 64) two frame hashes may differ by and still be the same picture. A
    /// re-encode or resize moves 0–4; an even crop of up to ~12 % a side, compared through
    /// the frames' centre views, 0–6; unrelated pictures differ by about 32 (half the bits).
    /// Higher finds harder edits and more false matches.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=32))]
    pub max_distance: u32,
    /// Share of the shorter video's frames that must have a near frame in the other (0 to 1).
    #[arg(long, default_value_t = 0.5)]
    pub min_share: f64,
    /// Frames that must match, at least (all of them when a video has fewer): one shared
    /// frame (a logo card, a title slate) is not a shared video.
    #[arg(long, default_value_t = 2)]
    pub min_frames: usize,
    /// How alike two items' question and options must be (character-trigram Jaccard, 0 to
    /// 1). 1 is the same text up to case, spaces and punctuation; a question reworded in a
    /// few words with the same options stays above 0.7. Lower finds looser rewordings
    /// and more questions that merely share a template.
    #[arg(long, default_value_t = 0.7)]
    pub min_similarity: f64,
    /// Skip the check between the release's own splits.
    #[arg(long)]
    pub no_leakage: bool,
    /// Skip the frames (ids and questions only: seconds instead of minutes).
    #[arg(long)]
    pub no_frames: bool,
    /// Write the matches to this file: .csv or .parquet (with its columns even when empty).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the matches and counts as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn share(name: &str, v: f64) -> Result<(), RunError> {
    if !(0.0..=1.0).contains(&v) || v.is_nan() {
        return Err(RunError::Config(format!(
            "--{name} {v}: expected a number from 0 to 1"
        )));
    }
    Ok(())
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    share("min-share", a.min_share)?;
    share("min-similarity", a.min_similarity)?;
    if let Some(out) = &a.out {
        out_format(out)?;
    }
    let t = Thresholds {
        max_distance: a.max_distance,
        min_share: a.min_share,
        min_frames: a.min_frames,
        min_similarity: a.min_similarity,
    };
    let ours = load::open(&a.release, !a.no_frames)?;
    if ours.kind != load::Kind::Release {
        return Err(RunError::Config(format!(
            "{}: not a release folder (no data/*.parquet): the first argument is the release to check; id lists go after --against",
            a.release.display()
        )));
    }
    // Every OTHER is read before any matching, so a bad one fails at once.
    let others = a
        .against
        .iter()
        .map(|p| load::open(p, !a.no_frames))
        .collect::<Result<Vec<_>, _>>()?;
    let mut found: Vec<Overlap> = vec![];
    for other in &others {
        found.extend(overlap::against(&ours, other, &t));
    }
    if !a.no_leakage {
        found.extend(overlap::leakage(&ours, &t));
    }
    if let Some(out) = &a.out {
        write(out, &found)?;
    }
    if a.json {
        let counts: serde_json::Map<String, serde_json::Value> = overlap::KINDS
            .iter()
            .map(|k| {
                (
                    k.to_string(),
                    found.iter().filter(|o| o.kind == *k).count().into(),
                )
            })
            .collect();
        let v = serde_json::json!({ "matches": found, "counts": counts });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print_table(&ours, &others, &found, !a.no_leakage);
    }
    Ok(if found.is_empty() {
        Exit::Done
    } else {
        Exit::Found
    })
}

fn side(split: &Option<String>, video: &str, item: &Option<String>) -> String {
    let mut s = match split {
        Some(x) => format!("{x}/{video}"),
        None => video.to_string(),
    };
    if let Some(i) = item {
        s = format!("{s} {i}");
    }
    s
}

fn evidence(o: &Overlap) -> String {
    match o.kind.as_str() {
        "frames" => format!(
            "{}/{} frames, median {} bits",
            o.frames_matched.unwrap_or(0),
            o.frames_compared.unwrap_or(0),
            o.distance.unwrap_or(0)
        ),
        "question" => format!("similarity {:.3}", o.similarity.unwrap_or(0.0)),
        _ => "same id".into(),
    }
}

fn print_table(ours: &load::Collection, others: &[load::Collection], found: &[Overlap], own: bool) {
    let rows: Vec<[String; 5]> = found
        .iter()
        .map(|o| {
            [
                o.kind.clone(),
                o.against.clone(),
                side(&o.ours_split, &o.ours_video, &o.ours_item),
                side(&o.theirs_split, &o.theirs_video, &o.theirs_item),
                evidence(o),
            ]
        })
        .collect();
    let head = ["kind", "against", "ours", "theirs", "evidence"];
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (k, c) in r.iter().enumerate() {
            w[k] = w[k].max(c.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut s = String::new();
        for (k, c) in cells.iter().enumerate() {
            if k + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<width$}  ", width = w[k]));
            }
        }
        println!("{}", s.trim_end());
    };
    if !rows.is_empty() {
        line(&head);
        for r in &rows {
            line(&r.iter().map(String::as_str).collect::<Vec<_>>());
        }
        println!();
    }
    let frames: usize = ours.videos.iter().map(|v| v.hashes.len()).sum();
    println!(
        "{}: {} videos ({frames} frames hashed), {} items",
        ours.name,
        ours.videos.len(),
        ours.items.len()
    );
    let mut scopes: Vec<&str> = others.iter().map(|o| o.name.as_str()).collect();
    if own {
        scopes.push(overlap::OWN_SPLITS);
    }
    for s in scopes {
        let of = |k: &str| {
            found
                .iter()
                .filter(|o| o.against == s && o.kind == k)
                .count()
        };
        println!(
            "against {s}: {} by id, {} by frames, {} by question",
            of("id"),
            of("frames"),
            of("question")
        );
    }
    if found.is_empty() {
        println!("no overlap");
    }
}

#[derive(PartialEq)]
enum Format {
    Csv,
    Parquet,
}

fn out_format(path: &Path) -> Result<Format, RunError> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("csv") => Ok(Format::Csv),
        Some("parquet") => Ok(Format::Parquet),
        _ => Err(RunError::Config(format!(
            "--out {}: expected a file ending in .csv or .parquet",
            path.display()
        ))),
    }
}

fn write(path: &Path, found: &[Overlap]) -> Result<(), RunError> {
    let bytes = if out_format(path)? == Format::Csv {
        let mut w = csv::Writer::from_writer(vec![]);
        if found.is_empty() {
            // The header alone: serialize writes it with the first row.
            let fields = crate::store::shards::fields_of::<Overlap>()?;
            w.write_record(fields.iter().map(|f| f.name().as_str()))
                .map_err(|e| RunError::Internal(e.to_string()))?;
        }
        for o in found {
            w.serialize(o)
                .map_err(|e| RunError::Internal(e.to_string()))?;
        }
        w.into_inner()
            .map_err(|e| RunError::Internal(e.to_string()))?
    } else {
        let fields = crate::store::shards::fields_of::<Overlap>()?;
        let batch = serde_arrow::to_record_batch(&fields, &found)
            .map_err(|e| RunError::Internal(format!("overlap rows: {e}")))?;
        crate::store::shards::encode_table(&batch)?
    };
    crate::store::write_file(path, &bytes).map_err(io(path))
}
