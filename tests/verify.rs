//! Damage done to a finished run after the fact: a shard cut to half its size (a failing disk, an
//! interrupted copy), one byte flipped in the middle of another's rows, a third deleted, then a
//! frame's JPEG deleted and a rejects shard changed. `verify` names each with what depends on it
//! and exits 1; readers refuse the damaged shard instead of reading wrong values; a resuming
//! `run` sets the damaged shards aside under `_damaged/` (nothing deleted) and computes exactly
//! their videos again, and `verify --repair` does the same for the frames and rejects; the tables
//! end equal to those of the undamaged run.

use crate::need_ffmpeg;
use crate::util::*;
use std::path::{Path, PathBuf};

const TABLES: &[&str] = &["source", "probe", "frames", "ocr_regions", "rejects"];
const VOLATILE: &[&str] = &["rejected_at"];

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    v.sort();
    v
}

/// The offset of the middle of a Parquet file's rows (before its footer).
fn middle_of_rows(data: &[u8]) -> usize {
    let n = data.len();
    let footer = u32::from_le_bytes(data[n - 8..n - 4].try_into().unwrap()) as usize;
    (n - 8 - footer) / 2
}

fn verify(run_dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut a = vec!["verify", run_dir.to_str().unwrap()];
    a.extend_from_slice(args);
    let o = run(&a, run_dir.parent().unwrap());
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn rel(run_dir: &Path, p: &Path) -> String {
    p.strip_prefix(run_dir).unwrap().display().to_string()
}

/// probe → frames → ocr over the demo generator's clips (text drawn on them, one broken upload),
/// in small shards: several per stage. Detection at 960 px (`det_profile = "paddleocr"`): these
/// tests are about storage, and the default's 1308 px would be most of their time.
pub(crate) fn demo_pipeline(dir: &Path) -> PathBuf {
    make_corpus(
        &dir.join("demo"),
        &["--clips", "8", "--seconds", "2", "--seed", "5"],
    );
    let p = dir.join("p.toml");
    write(
        &p,
        &pipeline_with(
            "manifest = \"demo/manifest.csv\"",
            "{ count = 3 }",
            &[("ocr_regions", "ocr")],
        )
        .replace(
            "name = \"t\"\n",
            "name = \"t\"\n[output]\nflush_secs = 0\nmax_rows_per_shard = 3\n",
        )
        .replace(
            "type = \"ocr\"\n",
            "type = \"ocr\"\ncompute = { det_profile = \"paddleocr\" }\n",
        ),
    );
    p
}

/// The line of `report` that names `path`, which must say `why`.
fn names(report: &str, path: &str, why: &str) {
    let line = report
        .lines()
        .find(|l| l.contains(path))
        .unwrap_or_else(|| panic!("{path} not named: {report}"));
    assert!(line.contains(why), "{line}");
}

#[test]
fn damaged_shards_are_named_set_aside_and_computed_again() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let p = demo_pipeline(d.path());
    let out = d.path().join("run");
    let o = run_into(&p, &out, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want = snapshot(&out, TABLES, VOLATILE);
    assert!(!want[3].is_empty(), "the corpus has text to read");

    let (code, stdout, _) = verify(&out, &[]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("every object is as committed"), "{stdout}");
    assert!(
        stdout.contains(" frame"),
        "frames' JPEGs are checked: {stdout}"
    );

    // Three kinds of damage, one per stage.
    let frames = files(&out.join("frames"));
    assert!(frames.len() >= 2, "several frames shards");
    let cut = frames[0].clone();
    let data = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &data[..data.len() / 2]).unwrap();
    let ocr = files(&out.join("ocr_regions"));
    let flipped = ocr
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap()
        .clone();
    let mut data = std::fs::read(&flipped).unwrap();
    let at = middle_of_rows(&data);
    data[at] ^= 0x40;
    std::fs::write(&flipped, &data).unwrap();
    let probe = files(&out.join("probe"));
    let deleted = probe[probe.len() / 2].clone();
    std::fs::remove_file(&deleted).unwrap();

    let (code, stdout, stderr) = verify(&out, &[]);
    assert_eq!(code, Some(1), "damage exits 1: {stdout}{stderr}");
    for (p, why) in [
        (&cut, "truncated"),
        (&flipped, "changed in place"),
        (&deleted, "missing"),
    ] {
        names(&stdout, &rel(&out, p), why);
    }
    assert!(
        stdout.contains("3 damaged or missing"),
        "exactly the three: {stdout}"
    );
    assert!(
        stdout.contains("of stage frames") && stdout.contains("later stages"),
        "what depends on the frames shard: {stdout}"
    );
    // A reader refuses the changed rows instead of reading wrong values.
    let o = run(
        &["analyze", out.to_str().unwrap(), "--by", "label"],
        d.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "analyze on a damaged shard must fail");
    // It reads the selection first (every stage's footers), so the first damaged shard it
    // meets may be the truncated one.
    assert!(
        (err.contains(&rel(&out, &flipped)) || err.contains(&rel(&out, &cut)))
            && err.contains("verify"),
        "{err}"
    );

    // The resume sets them aside and computes their videos again.
    let o = run_into(&p, &out, d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    for p in [&cut, &flipped] {
        let r = rel(&out, p);
        assert_eq!(
            err.lines()
                .filter(|l| l.contains(&r) && l.contains("is damaged"))
                .count(),
            1,
            "one warning line for {r}: {err}"
        );
        assert!(out.join("_damaged").join(&r).exists(), "{r} kept");
        let note =
            std::fs::read_to_string(out.join("_damaged").join(format!("{r}.note.txt"))).unwrap();
        assert!(note.contains("why:"), "{note}");
    }
    let r = rel(&out, &deleted);
    assert!(
        err.lines()
            .any(|l| l.contains(&r) && l.contains("is missing")),
        "{err}"
    );
    assert!(
        out.join(format!("_damaged/_commits/{r}.json")).exists(),
        "the deleted shard's record is kept"
    );
    assert_eq!(
        snapshot(&out, TABLES, VOLATILE),
        want,
        "tables as undamaged"
    );
    let (code, stdout, _) = verify(&out, &[]);
    assert_eq!(code, Some(0), "{stdout}");

    // A frame and a rejects shard: found by verify, set aside by --repair.
    let jpeg_row = column(&out.join("frames"), "path")[4].clone();
    std::fs::remove_file(out.join(&jpeg_row)).unwrap();
    let rejects = files(&out.join("rejects"));
    assert!(!rejects.is_empty(), "the broken upload's reject");
    let mut data = std::fs::read(&rejects[0]).unwrap();
    let at = middle_of_rows(&data);
    data[at] ^= 0x01;
    std::fs::write(&rejects[0], &data).unwrap();
    let (code, stdout, _) = verify(&out, &[]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("{jpeg_row} (frame): missing")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{} (rejects shard): damaged",
            rel(&out, &rejects[0])
        )),
        "{stdout}"
    );
    let (code, stdout, stderr) = verify(&out, &["--repair"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("repaired"), "{stdout}");
    let o = run_into(&p, &out, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        snapshot(&out, TABLES, VOLATILE),
        want,
        "tables as undamaged"
    );
    let (code, stdout, _) = verify(&out, &[]);
    assert_eq!(code, Some(0), "{stdout}");

    // A selection is recorded like a shard.
    let o = run(&["rethreshold", out.to_str().unwrap()], d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sel = files(&out.join("selections"));
    assert_eq!(sel.len(), 2, "the pipeline's and the new one: {sel:?}");
    let mut data = std::fs::read(&sel[0]).unwrap();
    let at = middle_of_rows(&data);
    data[at] ^= 0x01;
    std::fs::write(&sel[0], &data).unwrap();
    let (code, stdout, _) = verify(&out, &[]);
    assert_eq!(code, Some(1), "{stdout}");
    names(
        &stdout,
        &format!("{} (selection)", rel(&out, &sel[0])),
        "damaged",
    );
}

#[test]
fn damage_in_an_object_store_run_is_named_and_computed_again() {
    need_ffmpeg!();
    use crate::cluster::{bucket, download, s3_env, store};
    use vidcurate::store::Store;
    let d = tempfile::tempdir().unwrap();
    let p = demo_pipeline(d.path());
    let want = reference_run(&p, d.path(), TABLES, VOLATILE);
    let url = bucket("verify-damage");
    let s3 = |args: &[&str]| {
        let mut c = std::process::Command::new(bin());
        c.args(args).current_dir(d.path()).env("RUST_LOG", "warn");
        s3_env(&mut c).output().unwrap()
    };
    let o = s3(&["run", p.to_str().unwrap(), "--out", &url, "-q"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let s = store(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (cut, flipped, deleted) = rt.block_on(async {
        let cut = s.list("frames").await.unwrap()[0].clone();
        let data = s.get(&cut).await.unwrap();
        s.put(&cut, data[..data.len() / 2].to_vec()).await.unwrap();
        let ocr = s.list_info("ocr_regions").await.unwrap();
        let flipped = ocr.iter().max_by_key(|o| o.size).unwrap().path.clone();
        let mut data = s.get(&flipped).await.unwrap();
        let at = middle_of_rows(&data);
        data[at] ^= 0x40;
        s.put(&flipped, data).await.unwrap();
        let probe = s.list("probe").await.unwrap();
        let deleted = probe[probe.len() / 2].clone();
        s.delete(&deleted).await.unwrap();
        (cut, flipped, deleted)
    });

    let o = s3(&["verify", &url]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    names(&stdout, &cut, "truncated");
    names(&stdout, &flipped, "changed in place");
    names(&stdout, &deleted, "missing");
    assert!(stdout.contains("3 damaged or missing"), "{stdout}");

    let o = s3(&["run", p.to_str().unwrap(), "--out", &url, "-q"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    for (path, said) in [
        (&cut, "is damaged"),
        (&flipped, "is damaged"),
        (&deleted, "is missing"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(path.as_str()) && l.contains(said)),
            "{path}: {err}"
        );
    }
    let listed = rt.block_on(s.list("_damaged")).unwrap();
    for path in [&cut, &flipped] {
        assert!(listed.contains(&format!("_damaged/{path}")), "{listed:?}");
    }
    let o = s3(&["verify", &url]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let local = d.path().join("copy");
    download(&url, &local);
    assert_eq!(
        snapshot(&local, TABLES, VOLATILE),
        want,
        "tables as a local run's"
    );
}
