//! Layout of a text region (MVFNDB §3.1, appendix A.1.1): normalised centre and size, area share,
//! aspect ratio, and a named cell of a rows × cols grid (default 5 × 6 = 30 positions, as the
//! benchmark's position task).

pub struct Layout {
    pub center_x: f32,
    pub center_y: f32,
    pub width: f32,
    pub height: f32,
    pub area_frac: f32,
    pub aspect_ratio: f32,
    pub grid_row: u32,
    pub grid_col: u32,
    pub grid_cell: String,
}

const ROWS5: [&str; 5] = ["top", "upper", "middle", "lower", "bottom"];
const COLS6: [&str; 6] = [
    "far-left",
    "left",
    "center-left",
    "center-right",
    "right",
    "far-right",
];

/// Name of a grid cell: words for the default 5 × 6 grid, `r{row}c{col}` for others.
pub fn cell_name(row: u32, col: u32, rows: u32, cols: u32) -> String {
    if rows == 5 && cols == 6 {
        format!("{} {}", ROWS5[row as usize], COLS6[col as usize])
    } else {
        format!("r{row}c{col}")
    }
}

pub fn measure(quad: &[[f32; 2]; 4], frame_w: u32, frame_h: u32, rows: u32, cols: u32) -> Layout {
    let (fw, fh) = (frame_w as f32, frame_h as f32);
    let d = |a: [f32; 2], b: [f32; 2]| ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt();
    let bw = (d(quad[0], quad[1]) + d(quad[3], quad[2])) / 2.0;
    let bh = (d(quad[0], quad[3]) + d(quad[1], quad[2])) / 2.0;
    let cx = quad.iter().map(|p| p[0]).sum::<f32>() / 4.0 / fw;
    let cy = quad.iter().map(|p| p[1]).sum::<f32>() / 4.0 / fh;
    let row = ((cy * rows as f32) as u32).min(rows - 1);
    let col = ((cx * cols as f32) as u32).min(cols - 1);
    Layout {
        center_x: cx,
        center_y: cy,
        width: bw / fw,
        height: bh / fh,
        area_frac: bw * bh / (fw * fh),
        aspect_ratio: bw.max(bh) / bw.min(bh).max(1.0),
        grid_row: row,
        grid_col: col,
        grid_cell: cell_name(row, col, rows, cols),
    }
}
