//! The checksums of a release folder, as `croissant.json` lists them: one Croissant
//! `cr:FileObject` per file (`contentUrl` relative to the folder, `sha256`, `contentSize`).
//!
//! `verify` refuses a folder whose files changed or went missing after release (the harness
//! exports and `rehydrate` call it before reading); `refresh` rewrites the list after a command
//! that edits the folder on purpose. Files that appear after release and are not listed are not
//! an error: a reader may leave a `__pycache__` or a cache beside the files it loaded.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The metadata file inside a release folder.
pub const CROISSANT_FILE: &str = "croissant.json";
const FILE_OBJECT: &str = "cr:FileObject";

#[derive(Debug, thiserror::Error)]
pub enum IntegrityError {
    #[error(
        "{}: no {CROISSANT_FILE}: not a release folder, or made before releases listed their checksums (run `vidcurate release` again)",
        .0.display()
    )]
    NoCroissant(PathBuf),
    #[error("{}: not a Croissant file: {detail}", path.display())]
    Malformed { path: PathBuf, detail: String },
    #[error(
        "{file}: changed after release (sha256 {actual}, {CROISSANT_FILE} lists {expected}); release the run again, or undo the change"
    )]
    Changed {
        file: String,
        expected: String,
        actual: String,
    },
    #[error("{file}: listed in {CROISSANT_FILE} but missing from the release folder")]
    Missing { file: String },
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> IntegrityError + '_ {
    move |error| IntegrityError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// The SHA-256 of a file's bytes, lowercase hex; read in blocks (frames and shards can be big).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>())
}

/// Whether `dir` is a release folder (a local folder with `croissant.json` and no run manifest).
pub fn is_release(dir: &Path) -> bool {
    dir.join(CROISSANT_FILE).is_file() && !dir.join("manifest.json").exists()
}

