//! DB (differentiable binarisation) post-processing, as RapidOCR 1.4.4 does it: threshold the
//! probability map, dilate 2×2, take each connected blob's minimum-area rectangle, score it by the
//! mean probability inside, grow it by area·ratio/perimeter ("unclip"), scale to the image.

mod rect;

use rect::mini_box_of;

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

/// The box grown by `area × ratio / perimeter`, as pyclipper (Clipper 6.4, `JT_ROUND`,
/// `ET_CLOSEDPOLYGON`, arc tolerance 0.25) does it for RapidOCR: the input corners truncated to
/// integers, each edge moved out along its normal, the corners joined by arcs, every point
/// rounded half away from zero. On tilted boxes the rounded arc and edge points, not the
/// rectangle's corners, decide the minimum-area rectangle taken next.
fn unclip(q: &Quad, ratio: f64) -> Vec<[f64; 2]> {
    let area = 0.5
        * (0..4)
            .map(|i| q[i][0] * q[(i + 1) % 4][1] - q[(i + 1) % 4][0] * q[i][1])
            .sum::<f64>()
            .abs();
    let side = |a: [f64; 2], b: [f64; 2]| ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt();
    let perimeter: f64 = (0..4).map(|i| side(q[i], q[(i + 1) % 4])).sum();
    if perimeter == 0.0 {
        return q.to_vec();
    }
    let delta = area * ratio / perimeter;
    let mut src: Vec<[f64; 2]> = q.iter().map(|p| [p[0].trunc(), p[1].trunc()]).collect();
    src.dedup();
    while src.len() > 1 && src.first() == src.last() {
        src.pop();
    }
    if src.len() < 3 || delta <= 0.0 {
        return src;
    }
    offset_round(src, delta)
}

/// Clipper's round offset of a closed polygon by `delta`: each edge moved out along its
/// normal, the corners joined by arcs (arc tolerance 0.25), every point rounded.
fn offset_round(mut src: Vec<[f64; 2]>, delta: f64) -> Vec<[f64; 2]> {
    // Clipper offsets positively oriented polygons (its Area() >= 0); it reverses the others.
    let clipper_area = -0.5
        * (0..src.len())
            .map(|i| {
                let j = (i + src.len() - 1) % src.len();
                (src[j][0] + src[i][0]) * (src[j][1] - src[i][1])
            })
            .sum::<f64>();
    if clipper_area < 0.0 {
        src.reverse();
    }
    let n = src.len();
    let normal = |a: [f64; 2], b: [f64; 2]| {
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        if dx == 0.0 && dy == 0.0 {
            return [0.0, 0.0];
        }
        let f = 1.0 / (dx * dx + dy * dy).sqrt();
        [dy * f, -dx * f]
    };
    let normals: Vec<[f64; 2]> = (0..n).map(|j| normal(src[j], src[(j + 1) % n])).collect();
    let y = if 0.25 > delta * 0.25 {
        delta * 0.25
    } else {
        0.25
    };
    let mut steps = std::f64::consts::PI / (1.0 - y / delta).acos();
    if steps > delta * std::f64::consts::PI {
        steps = delta * std::f64::consts::PI;
    }
    let (sin, cos) = (
        (2.0 * std::f64::consts::PI / steps).sin(),
        (2.0 * std::f64::consts::PI / steps).cos(),
    );
    let steps_per_rad = steps / (2.0 * std::f64::consts::PI);
    let at =
        |p: [f64; 2], v: [f64; 2]| [(p[0] + v[0] * delta).round(), (p[1] + v[1] * delta).round()];
    let mut out = vec![];
    let mut k = n - 1;
    for j in 0..n {
        let (nk, nj) = (normals[k], normals[j]);
        let mut sin_a = nk[0] * nj[1] - nj[0] * nk[1];
        let cos_a = nk[0] * nj[0] + nk[1] * nj[1];
        if (sin_a * delta).abs() < 1.0 {
            if cos_a > 0.0 {
                out.push(at(src[j], nk));
                k = j;
                continue;
            }
        } else {
            sin_a = sin_a.clamp(-1.0, 1.0);
        }
        if sin_a * delta < 0.0 {
            out.push(at(src[j], nk));
            out.push(src[j]);
            out.push(at(src[j], nj));
        } else {
            let a = sin_a.atan2(cos_a);
            let count = ((steps_per_rad * a.abs()).round() as i64).max(1);
            let (mut x, mut yv) = (nk[0], nk[1]);
            for _ in 0..count {
                out.push(at(src[j], [x, yv]));
                let x2 = x;
                x = x * cos - sin * yv;
                yv = x2 * sin + yv * cos;
            }
            out.push(at(src[j], nj));
        }
        k = j;
    }
    out
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
        dilate_2x2(&mut bitmap, w, h);
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
        let rows = component_rows(&bitmap, &mut label, &mut stack, w, h, start, next);
        let pts: Vec<[f64; 2]> = rows
            .iter()
            .flat_map(|(&y, &(a, b))| [[a as f64, y as f64], [b as f64, y as f64]])
            .collect();
        if let Some(grown) = scored_grown_box(pred, w, h, pts, p) {
            // numpy: float32 box / width * dest_width, rounded half to even.
            let scale = |v: f64, from: usize, to: usize| {
                ((v as f32 / from as f32 * to as f32).round_ties_even() as f64)
                    .clamp(0.0, to as f64)
            };
            boxes.push(grown.map(|q| [scale(q[0], w, dest_w), scale(q[1], h, dest_h)]));
        }
    }
    boxes
}

