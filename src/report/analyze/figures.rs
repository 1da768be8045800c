//! The analysis figures: one plot per distribution table (bars; the position grid as heat
//! maps) and per answer field, then `report.html` showing them with the statistics. Reads the
//! tables `analyze` computed; writes PNG and SVG files and the report; calls `report::plot`.

use super::answers::{AnswerField, FieldKind};
use super::regions::Regions;
use super::{AnalyzeError, DistRow, SHOTS, StatRow};
use crate::report::plot;
use std::collections::BTreeMap;
use std::path::Path;

/// One PNG per analysis, and `report.html` showing them with the statistics.
pub(super) fn draw(
    out_dir: &Path,
    tables: &BTreeMap<String, Vec<DistRow>>,
    groups: &[String],
    regions: &Regions,
    stats_rows: &[StatRow],
    answers: &[AnswerField],
) -> Result<(), AnalyzeError> {
    let grid = regions.grid;
    let sizes: BTreeMap<String, usize> = regions
        .groups
        .iter()
        .map(|(g, r)| (g.clone(), r.n))
        .collect();
    let mut plots = vec![];
    for (name, title, marker) in [
        ("hue_pixels", "Hue of text pixels (figure 1)", None),
        ("hue_regions", "Hue, one vote per region", None),
        ("saturation", "Saturation of text pixels (figure 16)", None),
        ("value", "Value of text pixels (figure 17)", None),
        ("area", "Region area / frame area (figure 14)", None),
        (
            "aspect_ratio",
            "Aspect ratio, threshold 15 marked (figure 15)",
            Some(15.0),
        ),
        (
            "segments",
            "Overlay text over 8 time segments (section 3.2.1)",
            None,
        ),
        (SHOTS, "Shots per video (A.2.2)", None),
    ] {
        if let Some(rows) = tables.get(name) {
            let file = format!("{name}.png");
            let b = plot::Bars {
                title,
                rows,
                groups,
                sizes: &sizes,
                marker,
            };
            plot::bars(&out_dir.join(&file), &b)?;
            plots.push((title.to_string(), file));
        }
    }
    if let Some(rows) = tables.get("position") {
        let h = plot::Heatmaps {
            title: "Position",
            rows,
            groups,
            grid,
            sizes: &sizes,
        };
        plot::heatmaps(&out_dir.join("position.png"), &h)?;
        // The report lists the figures in the paper's order: position after value.
        plots.insert(
            4.min(plots.len()),
            (
                "Position of text regions (figure 2)".to_string(),
                "position.png".to_string(),
            ),
        );
    }
    for a in answers {
        plots.push(draw_answer(out_dir, a)?);
    }
    Ok(plot::report(out_dir, &plots, &sizes, stats_rows)?)
}

/// One answer field's figure: its title and file.
fn draw_answer(out_dir: &Path, a: &AnswerField) -> Result<(String, String), AnalyzeError> {
    let file = format!("{}.png", a.name);
    let title = match a.kind {
        FieldKind::Multi => {
            format!("{}: share of videos naming each (MVFNDB figure 19)", a.name)
        }
        FieldKind::Number => format!(
            "{}: distribution of the model's scores (MVFNDB figure 18)",
            a.name
        ),
        FieldKind::Category => format!("{}: share of videos", a.name),
    };
    let answer_groups: Vec<String> = a.videos.keys().cloned().collect();
    let b = plot::Bars {
        title: &title,
        rows: &a.rows,
        groups: &answer_groups,
        sizes: &a.videos,
        marker: None,
    };
    plot::bars(&out_dir.join(&file), &b)?;
    Ok((title, file))
}
