//! `vidcurate analyze` recovers what the demo corpus generator drew: fake overlays red (0–5°),
//! short (aspect < 15) and scattered; real captions orange (25–30°), long (> 15), in a band.

use crate::need_ffmpeg;
use crate::util::*;

#[test]
fn analyze_recovers_the_drawn_distributions() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    make_corpus(
        &d.path().join("demo"),
        &["--clips", "6", "--seconds", "3", "--seed", "11"],
    );
    let p = d.path().join("p.toml");
    write(
        &p,
        &pipeline_with(
            "manifest = \"demo/manifest.csv\"",
            "{ count = 4, jpeg_quality = 95 }",
            &[("ocr_regions", "ocr"), ("shots", "shots")],
        ),
    );
    let out = d.path().join("run");
    let o = run_into(&p, &out, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "the broken upload is rejected: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(
        &["analyze", out.to_str().unwrap(), "--by", "label"],
        d.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a = out.join("analysis/label");
    for t in [
        "hue_pixels",
        "hue_regions",
        "saturation",
        "value",
        "position",
        "area",
        "aspect_ratio",
        "segments",
        "shots",
        "stats",
    ] {
        assert!(
            a.join(format!("{t}.parquet")).exists() && a.join(format!("{t}.csv")).exists(),
            "{t}"
        );
    }
    let rows = |t: &str| table_rows_file(&a.join(format!("{t}.parquet")));
    let by_group = |t: &str, g: &str| -> Vec<(String, f64, f64)> {
        rows(t)
            .into_iter()
            .filter(|r| r["group"] == g)
            .map(|r| {
                (
                    r["label"].clone(),
                    r["hi"].parse().unwrap(),
                    r["share"].parse().unwrap(),
                )
            })
            .collect()
    };
    let peak = |t: &str, g: &str| {
        by_group(t, g)
            .into_iter()
            .max_by(|a, b| a.2.total_cmp(&b.2))
            .unwrap()
            .0
    };
    assert_eq!(peak("hue_pixels", "fake"), "0°");
    assert_eq!(peak("hue_pixels", "real"), "25°");
    let below_15 = |g: &str| {
        by_group("aspect_ratio", g)
            .iter()
            .filter(|r| r.1 <= 15.0)
            .map(|r| r.2)
            .sum::<f64>()
    };
    assert!(
        below_15("fake") > 0.9,
        "fake aspect < 15: {}",
        below_15("fake")
    );
    assert!(
        below_15("real") < 0.5,
        "real aspect < 15: {}",
        below_15("real")
    );
    let top_cell = |g: &str| {
        by_group("position", g)
            .iter()
            .map(|r| r.2)
            .fold(0.0, f64::max)
    };
    assert!(
        top_cell("real") > top_cell("fake") + 0.1,
        "real captions concentrate: {} vs {}",
        top_cell("real"),
        top_cell("fake")
    );
    for png in [
        "hue_pixels",
        "saturation",
        "value",
        "position",
        "area",
        "aspect_ratio",
        "segments",
        "shots",
    ] {
        let img =
            image::open(a.join(format!("{png}.png"))).unwrap_or_else(|e| panic!("{png}.png: {e}"));
        assert!(img.width() >= 400, "{png}.png");
    }
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(
        html.contains("hue_pixels.png")
            && html.contains("position.png")
            && html.contains("chi2_homogeneity")
    );
    // In a browser: every plot shown, every linked PNG loads, no label outside its cell or plot
    // (the position grid's 30 cell names each fit their cell).
    let shot = crate::browser::screenshot_path("analyze-report");
    let seen = crate::browser::check_report(&a.join("report.html"), &shot);
    println!("report screenshot: {}", shot.display());
    assert_eq!((seen.svgs, seen.pngs, seen.loaded), (9, 9, 9), "{seen:?}");
    assert!(seen.texts > 9 * 10, "{seen:?}");
    assert!(seen.problems.is_empty(), "{}", seen.problems.join("\n"));
    // --where restricts the rows: only real captions are 10 characters or longer.
    let o = run(
        &[
            "analyze",
            out.to_str().unwrap(),
            "--by",
            "label",
            "--where",
            "text_len >= 10",
            "--out",
            d.path().join("long").to_str().unwrap(),
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("groups: real\n"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = run(
        &[
            "analyze",
            out.to_str().unwrap(),
            "--by",
            "label",
            "--where",
            "no_such_column = 1",
        ],
        d.path(),
    );
    // A filter the regions table cannot apply is invalid input: exit 2, as in `split` and
    // `annotate export`; so is a --where that does not parse, and a folder that is no run.
    let invalid = |o: std::process::Output, says: &str| {
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{err}");
    };
    invalid(o, "no column `no_such_column` in the ocr_regions table");
    let run_dir = out.to_str().unwrap();
    let args = ["analyze", run_dir, "--by", "label", "--where", "label"];
    invalid(run(&args, d.path()), "must be a condition");
    // The filter syntax before SQL left text unquoted: the error says how to quote it, and
    // lists the table's columns (all of them, not only those analyze decodes).
    let args = [
        "analyze",
        run_dir,
        "--by",
        "label",
        "--where",
        "label = real",
    ];
    let o = run(&args, d.path());
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("label = 'real'") && err.contains("text_len"),
        "{err}"
    );
    invalid(o, "no column `real`");
    let args = [
        "analyze",
        run_dir,
        "--by",
        "label",
        "--where",
        "text_len >= 'ten'",
    ];
    invalid(run(&args, d.path()), "numeric column `text_len` (UInt32)");
    let args = ["analyze", d.path().to_str().unwrap(), "--by", "label"];
    invalid(run(&args, d.path()), "not a run directory");
    let stats = rows("stats");
    let hue = stats
        .iter()
        .find(|r| r["analysis"] == "hue_pixels")
        .expect("hue test");
    assert!(hue["p_value"].parse::<f64>().unwrap() < 1e-6, "{hue:?}");

    // A shard of other settings in the table's folder (left by a run that stopped before the
    // stage could set it aside) is not read: the tables come out as before.
    let shard = std::fs::read_dir(out.join("ocr_regions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .unwrap();
    copy_shard_with_fingerprint(
        &shard,
        &out.join("ocr_regions/part-99999.parquet"),
        "0123456789abcdef",
    );
    let again = d.path().join("again");
    let o = run(
        &[
            "analyze",
            out.to_str().unwrap(),
            "--by",
            "label",
            "--out",
            again.to_str().unwrap(),
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for t in ["position", "hue_regions", "area", "stats"] {
        assert_eq!(
            std::fs::read_to_string(a.join(format!("{t}.csv"))).unwrap(),
            std::fs::read_to_string(again.join(format!("{t}.csv"))).unwrap(),
            "{t}: rows of other settings were read"
        );
    }
}

/// Writes `src`'s rows again with the footer's fingerprint replaced.
fn copy_shard_with_fingerprint(src: &std::path::Path, dst: &std::path::Path, fp: &str) {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::metadata::KeyValue;
    let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(src).unwrap()).unwrap();
    let meta: Vec<KeyValue> = b
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        // Rewritten by another writer, so the rows' bytes (and their recorded BLAKE3) change.
        .filter(|kv| {
            ![
                "vidcurate.fingerprint",
                "ARROW:schema",
                "vidcurate.data_blake3",
            ]
            .contains(&kv.key.as_str())
        })
        .chain(std::iter::once(KeyValue::new(
            "vidcurate.fingerprint".to_string(),
            fp.to_string(),
        )))
        .collect();
    let schema = b.schema().clone();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(meta))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(dst).unwrap(),
        schema,
        Some(props),
    )
    .unwrap();
    for batch in b.build().unwrap() {
        w.write(&batch.unwrap()).unwrap();
    }
    w.close().unwrap();
}
