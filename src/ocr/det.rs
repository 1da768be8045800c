//! DB (differentiable binarisation) post-processing, as RapidOCR 1.4.4 does it: threshold the
//! probability map, dilate 2×2, take each connected blob's minimum-area rectangle, score it by the
//! mean probability inside, grow it by area·ratio/perimeter ("unclip"), scale to the image.

/// Settings (RapidOCR's `config.yaml` Det section).
#[derive(Debug, Clone)]
pub struct DbParams {
    pub thresh: f32,
    pub box_thresh: f32,
    pub unclip_ratio: f64,
    pub max_candidates: usize,
    pub use_dilation: bool,
}

impl Default for DbParams {
    fn default() -> Self {
        Self {
            thresh: 0.3,
            box_thresh: 0.5,
            unclip_ratio: 1.6,
            max_candidates: 1000,
            use_dilation: true,
        }
    }
}

pub type Quad = [[f64; 2]; 4];

/// Convex hull (Andrew's monotone chain), counter-clockwise, no collinear points.
fn convex_hull(mut pts: Vec<[f64; 2]>) -> Vec<[f64; 2]> {
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    pts.dedup();
    if pts.len() < 3 {
        return pts;
    }
    let cross = |o: [f64; 2], a: [f64; 2], b: [f64; 2]| {
        (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    };
    let mut lower: Vec<[f64; 2]> = vec![];
    for &p in &pts {
        while lower.len() >= 2 && cross(lower[lower.len() - 2], lower[lower.len() - 1], p) <= 0.0 {
            lower.pop();
        }
        lower.push(p);
    }
    let mut upper: Vec<[f64; 2]> = vec![];
    for &p in pts.iter().rev() {
        while upper.len() >= 2 && cross(upper[upper.len() - 2], upper[upper.len() - 1], p) <= 0.0 {
            upper.pop();
        }
        upper.push(p);
    }
    lower.pop();
    upper.pop();
    lower.extend(upper);
    lower
}

/// Minimum-area enclosing rectangle of a hull: its 4 corners and its shorter side.
fn min_area_rect(hull: &[[f64; 2]]) -> Option<(Quad, f64)> {
    if hull.len() < 2 {
        return None;
    }
    let mut best: Option<(f64, Quad, f64)> = None;
    for i in 0..hull.len() {
        let (a, b) = (hull[i], hull[(i + 1) % hull.len()]);
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        let len = (dx * dx + dy * dy).sqrt();
        if len == 0.0 {
            continue;
        }
        let (ux, uy) = (dx / len, dy / len);
        let (mut lo_u, mut hi_u, mut lo_v, mut hi_v) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for p in hull {
            let u = p[0] * ux + p[1] * uy;
            let v = -p[0] * uy + p[1] * ux;
            lo_u = lo_u.min(u);
            hi_u = hi_u.max(u);
            lo_v = lo_v.min(v);
            hi_v = hi_v.max(v);
        }
        let area = (hi_u - lo_u) * (hi_v - lo_v);
        if best.as_ref().is_none_or(|b| area < b.0 - 1e-9) {
            let corner = |u: f64, v: f64| [u * ux - v * uy, u * uy + v * ux];
            let quad = [
                corner(lo_u, lo_v),
                corner(hi_u, lo_v),
                corner(hi_u, hi_v),
                corner(lo_u, hi_v),
            ];
            best = Some((area, quad, (hi_u - lo_u).min(hi_v - lo_v)));
        }
    }
    best.map(|(_, q, s)| (q, s))
}

/// Orders rectangle corners as RapidOCR's `get_mini_boxes`: sort by x, then the left pair and the
/// right pair by y, giving (top-left, top-right, bottom-right, bottom-left).
fn mini_box(mut q: Quad) -> Quad {
    q.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (i1, i4) = if q[1][1] > q[0][1] { (0, 1) } else { (1, 0) };
    let (i2, i3) = if q[3][1] > q[2][1] { (2, 3) } else { (3, 2) };
    [q[i1], q[i2], q[i3], q[i4]]
}

/// Mean of `pred` inside the polygon (pixel centres inside or on the border), over its bounding box.
fn box_score(pred: &[f32], w: usize, h: usize, q: &Quad) -> f32 {
    let xs = q.iter().map(|p| p[0]);
    let ys = q.iter().map(|p| p[1]);
    let xmin = (xs.clone().fold(f64::MAX, f64::min).floor() as i64).clamp(0, w as i64 - 1) as usize;
    let xmax = (xs.fold(f64::MIN, f64::max).ceil() as i64).clamp(0, w as i64 - 1) as usize;
    let ymin = (ys.clone().fold(f64::MAX, f64::min).floor() as i64).clamp(0, h as i64 - 1) as usize;
    let ymax = (ys.fold(f64::MIN, f64::max).ceil() as i64).clamp(0, h as i64 - 1) as usize;
    // fillPoly takes integer vertices.
    let poly: Vec<[f64; 2]> = q.iter().map(|p| [p[0].trunc(), p[1].trunc()]).collect();
    let inside = |x: f64, y: f64| {
        let mut sign = 0i32;
        for i in 0..4 {
            let (a, b) = (poly[i], poly[(i + 1) % 4]);
            let c = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0]);
            let s = if c > 1e-9 {
                1
            } else if c < -1e-9 {
                -1
            } else {
                0
            };
            if s != 0 {
                if sign != 0 && s != sign {
                    return false;
                }
                sign = s;
            }
        }
        true
    };
    let (mut sum, mut n) = (0f64, 0u64);
    for y in ymin..=ymax {
        for x in xmin..=xmax {
            if inside(x as f64, y as f64) {
                sum += pred[y * w + x] as f64;
                n += 1;
            }
        }
    }
    if n == 0 { 0.0 } else { (sum / n as f64) as f32 }
}

