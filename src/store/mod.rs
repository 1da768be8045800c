//! The run directory's storage layer. Everything the runtime and the stages persist goes through
//! `Store`, keyed by `/`-separated paths relative to the run directory: a local folder
//! (`LocalStore`) or an object store (`objects::ObjectStoreRun`: S3, GCS, Azure, memory).
//!
//! `put` is atomic: readers see the whole object or nothing. Locally that is a hidden temp file in
//! the same folder, fsync, rename; a crash leaves at most a `.tmp` file that `open` sweeps away.
//! `put_if_absent` is the one primitive several workers agree through (a shard slot is taken by
//! exactly one of them): locally a hard link, which fails if the name exists; on S3
//! `If-None-Match: *`.

pub mod batch;
pub mod cache;
pub mod commits;
pub mod filter;
pub mod gc;
pub mod manifest;
pub mod media_digests;
pub mod objects;
pub mod run;
pub mod shards;
#[cfg(test)]
pub(crate) mod test_support;
pub mod verify;

use async_trait::async_trait;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One listed object.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    pub path: String,
    pub size: u64,
    pub modified: SystemTime,
}

/// A multipart upload begun under the run directory and neither completed nor aborted: what a
/// writer killed while it uploaded leaves. No reader sees it (the object does not exist until
/// the upload completes), but its parts are stored, and billed, until it is aborted.
#[derive(Debug, Clone)]
pub struct PendingUpload {
    /// The object it would have created, relative to the run directory.
    pub path: String,
    /// The store's upload id.
    pub id: String,
    pub initiated: SystemTime,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Writes `data` at `path`, atomically replacing any previous object.
    async fn put(&self, path: &str, data: Vec<u8>) -> io::Result<()>;
    /// Writes `data` at `path` only if no object has that name: `Ok(false)` when one had (it is
    /// left untouched). Atomic against other processes and machines. An object store may also
    /// answer `Ok(true)` when the object there holds exactly `data`: its client retries a create
    /// whose answer was lost, and the retry must not read as losing to ourselves.
    async fn put_if_absent(&self, path: &str, data: Vec<u8>) -> io::Result<bool>;
    /// Stores a local file at `path` (streamed: large media are not held in memory).
    async fn put_file(&self, path: &str, file: &Path) -> io::Result<()>;
    /// Copies the object at `path` to a local file (streamed), atomically.
    async fn get_file(&self, path: &str, file: &Path) -> io::Result<()>;
    /// Removes an object; a missing one is not an error.
    async fn delete(&self, path: &str) -> io::Result<()>;
    /// Lists objects under `prefix` with their size and age, sorted by path.
    async fn list_info(&self, prefix: &str) -> io::Result<Vec<ObjectInfo>>;
    /// Reads the whole object.
    async fn get(&self, path: &str) -> io::Result<Vec<u8>>;
    /// Lists object paths under `prefix` (recursively), sorted; temp files are never listed.
    async fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        Ok(self
            .list_info(prefix)
            .await?
            .into_iter()
            .map(|o| o.path)
            .collect())
    }
    /// Incomplete multipart uploads under the run directory (`gc` aborts the old ones). None
    /// where there are no such things (a local folder, memory); a store whose API we do not list
    /// them through answers `Unsupported`.
    async fn pending_uploads(&self) -> io::Result<Option<Vec<PendingUpload>>> {
        Ok(None)
    }
    /// Aborts one incomplete upload, dropping its stored parts; one already gone is not an error.
    async fn abort_upload(&self, _upload: &PendingUpload) -> io::Result<()> {
        Ok(())
    }
    /// Moves an object (used to set aside shards of superseded settings).
    async fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Whether an object exists.
    async fn exists(&self, path: &str) -> io::Result<bool>;
    /// Human-readable location of the store, for messages.
    fn location(&self) -> String;
    /// The error of an operation on `path` here, naming it under the store's location.
    fn io_error(&self, path: &str, e: io::Error) -> crate::error::RunError {
        crate::error::RunError::io(format!("{}/{path}", self.location()), e)
    }
    /// Local filesystem path of an object, when the store is local (ffmpeg reads paths); `""`
    /// gives the run directory itself.
    fn local_path(&self, path: &str) -> Option<PathBuf>;
}

/// How a process uses a run directory; it decides what may be swept at open.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Access {
    /// Reads only (`analyze`, `status`, …): nothing created, nothing swept.
    Read,
    /// The one process writing it (holds the lock): every temp file is a crash's leftover.
    Own,
    /// One of several workers (ranks): another may be writing a temp file right now, so only
    /// those older than `SHARED_TMP_AGE` are swept.
    Share,
}

