//! Creator-added text (editor overlays) vs text filmed in the scene. MVFNDB removed scene text by
//! hand; we decide per region, over all the video's sampled frames, from signals that hold for
//! overlays:
//!
//! | signal | weight | holds when |
//! |---|---|---|
//! | persistent | 0.45 | the same text (≥ 80 % similar) sits at the same place (centre within 1 % of the frame) in another sampled frame |
//! | axis-aligned | 0.20 | the box's top edge is within 2° of horizontal |
//! | uniform colour | 0.20 | the strokes' hue spread < 20° and value spread < 0.12 |
//! | band or box | 0.15 | the centre is in the top 15 % or bottom 25 % of the frame, or the background behind it is a flat box (lightness std < 4) |
//! | moves | −0.45 | the same text appears elsewhere (> 2 % away) in another frame: scene text, or a moving camera |
//!
//! `creator_added` = score ≥ 0.5. The evidence column lists the signals that held.

use crate::record::TextRegion;

use crate::engines::ocr::text::{normalise, similarity};

/// Per-region colour facts the rule needs besides the region itself.
pub struct ColourFacts {
    pub hue_spread: f32,
    pub val_spread: f32,
    pub bg_uniformity: f32,
}

/// Sets `creator_added`, `creator_score` and `creator_evidence` on every region of one video.
pub fn classify(regions: &mut [TextRegion], colour: &[ColourFacts]) {
    let norm: Vec<String> = regions.iter().map(|r| normalise(&r.text)).collect();
    let mut verdicts = Vec::with_capacity(regions.len());
    for (i, r) in regions.iter().enumerate() {
        let (mut same_place, mut moved) = (0u32, false);
        for (j, o) in regions.iter().enumerate() {
            if o.frame_index == r.frame_index
                || norm[i].is_empty()
                || similarity(&norm[i], &norm[j]) < 0.8
            {
                continue;
            }
            let (dx, dy) = (
                (o.center_x - r.center_x).abs(),
                (o.center_y - r.center_y).abs(),
            );
            if dx <= 0.01 && dy <= 0.01 {
                same_place += 1;
            } else if dx > 0.02 || dy > 0.02 {
                moved = true;
            }
        }
        let q = &r.quad;
        let angle = (q[3] - q[1]).atan2(q[2] - q[0]).to_degrees().abs();
        let axis = angle <= 2.0 || (angle - 180.0).abs() <= 2.0;
        let c = &colour[i];
        let uniform = c.hue_spread < 20.0 && c.val_spread < 0.12;
        let band = r.center_y < 0.15 || r.center_y > 0.75 || c.bg_uniformity < 4.0;
        let band_kind = if c.bg_uniformity < 4.0 {
            "on_box"
        } else {
            "overlay_band"
        };
        let mut score: f32 = 0.0;
        let mut evidence = vec![];
        // The signals of the table above, in its order.
        for (held, weight, name) in [
            (
                same_place > 0,
                0.45,
                format!("persistent({} frames)", same_place + 1),
            ),
            (axis, 0.2, "axis_aligned".to_string()),
            (uniform, 0.2, "uniform_colour".to_string()),
            (band, 0.15, band_kind.to_string()),
            (moved, -0.45, "moves".to_string()),
        ] {
            if held {
                score += weight;
                evidence.push(name);
            }
        }
        let score = score.clamp(0.0, 1.0);
        verdicts.push((score >= 0.5, score, evidence.join(" ")));
    }
    for (r, (added, score, evidence)) in regions.iter_mut().zip(verdicts) {
        r.creator_added = added;
        r.creator_score = score;
        r.creator_evidence = evidence;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similarity_tolerates_one_misread_character() {
        assert!(similarity("breakingnews", "breakingncws") >= 0.9);
        assert!(similarity("exit", "hotel") < 0.5);
    }
}