/// Grows a rectangle by `area·ratio/perimeter` on every side (what pyclipper's round-join offset
/// followed by a minimum-area rectangle amounts to for a rectangle).
fn unclip(q: &Quad, ratio: f64) -> (Quad, f64) {
    let side = |a: [f64; 2], b: [f64; 2]| ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt();
    let (w, h) = (side(q[0], q[1]), side(q[1], q[2]));
    let area = w * h;
    let perim = 2.0 * (w + h);
    if perim == 0.0 {
        return (*q, 0.0);
    }
    let d = area * ratio / perim;
    let c = [(q[0][0] + q[2][0]) / 2.0, (q[0][1] + q[2][1]) / 2.0];
    let (ux, uy) = (
        (q[1][0] - q[0][0]) / w.max(1e-9),
        (q[1][1] - q[0][1]) / w.max(1e-9),
    );
    let (vx, vy) = (
        (q[3][0] - q[0][0]) / h.max(1e-9),
        (q[3][1] - q[0][1]) / h.max(1e-9),
    );
    let (hw, hh) = (w / 2.0 + d, h / 2.0 + d);
    let pt = |su: f64, sv: f64| {
        [
            c[0] + su * hw * ux + sv * hh * vx,
            c[1] + su * hw * uy + sv * hh * vy,
        ]
    };
    (
        [pt(-1.0, -1.0), pt(1.0, -1.0), pt(1.0, 1.0), pt(-1.0, 1.0)],
        (w + 2.0 * d).min(h + 2.0 * d),
    )
}

/// Boxes (in the coordinates of a `dest_w`×`dest_h` image) from a `w`×`h` probability map.
pub fn boxes_from_map(
    pred: &[f32],
    w: usize,
    h: usize,
    dest_w: usize,
    dest_h: usize,
    p: &DbParams,
) -> Vec<Quad> {
    let mut bitmap: Vec<u8> = pred.iter().map(|&v| (v > p.thresh) as u8).collect();
    if p.use_dilation {
        // OpenCV's 2×2 kernel has its anchor at (1, 1): each pixel takes the max of itself and
        // its left, upper and upper-left neighbours.
        let src = bitmap.clone();
        for y in 0..h {
            for x in 0..w {
                let mut v = src[y * w + x];
                if x > 0 {
                    v |= src[y * w + x - 1];
                }
                if y > 0 {
                    v |= src[(y - 1) * w + x];
                    if x > 0 {
                        v |= src[(y - 1) * w + x - 1];
                    }
                }
                bitmap[y * w + x] = v;
            }
        }
    }
    // 8-connected components; for each, the leftmost and rightmost pixel of every row carry
    // its convex hull.
    let mut label = vec![0u32; w * h];
    let mut boxes = vec![];
    let mut next = 0u32;
    let mut stack = vec![];
    for start in 0..w * h {
        if bitmap[start] == 0 || label[start] != 0 {
            continue;
        }
        next += 1;
        if next as usize > p.max_candidates {
            break;
        }
        let mut rows: std::collections::BTreeMap<usize, (usize, usize)> = Default::default();
        label[start] = next;
        stack.push(start);
        while let Some(i) = stack.pop() {
            let (x, y) = (i % w, i / w);
            let e = rows.entry(y).or_insert((x, x));
            e.0 = e.0.min(x);
            e.1 = e.1.max(x);
            for dy in -1i64..=1 {
                for dx in -1i64..=1 {
                    let (nx, ny) = (x as i64 + dx, y as i64 + dy);
                    if nx < 0 || ny < 0 || nx >= w as i64 || ny >= h as i64 {
                        continue;
                    }
                    let j = ny as usize * w + nx as usize;
                    if bitmap[j] != 0 && label[j] == 0 {
                        label[j] = next;
                        stack.push(j);
                    }
                }
            }
        }
        let pts: Vec<[f64; 2]> = rows
            .iter()
            .flat_map(|(&y, &(a, b))| [[a as f64, y as f64], [b as f64, y as f64]])
            .collect();
        let hull = convex_hull(pts);
        let Some((rect, sside)) = min_area_rect(&hull) else {
            continue;
        };
        if sside < 3.0 {
            continue;
        }
        let rect = mini_box(rect);
        if box_score(pred, w, h, &rect) < p.box_thresh {
            continue;
        }
        // pyclipper works on integer coordinates.
        let trunc = rect.map(|q| [q[0].trunc(), q[1].trunc()]);
        let (grown, sside) = unclip(&trunc, p.unclip_ratio);
        if sside < 5.0 {
            continue;
        }
        let grown = mini_box(grown);
        let scale = |v: f64, from: usize, to: usize| {
            (v / from as f64 * to as f64).round().clamp(0.0, to as f64)
        };
        boxes.push(grown.map(|q| [scale(q[0], w, dest_w), scale(q[1], h, dest_h)]));
    }
    boxes
}