/// OpenCV's 2×2 dilation of a `w`×`h` bitmap, in place.
fn dilate_2x2(bitmap: &mut [u8], w: usize, h: usize) {
    // OpenCV's 2×2 kernel has its anchor at (1, 1): each pixel takes the max of itself and
    // its left, upper and upper-left neighbours.
    let src = bitmap.to_vec();
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

/// Labels the 8-connected blob of `bitmap` that holds `start` with `id`; the leftmost and
/// rightmost x of each of its rows, by row.
fn component_rows(
    bitmap: &[u8],
    label: &mut [u32],
    stack: &mut Vec<usize>,
    w: usize,
    h: usize,
    start: usize,
    id: u32,
) -> std::collections::BTreeMap<usize, (usize, usize)> {
    let mut rows: std::collections::BTreeMap<usize, (usize, usize)> = Default::default();
    label[start] = id;
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
                    label[j] = id;
                    stack.push(j);
                }
            }
        }
    }
    rows
}

/// The blob's rectangle grown by `unclip_ratio`, in map coordinates, unless the blob is too
/// thin or too faint to be text.
fn scored_grown_box(
    pred: &[f32],
    w: usize,
    h: usize,
    pts: Vec<[f64; 2]>,
    p: &DbParams,
) -> Option<Quad> {
    let (rect, sside) = mini_box_of(pts)?;
    if sside < 3.0 {
        return None;
    }
    if box_score(pred, w, h, &rect) < p.box_thresh {
        return None;
    }
    let (grown, sside) = mini_box_of(unclip(&rect, p.unclip_ratio))?;
    if sside < 5.0 {
        return None;
    }
    Some(grown)
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
    fn unclip_gives_pyclippers_points_on_a_tilted_box() {
        // Reference: pyclipper 1.3 in RapidOCR 1.4.4's environment, JT_ROUND, ET_CLOSEDPOLYGON,
        // distance from shapely as RapidOCR computes it (22.87435).
        let q: Quad = [[10.3, 20.7], [200.9, 12.2], [202.4, 45.8], [11.8, 54.3]];
        let mut got: Vec<(i64, i64)> = unclip(&q, 1.6)
            .iter()
            .map(|p| (p[0] as i64, p[1] as i64))
            .collect();
        got.sort();
        let want = vec![
            (-13, 21),
            (-12, 14),
            (-12, 55),
            (-10, 64),
            (-9, 8),
            (-6, 69),
            (-5, 3),
            (-1, 74),
            (1, -1),
            (5, 76),
            (9, -3),
            (12, 77),
            (199, -11),
            (203, 68),
            (206, -10),
            (212, -8),
            (212, 66),
            (217, -3),
            (217, 62),
            (221, 2),
            (222, 57),
            (223, 11),
            (224, 50),
            (225, 44),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn min_area_rect_of_a_tilted_square() {
        let (q, s) = mini_box_of(vec![[0.0, 5.0], [5.0, 0.0], [10.0, 5.0], [5.0, 10.0]]).unwrap();
        assert!((s as f64 - 50f64.sqrt()).abs() < 1e-5, "{q:?} {s}");
    }

    #[test]
    fn upright_rectangles_carry_opencvs_single_precision_corners() {
        // What cv2.minAreaRect + cv2.boxPoints give for this 12-point hull (OpenCV 5.0):
        // corners just below the integers, which RapidOCR's truncation turns into a 1 px shift.
        let hull = vec![
            [1143.0, 324.0],
            [1140.0, 325.0],
            [1139.0, 327.0],
            [1139.0, 333.0],
            [1140.0, 334.0],
            [1143.0, 335.0],
            [1156.0, 336.0],
            [1271.0, 336.0],
            [1272.0, 335.0],
            [1272.0, 327.0],
            [1270.0, 325.0],
            [1184.0, 324.0],
        ];
        let (q, s) = mini_box_of(hull).unwrap();
        assert_eq!(q[0], [1138.9998779296875, 323.9999694824219]);
        assert_eq!(q[2], [1271.9998779296875, 335.9999694824219]);
        assert_eq!(s, 11.999998);
    }
}
