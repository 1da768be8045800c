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

/// OpenCV's hull order for a contour: clockwise with y taken as pointing up (negative signed
/// area), starting at the contour's first point, the blob's topmost then leftmost pixel (OpenCV
/// shifts the hull to follow the contour's indices). The calipers below depend on it numerically.
fn cv_hull_order(mut hull: Vec<[f64; 2]>) -> Vec<[f32; 2]> {
    let area: f64 = (0..hull.len())
        .map(|i| {
            let (a, b) = (hull[i], hull[(i + 1) % hull.len()]);
            a[0] * b[1] - b[0] * a[1]
        })
        .sum();
    if area > 0.0 {
        hull.reverse();
    }
    let start = (0..hull.len())
        .min_by(|&a, &b| {
            hull[a][1]
                .total_cmp(&hull[b][1])
                .then(hull[a][0].total_cmp(&hull[b][0]))
        })
        .unwrap_or(0);
    hull.rotate_left(start);
    hull.into_iter()
        .map(|p| [p[0] as f32, p[1] as f32])
        .collect()
}

/// A rotated rectangle as OpenCV's `minAreaRect` returns it (single precision throughout).
#[derive(Debug, Clone, Copy)]
struct RotRect {
    cx: f32,
    cy: f32,
    w: f32,
    h: f32,
    angle: f32,
}

/// OpenCV's `minAreaRect` (rotating calipers) re-derived in single precision, step for step, so
/// the corners carry the same rounding (e.g. 1138.9998 for 1139) that RapidOCR's integer
/// truncation then turns into a one-pixel shift: boxes come out identical to RapidOCR's.
fn cv_min_area_rect(p: &[[f32; 2]]) -> Option<RotRect> {
    let n = p.len();
    if n < 3 {
        return None;
    }
    let mut vect = vec![[0f32; 2]; n];
    let mut inv = vec![0f32; n];
    let (mut left, mut bottom, mut right, mut top) = (0, 0, 0, 0);
    let mut pt0 = p[0];
    let (mut left_x, mut right_x, mut top_y, mut bottom_y) = (pt0[0], pt0[0], pt0[1], pt0[1]);
    for i in 0..n {
        if pt0[0] < left_x {
            left_x = pt0[0];
            left = i;
        }
        if pt0[0] > right_x {
            right_x = pt0[0];
            right = i;
        }
        if pt0[1] > top_y {
            top_y = pt0[1];
            top = i;
        }
        if pt0[1] < bottom_y {
            bottom_y = pt0[1];
            bottom = i;
        }
        let pt = p[(i + 1) % n];
        let (dx, dy) = (pt[0] as f64 - pt0[0] as f64, pt[1] as f64 - pt0[1] as f64);
        vect[i] = [dx as f32, dy as f32];
        inv[i] = (1.0 / (dx * dx + dy * dy).sqrt()) as f32;
        pt0 = pt;
    }
    let mut orientation = 0f32;
    let (mut ax, mut ay) = (vect[n - 1][0] as f64, vect[n - 1][1] as f64);
    for v in &vect {
        let (bx, by) = (v[0] as f64, v[1] as f64);
        let c = ax * by - ay * bx;
        if c != 0.0 {
            orientation = if c > 0.0 { 1.0 } else { -1.0 };
            break;
        }
        (ax, ay) = (bx, by);
    }
    if orientation == 0.0 {
        return None;
    }
    let (mut base_a, mut base_b) = (orientation, 0f32);
    let mut seq = [bottom, right, top, left];
    let mut minarea = f32::MAX;
    let mut best: Option<(usize, f32, f32, f32, f32, usize)> = None;
    for _ in 0..n {
        let dp = [
            base_a * vect[seq[0]][0] + base_b * vect[seq[0]][1],
            -base_b * vect[seq[1]][0] + base_a * vect[seq[1]][1],
            -base_a * vect[seq[2]][0] - base_b * vect[seq[2]][1],
            base_b * vect[seq[3]][0] - base_a * vect[seq[3]][1],
        ];
        let mut maxcos = dp[0] * inv[seq[0]];
        let mut main = 0;
        for e in 1..4 {
            let c = dp[e] * inv[seq[e]];
            if c > maxcos {
                maxcos = c;
                main = e;
            }
        }
        let pi = seq[main];
        let (lx, ly) = (vect[pi][0] * inv[pi], vect[pi][1] * inv[pi]);
        (base_a, base_b) = match main {
            0 => (lx, ly),
            1 => (ly, -lx),
            2 => (-lx, -ly),
            _ => (-ly, lx),
        };
        seq[main] = (seq[main] + 1) % n;
        let (dx, dy) = (p[seq[1]][0] - p[seq[3]][0], p[seq[1]][1] - p[seq[3]][1]);
        let width = dx * base_a + dy * base_b;
        let (dx, dy) = (p[seq[2]][0] - p[seq[0]][0], p[seq[2]][1] - p[seq[0]][1]);
        let height = -dx * base_b + dy * base_a;
        let area = width * height;
        if area <= minarea {
            minarea = area;
            best = Some((seq[3], base_a, width, base_b, height, seq[0]));
        }
    }
    let (l, a1, w, b1, h, b) = best?;
    let (a2, b2) = (-b1, a1);
    let c1 = a1 * p[l][0] + p[l][1] * b1;
    let c2 = a2 * p[b][0] + p[b][1] * b2;
    let idet = 1.0 / (a1 * b2 - a2 * b1);
    let px = (c1 * b2 - c2 * b1) * idet;
    let py = (a1 * c2 - a2 * c1) * idet;
    let out = [px, py, a1 * w, b1 * w, a2 * h, b2 * h];
    let cx = out[0] + (out[2] + out[4]) * 0.5;
    let cy = out[1] + (out[3] + out[5]) * 0.5;
    let mut rw = ((out[2] as f64).powi(2) + (out[3] as f64).powi(2)).sqrt() as f32;
    let mut rh = ((out[4] as f64).powi(2) + (out[5] as f64).powi(2)).sqrt() as f32;
    let mut angle =
        ((out[3] as f64).atan2(out[2] as f64) as f32 as f64 * 180.0 / std::f64::consts::PI) as f32;
    // OpenCV reports an upright rectangle as angle -90 with width and height swapped.
    if angle == 0.0 {
        angle = -90.0;
        std::mem::swap(&mut rw, &mut rh);
    }
    Some(RotRect {
        cx,
        cy,
        w: rw,
        h: rh,
        angle,
    })
}