/// RapidOCR's `order_points_clockwise` + `clip_det_res` + the size filter.
pub fn tidy(boxes: Vec<Quad>, img_w: usize, img_h: usize) -> Vec<Quad> {
    boxes
        .into_iter()
        .filter_map(|b| {
            let mut xs = b;
            xs.sort_by(|a, c| a[0].total_cmp(&c[0]));
            let (mut left, mut right) = ([xs[0], xs[1]], [xs[2], xs[3]]);
            left.sort_by(|a, c| a[1].total_cmp(&c[1]));
            right.sort_by(|a, c| a[1].total_cmp(&c[1]));
            let q = [left[0], right[0], right[1], left[1]].map(|p| {
                [
                    p[0].clamp(0.0, img_w as f64 - 1.0).trunc(),
                    p[1].clamp(0.0, img_h as f64 - 1.0).trunc(),
                ]
            });
            let d =
                |a: [f64; 2], c: [f64; 2]| ((a[0] - c[0]).powi(2) + (a[1] - c[1]).powi(2)).sqrt();
            (d(q[0], q[1]) as i64 > 3 && d(q[0], q[3]) as i64 > 3).then_some(q)
        })
        .collect()
}

/// RapidOCR's reading order: by top-left y then x, with boxes on one line (|Δy| < 10) by x.
pub fn reading_order(mut boxes: Vec<Quad>) -> Vec<Quad> {
    boxes.sort_by(|a, b| {
        a[0][1]
            .total_cmp(&b[0][1])
            .then(a[0][0].total_cmp(&b[0][0]))
    });
    for i in 0..boxes.len().saturating_sub(1) {
        for j in (0..=i).rev() {
            if (boxes[j + 1][0][1] - boxes[j][0][1]).abs() < 10.0
                && boxes[j + 1][0][0] < boxes[j][0][0]
            {
                boxes.swap(j, j + 1);
            } else {
                break;
            }
        }
    }
    boxes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_becomes_its_grown_rectangle() {
        // A 40×10 block of high probability in a 100×50 map.
        let (w, h) = (100, 50);
        let mut pred = vec![0f32; w * h];
        for y in 20..30 {
            for x in 30..70 {
                pred[y * w + x] = 0.9;
            }
        }
        let p = DbParams {
            use_dilation: false,
            ..Default::default()
        };
        let boxes = boxes_from_map(&pred, w, h, w, h, &p);
        assert_eq!(boxes.len(), 1);
        let b = boxes[0];
        // Rect 39×9 (pixel centres), d = 39·9·1.6/96 = 5.85 on each side.
        assert!(
            (b[0][0] - 24.0).abs() <= 1.0 && (b[0][1] - 14.0).abs() <= 1.0,
            "{b:?}"
        );
        assert!(
            (b[2][0] - 75.0).abs() <= 1.0 && (b[2][1] - 35.0).abs() <= 1.0,
            "{b:?}"
        );
    }

    #[test]
    fn weak_blobs_and_slivers_are_dropped() {
        let (w, h) = (60, 30);
        let mut pred = vec![0f32; w * h];
        for y in 5..15 {
            for x in 5..25 {
                pred[y * w + x] = 0.4; // above thresh 0.3, below box_thresh 0.5
            }
        }
        for x in 30..55 {
            pred[20 * w + x] = 0.95; // one pixel high
        }
        assert!(boxes_from_map(&pred, w, h, w, h, &DbParams::default()).is_empty());
    }

    #[test]
    fn min_area_rect_of_a_tilted_square() {
        let hull = convex_hull(vec![[0.0, 5.0], [5.0, 0.0], [10.0, 5.0], [5.0, 10.0]]);
        let (q, s) = min_area_rect(&hull).unwrap();
        assert!((s - 50f64.sqrt()).abs() < 1e-9, "{q:?} {s}");
    }
}
