//! Plots of the analysis tables (plotters: PNG for papers and slides, the same plot as SVG
//! beside it) and the HTML report that shows the SVGs inline with the group sizes and the
//! statistics, so a person looks rather than reads (and a browser can measure every label).

use super::{DistRow, PlotError, StatRow};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];
const COLOURS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
];

/// Registers DejaVu Sans for plot text once (fonts-dejavu-core, installed by the setup).
fn font() -> Result<(), PlotError> {
    // The outcome of the one registration, kept as its message for every later figure.
    static FONT: OnceLock<Option<String>> = OnceLock::new();
    let failed = FONT.get_or_init(|| register_font().err().map(|e| e.to_string()));
    match failed {
        Some(m) => Err(PlotError::Draw(m.clone())),
        None => Ok(()),
    }
}

fn register_font() -> Result<(), PlotError> {
    let path = FONT_PATHS
        .iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| {
            PlotError::Draw("DejaVuSans.ttf not found: install fonts-dejavu-core".into())
        })?;
    let bytes: &'static [u8] = Box::leak(
        std::fs::read(path)
            .map_err(io(Path::new(path)))?
            .into_boxed_slice(),
    );
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| PlotError::Draw(format!("{path}: not a font")))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PlotError + '_ {
    move |source| PlotError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// The bins' labels, bin by bin.
