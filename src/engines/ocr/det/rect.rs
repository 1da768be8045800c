//! The minimum-area rectangle of a blob, re-derived from OpenCV step for step so its corners
//! round as RapidOCR's do.

use super::Quad;

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
    let (vect, inv, seq) = edges(p);
    let orientation = orientation(&vect);
    if orientation == 0.0 {
        return None;
    }
    Some(rect_of(p, calipers(p, &vect, &inv, seq, orientation)?))
}

/// Each edge's vector and inverse length, and the points of least y, greatest x, greatest y
/// and least x (OpenCV's `bottom, right, top, left`).
fn edges(p: &[[f32; 2]]) -> (Vec<[f32; 2]>, Vec<f32>, [usize; 4]) {
    let n = p.len();
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
    (vect, inv, [bottom, right, top, left])
}

/// The hull's turning direction: 1 or -1 from the first non-collinear pair of edges, 0 when
/// every edge is collinear.
fn orientation(vect: &[[f32; 2]]) -> f32 {
    let n = vect.len();
    let (mut ax, mut ay) = (vect[n - 1][0] as f64, vect[n - 1][1] as f64);
    for v in vect {
        let (bx, by) = (v[0] as f64, v[1] as f64);
        let c = ax * by - ay * bx;
        if c != 0.0 {
            return if c > 0.0 { 1.0 } else { -1.0 };
        }
        (ax, ay) = (bx, by);
    }
    0.0
}

/// The smallest-area placement of the calipers: (left point, base a, width, base b, height,
/// bottom point).
type Placement = (usize, f32, f32, f32, f32, usize);

/// Rotates the four calipers around the hull, one edge a step, keeping the smallest area.
fn calipers(
    p: &[[f32; 2]],
    vect: &[[f32; 2]],
    inv: &[f32],
    mut seq: [usize; 4],
    orientation: f32,
) -> Option<Placement> {
    let n = p.len();
    let (mut base_a, mut base_b) = (orientation, 0f32);
    let mut minarea = f32::MAX;
    let mut best: Option<Placement> = None;
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
    best
}

/// The rectangle of a caliper placement: its centre, sides and angle as OpenCV reports them.
fn rect_of(p: &[[f32; 2]], (l, a1, w, b1, h, b): Placement) -> RotRect {
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
    RotRect {
        cx,
        cy,
        w: rw,
        h: rh,
        angle,
    }
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
pub(super) fn mini_box_of(points: Vec<[f64; 2]>) -> Option<(Quad, f32)> {
    let hull = cv_hull_order(convex_hull(points));
    let r = cv_min_area_rect(&hull)?;
    let mut q = cv_box_points(&r).map(|p| [p[0] as f64, p[1] as f64]);
    // A stable sort by x, as Python's sorted().
    q.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (i1, i4) = if q[1][1] > q[0][1] { (0, 1) } else { (1, 0) };
    let (i2, i3) = if q[3][1] > q[2][1] { (2, 3) } else { (3, 2) };
    Some(([q[i1], q[i2], q[i3], q[i4]], r.w.min(r.h)))
}