/// A temp file older than this in a shared run directory is a crash's leftover.
pub const SHARED_TMP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Opens the run directory `location` names: an object-store URL (`s3://bucket/prefix`, …) or a
/// local folder (`file://` optional).
pub fn open_run(location: &str, access: Access) -> io::Result<std::sync::Arc<dyn Store>> {
    if objects::is_url(location) {
        return Ok(std::sync::Arc::new(objects::ObjectStoreRun::open(
            location,
        )?));
    }
    let path = Path::new(location.strip_prefix("file://").unwrap_or(location));
    Ok(std::sync::Arc::new(match access {
        Access::Read => LocalStore::open_read_only(path)?,
        Access::Own => LocalStore::open_swept(path, std::time::Duration::ZERO)?,
        Access::Share => LocalStore::open_swept(path, SHARED_TMP_AGE)?,
    }))
}

/// A run directory on the local filesystem.
pub struct LocalStore {
    root: PathBuf,
}

const TMP_MARK: &str = ".tmp-";
static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl LocalStore {
    /// Opens (creating) the run directory and removes temp files at least `age` old.
    pub fn open_swept(root: &Path, age: std::time::Duration) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        sweep_tmp(&root, age, &mut vec![], false)?;
        Ok(Self { root })
    }

    /// A run directory for reading only (`analyze`, `rethreshold`): nothing is created and no
    /// leftover temp file is swept (a run may be writing it right now).
    pub fn open_read_only(root: &Path) -> io::Result<Self> {
        Ok(Self {
            root: root.canonicalize()?,
        })
    }

    fn full(&self, path: &str) -> io::Result<PathBuf> {
        Ok(self.root.join(checked(path)?))
    }
}

/// `path` when it is a store path (relative, `/`-separated, no empty or `..` component): what
/// both kinds of store accept.
fn checked(path: &str) -> io::Result<&str> {
    if path.split('/').any(|c| c == ".." || c.is_empty()) || path.starts_with('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad store path {path:?}"),
        ));
    }
    Ok(path)
}

/// The folder `target` goes in.
fn parent(target: &Path) -> io::Result<&Path> {
    target.parent().ok_or_else(|| io::Error::other("no parent"))
}

/// Removes temp files under `dir` at least `age` old (all of them for a zero age); records
/// (path, bytes) of each in `out`. With `dry`, only records.
pub fn sweep_tmp(
    dir: &Path,
    age: std::time::Duration,
    out: &mut Vec<(PathBuf, u64)>,
    dry: bool,
) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ft.is_dir() {
            sweep_tmp(&entry.path(), age, out, dry)?;
        } else if name.starts_with('.') && name.contains(TMP_MARK) {
            let meta = entry.metadata()?;
            let old = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|e| e >= age);
            if (age.is_zero() || old) && (dry || std::fs::remove_file(entry.path()).is_ok()) {
                out.push((entry.path(), meta.len()));
            }
        }
    }
    Ok(())
}

/// A hidden temp name beside `target`, unique to this process and moment.
fn temp_beside(target: &Path) -> io::Result<PathBuf> {
    let dir = parent(target)?;
    let name = target
        .file_name()
        .ok_or_else(|| io::Error::other("no file name"))?
        .to_string_lossy();
    let nonce = blake3::hash(
        format!(
            "{:?}{}{:?}",
            SystemTime::now(),
            std::process::id(),
            NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )
        .as_bytes(),
    );
    Ok(dir.join(format!(".{name}{TMP_MARK}{}", &nonce.to_hex()[..12])))
}