fn bin_labels(rows: &[DistRow], nbins: usize) -> Vec<String> {
    (0..nbins)
        .map(|b| {
            rows.iter()
                .find(|r| r.bin as usize == b)
                .map(|r| r.label.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// What a bar chart shows.
pub struct Bars<'a> {
    pub title: &'a str,
    pub rows: &'a [DistRow],
    pub groups: &'a [String],
    pub sizes: &'a BTreeMap<String, usize>,
    /// A vertical line at the bin edge of this value (e.g. aspect ratio 15).
    pub marker: Option<f64>,
}

/// Grouped bars: one bar per group in each bin, heights = shares; PNG at `path`, SVG beside.
pub fn bars(path: &Path, b: &Bars) -> Result<(), PlotError> {
    font()?;
    let size = (1000, 420);
    draw_bars(BitMapBackend::new(path, size).into_drawing_area(), b)?;
    let mut svg = String::new();
    draw_bars(
        SVGBackend::with_string(&mut svg, size).into_drawing_area(),
        b,
    )?;
    write_svg(path, svg)
}

fn write_svg(png: &Path, svg: String) -> Result<(), PlotError> {
    let path = png.with_extension("svg");
    std::fs::write(&path, svg).map_err(io(&path))
}

fn draw_bars<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    b: &Bars,
) -> Result<(), PlotError> {
    let rows = b.rows;
    let nbins = rows.iter().map(|r| r.bin + 1).max().unwrap_or(1) as usize;
    // Headroom for the legend (upper right, about 20 px a group in a plot area of about 300 px),
    // so that it never hides the tallest bars.
    let legend = ((20 * b.groups.len() + 25) as f64 / 300.0).min(0.6);
    let ymax = rows.iter().map(|r| r.share).fold(0.0, f64::max).max(1e-9) / (1.0 - legend);
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(b.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..nbins as f64, 0f64..ymax)
        .map_err(err)?;
    let labels = bin_labels(rows, nbins);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(nbins.min(12))
        .x_label_formatter(&|x| labels.get(*x as usize).cloned().unwrap_or_default())
        .y_desc("share")
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err)?;
    let w = 0.8 / b.groups.len().max(1) as f64;
    for (gi, g) in b.groups.iter().enumerate() {
        let colour = COLOURS[gi % COLOURS.len()];
        chart
            .draw_series(rows.iter().filter(|r| &r.group == g).map(|r| {
                let x0 = r.bin as f64 + 0.1 + gi as f64 * w;
                Rectangle::new([(x0, 0.0), (x0 + w, r.share)], colour.filled())
            }))
            .map_err(err)?
            .label(format!(
                "{g} (n = {})",
                b.sizes.get(g).copied().unwrap_or(0)
            ))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    if let Some(edge) = b
        .marker
        .and_then(|m| rows.iter().find(|r| (r.lo - m).abs() < 1e-9))
    {
        let x = edge.bin as f64;
        let line = PathElement::new(vec![(x, 0.0), (x, ymax)], BLACK.stroke_width(2));
        chart.draw_series(std::iter::once(line)).map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// What a grid of heat maps shows: one per group of the position grid (share per cell).
pub struct Heatmaps<'a> {
    pub title: &'a str,
    pub rows: &'a [DistRow],
    pub groups: &'a [String],
    /// Rows and columns of the grid.
    pub grid: (u32, u32),
    pub sizes: &'a BTreeMap<String, usize>,
}

/// One heat map per group; PNG at `path`, SVG beside.
pub fn heatmaps(path: &Path, h: &Heatmaps) -> Result<(), PlotError> {
    font()?;
    let size = (420 * h.groups.len().max(1) as u32, 360);
    draw_heatmaps(BitMapBackend::new(path, size).into_drawing_area(), h)?;
    let mut svg = String::new();
    draw_heatmaps(
        SVGBackend::with_string(&mut svg, size).into_drawing_area(),
        h,
    )?;
    write_svg(path, svg)
}

fn draw_heatmaps<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    h: &Heatmaps,
) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((1, h.groups.len().max(1)));
    for (g, panel) in h.groups.iter().zip(panels) {
        let caption = format!(
            "{}: {g} (n = {})",
            h.title,
            h.sizes.get(g).copied().unwrap_or(0)
        );
        let (gr, gc) = h.grid;
        let chart = ChartBuilder::on(&panel)
            .caption(caption, ("sans-serif", 16))
            .margin(10)
            .build_cartesian_2d(0f64..gc as f64, gr as f64..0f64)
            .map_err(err)?;
        let cells: Vec<&DistRow> = h.rows.iter().filter(|r| &r.group == g).collect();
        heatmap_cells(chart, &cells, h.grid)?;
    }
    root.present().map_err(err)
}

type Grid<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Every cell: shaded by its share, outlined, named (row, then column, each line sized to fit
/// the cell) and labelled with its share, so the map reads without a colour scale.
fn heatmap_cells<DB: DrawingBackend>(
    mut chart: Grid<DB>,
    cells: &[&DistRow],
    (gr, gc): (u32, u32),
) -> Result<(), PlotError> {
    let max = cells.iter().map(|r| r.share).fold(0.0, f64::max).max(1e-9);
    let share = |bin: u32| cells.iter().find(|r| r.bin == bin).map_or(0.0, |r| r.share);
    let bins: Vec<(f64, f64, u32)> = (0..gr * gc)
        .map(|b| ((b % gc) as f64, (b / gc) as f64, b))
        .collect();
    chart
        .draw_series(bins.iter().map(|&(col, row, b)| {
            let t = share(b) / max;
            let c = RGBColor(255, (255.0 * (1.0 - t)) as u8, (255.0 * (1.0 - t)) as u8);
            Rectangle::new([(col, row), (col + 1.0, row + 1.0)], c.filled())
        }))
        .map_err(err)?;
    chart
        .draw_series(bins.iter().map(|&(col, row, _)| {
            Rectangle::new([(col, row), (col + 1.0, row + 1.0)], BLACK.mix(0.3))
        }))
        .map_err(err)?;
    let cell_px = chart.plotting_area().dim_in_pixel().0 as f64 / gc as f64;
    let mut texts = vec![];
    for &(col, row, b) in &bins {
        let name = crate::stages::ocr::layout::cell_name(b / gc, b % gc, gr, gc);
        let (row_name, col_name) = name.split_once(' ').unwrap_or((name.as_str(), ""));
        texts.push((format!("{:.1}%", 100.0 * share(b)), col, row + 0.7, 13));
        for (line, y) in [(row_name, 0.2), (col_name, 0.42)] {
            texts.push((
                line.to_string(),
                col,
                row + y,
                fitting(line, 10, cell_px - 6.0),
            ));
        }
    }
    chart
        .draw_series(texts.into_iter().map(|(t, col, y, size)| {
            let style = ("sans-serif", size)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Center));
            Text::new(t, (col + 0.5, y), style)
        }))
        .map_err(err)?;
    Ok(())
}