/// Checks every FileObject `croissant.json` lists against its `sha256`; the first file that
/// changed or is missing is the error.
pub fn verify(release: &Path) -> Result<(), IntegrityError> {
    match check(release)?.1.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Every FileObject `croissant.json` lists against its `sha256`: how many were checked, and
/// each file that changed or is missing (`vidcurate verify RELEASE` lists them all).
pub fn check(release: &Path) -> Result<(usize, Vec<IntegrityError>), IntegrityError> {
    let (path, doc) = read(release)?;
    let (mut checked, mut found) = (0, vec![]);
    for obj in distribution(&path, &doc)? {
        if obj["@type"] != FILE_OBJECT {
            continue;
        }
        let (rel, expected) = match (obj["contentUrl"].as_str(), obj["sha256"].as_str()) {
            (Some(r), Some(s)) => (r, s),
            _ => {
                return Err(IntegrityError::Malformed {
                    path,
                    detail: format!("FileObject {} has no contentUrl or no sha256", obj["@id"]),
                });
            }
        };
        checked += 1;
        let file = release.join(rel);
        match sha256_file(&file) {
            Ok(actual) if actual == expected => {}
            Ok(actual) => found.push(IntegrityError::Changed {
                file: rel.into(),
                expected: expected.into(),
                actual,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                found.push(IntegrityError::Missing { file: rel.into() })
            }
            Err(e) => return Err(io_at(&file)(e)),
        }
    }
    Ok((checked, found))
}

/// The files `croissant.json` lists (their `contentUrl`s, relative to the release).
pub fn listed(release: &Path) -> Result<Vec<String>, IntegrityError> {
    let (path, doc) = read(release)?;
    Ok(distribution(&path, &doc)?
        .iter()
        .filter(|o| o["@type"] == FILE_OBJECT)
        .filter_map(|o| o["contentUrl"].as_str().map(str::to_string))
        .collect())
}

/// Recomputes the checksum and size of every file in the folder: listed files that are gone lose
/// their FileObject, new files gain one, the rest of `croissant.json` is kept as it is.
pub fn refresh(release: &Path) -> Result<(), IntegrityError> {
    let (path, mut doc) = read(release)?;
    distribution(&path, &doc)?;
    let fresh = file_objects(release)?;
    let dist = doc["distribution"]
        .as_array_mut()
        .expect("checked by distribution()");
    // FileSets and anything else stay where they were; FileObjects are listed anew, in place
    // of the first one so a reader sees the same order as a fresh release.
    let at = dist
        .iter()
        .position(|o| o["@type"] == FILE_OBJECT)
        .unwrap_or(dist.len());
    let mut rest: Vec<Value> = std::mem::take(dist);
    let after = rest.split_off(at);
    dist.extend(rest);
    dist.extend(fresh);
    dist.extend(after.into_iter().filter(|o| o["@type"] != FILE_OBJECT));
    let text = serde_json::to_string_pretty(&doc).expect("a JSON value serialises");
    crate::store::write_file(&path, text.as_bytes()).map_err(io_at(&path))
}

/// `refresh` of a folder that lists its checksums; a folder without `croissant.json` (made
/// before it existed, or by hand) has none to refresh.
pub fn refresh_listed(release: &Path) -> Result<(), IntegrityError> {
    match refresh(release) {
        Err(IntegrityError::NoCroissant(_)) => Ok(()),
        r => r,
    }
}

/// One FileObject per file in the folder (every file but `croissant.json`, hidden files and
/// Python's caches), sorted by path: what `release` writes and `refresh` rewrites.
pub fn file_objects(release: &Path) -> Result<Vec<Value>, IntegrityError> {
    let mut out = vec![];
    for rel in release_files(release)? {
        let file = release.join(&rel);
        let sha = sha256_file(&file).map_err(io_at(&file))?;
        let size = std::fs::metadata(&file).map_err(io_at(&file))?.len();
        out.push(json!({
            "@type": FILE_OBJECT,
            "@id": rel,
            "name": rel,
            "contentUrl": rel,
            "encodingFormat": encoding_format(&rel),
            "contentSize": format!("{size} B"),
            "sha256": sha,
        }));
    }
    Ok(out)
}

/// The relative paths (with `/`) of the files a release lists, sorted.
pub fn release_files(release: &Path) -> Result<Vec<String>, IntegrityError> {
    let mut out = vec![];
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel_dir) = dirs.pop() {
        let dir = release.join(&rel_dir);
        for e in std::fs::read_dir(&dir).map_err(io_at(&dir))? {
            let e = e.map_err(io_at(&dir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            let rel = rel_dir.join(&name);
            let ty = e.file_type().map_err(io_at(&e.path()))?;
            if ty.is_dir() {
                dirs.push(rel);
            } else if rel != Path::new(CROISSANT_FILE) {
                let parts: Vec<_> = rel.iter().map(|p| p.to_string_lossy()).collect();
                out.push(parts.join("/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The MIME type Croissant's `encodingFormat` takes, from the file's extension.
pub fn encoding_format(rel: &str) -> &'static str {
    match rel.rsplit('.').next().unwrap_or("") {
        "parquet" => "application/x-parquet",
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "md" => "text/markdown",
        "json" => "application/json",
        "jsonl" => "application/jsonlines",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "yaml" | "yml" => "application/x-yaml",
        "py" => "text/x-python",
        "txt" => "text/plain",
        "mp4" => "video/mp4",
        _ => "application/octet-stream",
    }
}

fn read(release: &Path) -> Result<(PathBuf, Value), IntegrityError> {
    let path = release.join(CROISSANT_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(IntegrityError::NoCroissant(release.to_path_buf()));
        }
        Err(e) => return Err(io_at(&path)(e)),
    };
    let doc = serde_json::from_str(&text).map_err(|e| IntegrityError::Malformed {
        path: path.clone(),
        detail: e.to_string(),
    })?;
    Ok((path, doc))
}

fn distribution<'a>(path: &Path, doc: &'a Value) -> Result<&'a Vec<Value>, IntegrityError> {
    doc["distribution"]
        .as_array()
        .ok_or_else(|| IntegrityError::Malformed {
            path: path.to_path_buf(),
            detail: "no `distribution` list".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release_with_files() -> tempfile::TempDir {
        let d = crate::store::test_support::folder_with([
            ("README.md", "# card\n"),
            ("data/test-00000-of-00001.parquet", "PAR1rows"),
            ("data/train-00000-of-00001.parquet", "PAR1more"),
        ]);
        let doc = json!({
            "@type": "sc:Dataset",
            "distribution": [{"@type": "cr:FileSet", "@id": "data", "includes": "data/*.parquet"}],
        });
        std::fs::write(d.path().join(CROISSANT_FILE), doc.to_string()).unwrap();
        refresh(d.path()).unwrap();
        d
    }

    #[test]
    fn sha256_of_known_bytes() {
        let (_d, f) = crate::store::test_support::file_with("abc", "abc");
        assert_eq!(
            sha256_file(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_fresh_listing_verifies_and_keeps_the_file_sets() {
        let d = release_with_files();
        verify(d.path()).unwrap();
        let doc: Value =
            serde_json::from_slice(&std::fs::read(d.path().join(CROISSANT_FILE)).unwrap()).unwrap();
        let ids: Vec<&str> = doc["distribution"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["@id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [
                "data",
                "README.md",
                "data/test-00000-of-00001.parquet",
                "data/train-00000-of-00001.parquet"
            ]
        );
        assert_eq!(doc["distribution"][1]["contentSize"], "7 B");
    }

    #[test]
    fn a_changed_file_is_named() {
        let d = release_with_files();
        std::fs::write(
            d.path().join("data/train-00000-of-00001.parquet"),
            b"PAR1edit",
        )
        .unwrap();
        let e = verify(d.path()).unwrap_err();
        assert!(
            matches!(&e, IntegrityError::Changed { file, .. } if file == "data/train-00000-of-00001.parquet"),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("data/train-00000-of-00001.parquet: changed after release"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_file_is_named_and_refresh_drops_it() {
        let d = release_with_files();
        std::fs::remove_file(d.path().join("README.md")).unwrap();
        let e = verify(d.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "README.md: listed in croissant.json but missing from the release folder"
        );
        std::fs::write(d.path().join("data/new.parquet"), b"PAR1new").unwrap();
        std::fs::write(d.path().join("data/test-00000-of-00001.parquet"), b"PAR1x").unwrap();
        refresh(d.path()).unwrap();
        verify(d.path()).unwrap();
        let text = std::fs::read_to_string(d.path().join(CROISSANT_FILE)).unwrap();
        assert!(!text.contains("README.md"), "{text}");
        assert!(text.contains("\"data/new.parquet\""), "{text}");
        assert!(text.contains("\"5 B\""), "{text}");
    }

    #[test]
    fn unlisted_caches_are_not_errors_and_no_croissant_is_said() {
        let d = release_with_files();
        std::fs::create_dir_all(d.path().join("harness/__pycache__")).unwrap();
        std::fs::write(d.path().join("harness/__pycache__/utils.pyc"), b"x").unwrap();
        verify(d.path()).unwrap();
        assert!(
            !release_files(d.path())
                .unwrap()
                .iter()
                .any(|f| f.contains("pycache"))
        );
        std::fs::remove_file(d.path().join(CROISSANT_FILE)).unwrap();
        let e = verify(d.path()).unwrap_err();
        assert!(e.to_string().contains("no croissant.json"), "{e}");
        assert!(matches!(
            refresh(d.path()),
            Err(IntegrityError::NoCroissant(_))
        ));
    }
}