/// OpenCV's `RotatedRect::points`, in single precision.
fn cv_box_points(r: &RotRect) -> [[f32; 2]; 4] {
    let ang = r.angle as f64 * std::f64::consts::PI / 180.0;
    let b = (ang.cos() as f32) * 0.5;
    let a = (ang.sin() as f32) * 0.5;
    [
        [r.cx - a * r.h - b * r.w, r.cy + b * r.h - a * r.w],
        [r.cx + a * r.h - b * r.w, r.cy - b * r.h - a * r.w],
        [r.cx + a * r.h + b * r.w, r.cy - b * r.h + a * r.w],
        [r.cx - a * r.h + b * r.w, r.cy + b * r.h + a * r.w],
    ]
}

/// RapidOCR's `get_mini_boxes`: the minimum-area rectangle's corners ordered (top-left,
/// top-right, bottom-right, bottom-left), and its shorter side.
fn mini_box_of(points: Vec<[f64; 2]>) -> Option<(Quad, f32)> {
    let hull = cv_hull_order(convex_hull(points));
    let r = cv_min_area_rect(&hull)?;
    let mut q = cv_box_points(&r).map(|p| [p[0] as f64, p[1] as f64]);
    // A stable sort by x, as Python's sorted().
    q.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (i1, i4) = if q[1][1] > q[0][1] { (0, 1) } else { (1, 0) };
    let (i2, i3) = if q[3][1] > q[2][1] { (2, 3) } else { (3, 2) };
    Some(([q[i1], q[i2], q[i3], q[i4]], r.w.min(r.h)))
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
        let Some((rect, sside)) = mini_box_of(pts) else {
            continue;
        };
        if sside < 3.0 {
            continue;
        }
        if box_score(pred, w, h, &rect) < p.box_thresh {
            continue;
        }
        let Some((grown, sside)) = mini_box_of(unclip(&rect, p.unclip_ratio)) else {
            continue;
        };
        if sside < 5.0 {
            continue;
        }
        // numpy: float32 box / width * dest_width, rounded half to even.
        let scale = |v: f64, from: usize, to: usize| {
            ((v as f32 / from as f32 * to as f32).round_ties_even() as f64).clamp(0.0, to as f64)
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
