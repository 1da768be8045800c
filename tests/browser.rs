//! `report.html` in a real browser: headless Chromium (Debian's package, installed by
//! scripts/setup.sh) lays the report out, and a script added to a copy of it measures every
//! label of every inline plot against the cell or plot it belongs to, checks that no legend
//! covers a bar, and loads every linked PNG. A screenshot of the report is kept under target/tmp for a person to look at.

use std::path::{Path, PathBuf};
use std::process::Command;

const CHECK: &str = r#"
<pre id="vidcurate-check"></pre>
<script>
(async () => {
  const out = { svgs: 0, texts: 0, pngs: 0, loaded: 0, problems: [] };
  const r = b => `${b.x.toFixed(1)},${b.y.toFixed(1)} ${b.width.toFixed(1)}x${b.height.toFixed(1)}`;
  // An element's box in its plot's coordinates, its own transform (a rotated axis name) applied.
  const boxIn = (svg, e) => {
    const b = e.getBBox();
    const m = svg.getScreenCTM().inverse().multiply(e.getScreenCTM());
    const ps = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
      .map(([x, y]) => new DOMPoint(x, y).matrixTransform(m));
    const xs = ps.map(p => p.x), ys = ps.map(p => p.y);
    const [x, y] = [Math.min(...xs), Math.min(...ys)];
    return { x, y, width: Math.max(...xs) - x, height: Math.max(...ys) - y };
  };
  for (const svg of document.querySelectorAll('figure svg')) {
    out.svgs++;
    const vb = svg.viewBox.baseVal;
    const plot = { x: 0, y: 0, width: vb.width, height: vb.height };
    const title = svg.closest('figure').previousElementSibling.textContent;
    // A label belongs to the smallest filled box its centre lies in (a grid cell, the legend),
    // else to the plot; it must fit there.
    const boxes = [...svg.querySelectorAll('rect')].map(e => boxIn(svg, e))
      .filter(b => b.width < plot.width - 1 || b.height < plot.height - 1);
    const homes = new Set();
    for (const t of svg.querySelectorAll('text')) {
      if (!t.textContent.trim()) continue;
      out.texts++;
      const b = boxIn(svg, t);
      const [cx, cy] = [b.x + b.width / 2, b.y + b.height / 2];
      const home = boxes
        .filter(o => o.x <= cx && cx <= o.x + o.width && o.y <= cy && cy <= o.y + o.height)
        .sort((p, q) => p.width * p.height - q.width * q.height)[0] || plot;
      if (home !== plot) homes.add(home);
      const tol = 1;
      if (b.x < home.x - tol || b.y < home.y - tol || b.x + b.width > home.x + home.width + tol
          || b.y + b.height > home.y + home.height + tol) {
        out.problems.push(`${title}: "${t.textContent}" at ${r(b)} runs outside ${home === plot ? 'the plot' : 'its box'} ${r(home)}`);
      }
    }
    // A box that holds labels (the legend) hides no data: no box without labels (a bar)
    // overlaps it, other than the ones inside it (its colour swatches) or the same box drawn
    // again (a cell's outline).
    const inside = (a, o) => a.x >= o.x - 1 && a.y >= o.y - 1 && a.x + a.width <= o.x + o.width + 1
      && a.y + a.height <= o.y + o.height + 1;
    const meet = (a, o) => a.x < o.x + o.width - 1 && o.x < a.x + a.width - 1
      && a.y < o.y + o.height - 1 && o.y < a.y + a.height - 1;
    for (const h of homes) {
      const hidden = boxes.filter(o => !homes.has(o) && meet(o, h) && !inside(o, h) && !inside(h, o));
      if (hidden.length) out.problems.push(`${title}: the labels' box ${r(h)} covers ${hidden.length} bars, e.g. ${r(hidden[0])}`);
    }
  }
  for (const a of document.querySelectorAll('a[href$=".png"]')) {
    out.pngs++;
    const img = new Image();
    await new Promise(done => { img.onload = img.onerror = done; img.src = a.href; });
    if (img.naturalWidth > 0) out.loaded++; else out.problems.push(`${a.href} does not load`);
  }
  document.getElementById('vidcurate-check').textContent = JSON.stringify(out);
})();
</script>
"#;

/// What the browser found in a report.
#[derive(Debug)]
pub struct Checked {
    pub svgs: u64,
    pub texts: u64,
    pub pngs: u64,
    pub loaded: u64,
    pub problems: Vec<String>,
}

fn chromium(args: &[&str], profile: &Path) -> std::process::Output {
    let bin = Path::new("/usr/bin/chromium");
    assert!(
        bin.exists(),
        "chromium is not installed: run ./scripts/setup.sh (it installs Debian's chromium)"
    );
    Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .unwrap()
}

/// Opens `report` (a report.html beside its plots) in headless Chromium, measures it, and keeps
/// a screenshot at `screenshot`.
pub fn check_report(report: &Path, screenshot: &Path) -> Checked {
    let profile = tempfile::tempdir().unwrap();
    let copy = report.with_file_name("report-browser-check.html");
    let html = std::fs::read_to_string(report).unwrap();
    std::fs::write(&copy, html + CHECK).unwrap();
    let url = format!("file://{}", copy.display());
    let o = chromium(
        &["--virtual-time-budget=20000", "--dump-dom", &url],
        profile.path(),
    );
    let dom = String::from_utf8_lossy(&o.stdout);
    let json = dom
        .split("<pre id=\"vidcurate-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "no result from chromium: {}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
    let v: serde_json::Value =
        serde_json::from_str(&json.replace("&quot;", "\"").replace("&amp;", "&"))
            .unwrap_or_else(|e| panic!("{e}: {json}"));
    std::fs::remove_file(&copy).unwrap();
    if let Some(dir) = screenshot.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let shot = format!("--screenshot={}", screenshot.display());
    let o = chromium(
        &[
            &shot,
            "--window-size=1200,5600",
            &format!("file://{}", report.display()),
        ],
        profile.path(),
    );
    assert!(
        screenshot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let n = |k: &str| v[k].as_u64().unwrap();
    Checked {
        svgs: n("svgs"),
        texts: n("texts"),
        pngs: n("pngs"),
        loaded: n("loaded"),
        problems: v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect(),
    }
}

/// Where a test keeps its screenshot: target/tmp/NAME.png.
pub fn screenshot_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.png"))
}
