//! The run directory's storage layer. Everything the runtime and the stages persist goes through
//! `Store`, keyed by `/`-separated paths relative to the run directory, so that runs can later live
//! on an object store (the `object_store` crate maps onto these four verbs) without touching stages.
//!
//! `put` is atomic: readers see the whole object or nothing. Locally that is a hidden temp file in
//! the same folder, fsync, rename; a crash leaves at most a `.tmp` file that `open` sweeps away.

use async_trait::async_trait;
use std::io;
use std::path::{Path, PathBuf};

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Writes `data` at `path`, atomically replacing any previous object.
    async fn put(&self, path: &str, data: Vec<u8>) -> io::Result<()>;
    /// Reads the whole object.
    async fn get(&self, path: &str) -> io::Result<Vec<u8>>;
    /// Lists object paths under `prefix` (recursively), sorted; temp files are never listed.
    async fn list(&self, prefix: &str) -> io::Result<Vec<String>>;
    /// Moves an object (used to set aside shards of superseded settings).
    async fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Whether an object exists.
    async fn exists(&self, path: &str) -> io::Result<bool>;
    /// Human-readable location of the store, for messages.
    fn location(&self) -> String;
    /// Local filesystem path of an object, when the store is local (ffmpeg reads paths).
    fn local_path(&self, path: &str) -> Option<PathBuf>;
}

/// A run directory on the local filesystem.
pub struct LocalStore {
    root: PathBuf,
}

const TMP_MARK: &str = ".tmp-";

impl LocalStore {
    /// Opens (creating) the run directory and removes temp files a crash left behind.
    pub fn open(root: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        sweep_tmp(&root)?;
        Ok(Self { root })
    }

    /// A run directory for reading only (`analyze`, `rethreshold`): nothing is created and no
    /// leftover temp file is swept (a run may be writing it right now).
    pub fn open_read_only(root: &Path) -> io::Result<Self> {
        Ok(Self {
            root: root.canonicalize()?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn full(&self, path: &str) -> io::Result<PathBuf> {
        if path.split('/').any(|c| c == ".." || c.is_empty()) || path.starts_with('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad store path {path:?}"),
            ));
        }
        Ok(self.root.join(path))
    }
}

fn sweep_tmp(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ft.is_dir() {
            sweep_tmp(&entry.path())?;
        } else if name.starts_with('.') && name.contains(TMP_MARK) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

fn write_atomic(target: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let dir = target
        .parent()
        .ok_or_else(|| io::Error::other("no parent"))?;
    std::fs::create_dir_all(dir)?;
    let name = target
        .file_name()
        .ok_or_else(|| io::Error::other("no file name"))?
        .to_string_lossy();
    let nonce = blake3::hash(
        format!("{:?}{}", std::time::SystemTime::now(), std::process::id()).as_bytes(),
    );
    let tmp = dir.join(format!(".{name}{TMP_MARK}{}", &nonce.to_hex()[..12]));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, target)?;
        // Make the rename itself durable.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn list_rec(root: &Path, dir: &Path, out: &mut Vec<String>) -> io::Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in rd {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().contains(TMP_MARK) {
            continue;
        }
        let p = entry.path();
        if entry.file_type()?.is_dir() {
            list_rec(root, &p, out)?;
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

#[async_trait]
impl Store for LocalStore {
    async fn put(&self, path: &str, data: Vec<u8>) -> io::Result<()> {
        let target = self.full(path)?;
        tokio::task::spawn_blocking(move || write_atomic(&target, &data))
            .await
            .map_err(io::Error::other)?
    }

    async fn get(&self, path: &str) -> io::Result<Vec<u8>> {
        tokio::fs::read(self.full(path)?).await
    }

    async fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        let root = self.root.clone();
        let dir = if prefix.is_empty() {
            root.clone()
        } else {
            self.full(prefix.trim_end_matches('/'))?
        };
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            list_rec(&root, &dir, &mut out)?;
            out.sort();
            Ok(out)
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (self.full(from)?, self.full(to)?);
        if let Some(parent) = to.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        tokio::fs::rename(from, to).await
    }

    async fn exists(&self, path: &str) -> io::Result<bool> {
        tokio::fs::try_exists(self.full(path)?).await
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn local_path(&self, path: &str) -> Option<PathBuf> {
        self.full(path).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_is_atomic_and_sweeps_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        // A temp file left by a crash must neither be listed nor survive a reopen.
        std::fs::create_dir_all(dir.path().join("probe")).unwrap();
        let stale = dir.path().join("probe/.part-00000.parquet.tmp-abc");
        std::fs::write(&stale, b"half").unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        assert!(!stale.exists());
        store
            .put("probe/part-00000.parquet", b"whole".to_vec())
            .await
            .unwrap();
        store
            .put("probe/part-00000.parquet", b"whole2".to_vec())
            .await
            .unwrap();
        assert_eq!(
            store.get("probe/part-00000.parquet").await.unwrap(),
            b"whole2"
        );
        assert_eq!(
            store.list("probe").await.unwrap(),
            vec!["probe/part-00000.parquet".to_string()]
        );
        assert!(store.list("nothing").await.unwrap().is_empty());
        assert!(store.put("../escape", vec![]).await.is_err());
    }
}