/// The largest font size up to `max` at which `text` is at most `width` pixels wide.
fn fitting(text: &str, max: u32, width: f64) -> u32 {
    (6..=max)
        .rev()
        .find(|&size| {
            let font = ("sans-serif", size).into_font();
            font.box_size(text).is_ok_and(|(w, _)| w as f64 <= width)
        })
        .unwrap_or(6)
}

/// Text for HTML: group names and labels come from users' manifests.
fn esc(s: &str) -> String {
    html_escape::encode_double_quoted_attribute(s).into_owned()
}

/// `report.html`: every plot, with group sizes and the statistics table. Every string written
/// is escaped.
pub fn report(
    dir: &Path,
    plots: &[(String, String)],
    sizes: &BTreeMap<String, usize>,
    stats: &[StatRow],
) -> Result<(), PlotError> {
    let mut h = String::from(
        "<!doctype html><meta charset=utf-8><title>vidcurate analysis</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:auto}svg{max-width:100%;height:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style>\n<h1>On-screen text by group</h1>\n<p>Creator-added text regions per group: ",
    );
    h += &sizes
        .iter()
        .map(|(g, n)| format!("<b>{}</b> {n}", esc(g)))
        .collect::<Vec<_>>()
        .join(", ");
    h += "</p>\n";
    for (title, file) in plots {
        // The SVG drawn beside the PNG, inline (plotters escapes its text); the PNG linked.
        let svg = std::fs::read_to_string(dir.join(file).with_extension("svg")).unwrap_or_default();
        let svg = svg.trim_start_matches(|c| c != '<');
        let svg = svg
            .strip_prefix("<?xml")
            .map_or(svg, |x| &x[x.find('<').unwrap_or(0)..]);
        let (title, file) = (esc(title), esc(file));
        h += &format!(
            "<h2>{title}</h2>\n<figure>{svg}<figcaption><a href=\"{file}\">{file}</a></figcaption></figure>\n"
        );
    }
    h += "<h2>Statistics</h2>\n<table><tr><th>analysis</th><th>groups</th><th>test</th><th>n</th><th>statistic</th><th>p</th><th>effect size</th></tr>\n";
    for s in stats {
        h += &format!(
            "<tr><td>{}</td></tr>
",
            s.cells()
                .iter()
                .map(|c| esc(c))
                .collect::<Vec<_>>()
                .join("</td><td>")
        );
    }
    h += "</table>\n<p>KS: two-sample Kolmogorov–Smirnov on per-region values, effect size D. Chi-square: homogeneity of the binned counts, effect size Cramér's V.</p>\n";
    let path = dir.join("report.html");
    std::fs::write(&path, h).map_err(io(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_escapes_every_string_from_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let evil = "<script>alert(1)</script>";
        let sizes = BTreeMap::from([(evil.to_string(), 3usize), ("real\"x".to_string(), 2)]);
        let stats = vec![StatRow {
            analysis: "hue".into(),
            group_a: evil.into(),
            group_b: "real\"x".into(),
            test: "ks".into(),
            n_a: 3,
            n_b: 2,
            statistic: 0.5,
            p_value: 0.1,
            effect_size: 0.5,
        }];
        let plots = vec![(format!("hue {evil}"), "hue.png".to_string())];
        report(dir.path(), &plots, &sizes, &stats).unwrap();
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        assert!(!html.contains("<script>"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(!html.contains("real\"x"), "{html}");
    }
}