fn sync_dir(dir: &Path) {
    // Makes a rename or link itself durable.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// The `*.parquet` files directly in a local folder (a release's config, say), sorted by name:
/// the order `datasets` and `evaluate` read a config's files in.
pub fn parquet_files_in(dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    Ok(files)
}

/// Writes a file outside any run directory (a release, an analysis folder, annotation tasks) the
/// way the store writes its own objects: beside the target, synced, then renamed over it.
pub fn write_file(target: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic(target, data, true).map(|_| ())
}

/// Writes `data` beside `target`, syncs it, then publishes it under `target`: replacing what is
/// there (`rename`) or only if nothing is (`hard_link`, which fails with `AlreadyExists`).
fn write_atomic(target: &Path, data: &[u8], replace: bool) -> io::Result<bool> {
    use std::io::Write;
    let dir = parent(target)?;
    std::fs::create_dir_all(dir)?;
    let tmp = temp_beside(target)?;
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        if replace {
            std::fs::rename(&tmp, target)?;
        } else {
            match std::fs::hard_link(&tmp, target) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        sync_dir(dir);
        Ok(true)
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

fn list_rec(root: &Path, dir: &Path, out: &mut Vec<ObjectInfo>) -> io::Result<()> {
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
        let meta = entry.metadata()?;
        if meta.is_dir() {
            list_rec(root, &p, out)?;
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(ObjectInfo {
                path: rel.to_string_lossy().replace('\\', "/"),
                size: meta.len(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
    }
    Ok(())
}

/// Runs blocking filesystem work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(io::Error::other)?
}

#[async_trait]
impl Store for LocalStore {
    async fn put(&self, path: &str, data: Vec<u8>) -> io::Result<()> {
        let target = self.full(path)?;
        blocking(move || write_atomic(&target, &data, true).map(|_| ())).await
    }

    async fn put_if_absent(&self, path: &str, data: Vec<u8>) -> io::Result<bool> {
        let target = self.full(path)?;
        blocking(move || write_atomic(&target, &data, false)).await
    }

    async fn put_file(&self, path: &str, file: &Path) -> io::Result<()> {
        let (target, file) = (self.full(path)?, file.to_path_buf());
        if target == file {
            return Ok(());
        }
        blocking(move || {
            let dir = parent(&target)?;
            std::fs::create_dir_all(dir)?;
            let tmp = temp_beside(&target)?;
            std::fs::copy(&file, &tmp)?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &target)?;
            sync_dir(dir);
            Ok(())
        })
        .await
    }

    async fn get_file(&self, path: &str, file: &Path) -> io::Result<()> {
        let (source, file) = (self.full(path)?, file.to_path_buf());
        if source == file {
            return Ok(());
        }
        blocking(move || {
            let dir = parent(&file)?;
            std::fs::create_dir_all(dir)?;
            let tmp = temp_beside(&file)?;
            std::fs::copy(&source, &tmp)?;
            std::fs::rename(&tmp, &file)
        })
        .await
    }

    async fn get(&self, path: &str) -> io::Result<Vec<u8>> {
        tokio::fs::read(self.full(path)?).await
    }

    async fn delete(&self, path: &str) -> io::Result<()> {
        match tokio::fs::remove_file(self.full(path)?).await {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    async fn list_info(&self, prefix: &str) -> io::Result<Vec<ObjectInfo>> {
        let root = self.root.clone();
        let dir = if prefix.is_empty() {
            root.clone()
        } else {
            self.full(prefix.trim_end_matches('/'))?
        };
        blocking(move || {
            let mut out = Vec::new();
            list_rec(&root, &dir, &mut out)?;
            out.sort_by(|a, b| a.path.cmp(&b.path));
            Ok(out)
        })
        .await
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
        if path.is_empty() {
            return Some(self.root.clone());
        }
        self.full(path).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_is_atomic_and_sweeps_leftovers() {
        // A temp file left by a crash must neither be listed nor survive a reopen.
        let (dir, stale) = test_support::file_with("probe/.part-00000.parquet.tmp-abc", b"half");
        let store = LocalStore::open_swept(dir.path(), std::time::Duration::ZERO).unwrap();
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

    #[test]
    fn a_shared_open_leaves_fresh_temp_files_to_their_writer() {
        let (dir, tmp) = test_support::file_with(".run.json.tmp-abc", b"being written");
        // Another rank opening the folder must not pull the file from under its writer.
        open_run(&dir.path().display().to_string(), Access::Share).unwrap();
        assert!(tmp.exists());
        // The single owner knows every temp file is a leftover.
        open_run(&dir.path().display().to_string(), Access::Own).unwrap();
        assert!(!tmp.exists());
    }

    #[tokio::test]
    async fn put_if_absent_has_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(
            LocalStore::open_swept(dir.path(), std::time::Duration::ZERO).unwrap(),
        );
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..16u8 {
            let store = store.clone();
            tasks.spawn(async move {
                (
                    i,
                    store
                        .put_if_absent("s/part-00000.parquet", vec![i; 64])
                        .await
                        .unwrap(),
                )
            });
        }
        let winners: Vec<u8> = tasks
            .join_all()
            .await
            .into_iter()
            .filter_map(|(i, won)| won.then_some(i))
            .collect();
        assert_eq!(winners.len(), 1);
        // The object is the winner's, whole.
        assert_eq!(
            store.get("s/part-00000.parquet").await.unwrap(),
            vec![winners[0]; 64]
        );
        // No temp file is left by the losers.
        assert_eq!(store.list("s").await.unwrap().len(), 1);
        assert_eq!(std::fs::read_dir(dir.path().join("s")).unwrap().count(), 1);
    }
}
