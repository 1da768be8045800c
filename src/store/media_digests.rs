//! Media files known by their bytes: the BLAKE3 of each file a source lists, kept with the file's
//! stat, so that an unchanged file costs one `stat` and no read, and a file copied, moved or
//! touched is read again and known as the same input when its bytes are the same.
//!
//! Reads every `cache/media/*.jsonl` of the run's local work folder; appends to this worker's own
//! (`<rank prefix>digests.jsonl`), one line a hashed file. Calls nothing external.
//!
//! Why the whole stat (device, inode, size, mtime, ctime) and not the mtime: `cp -p`, `rsync -a`
//! and `touch -d` set an old mtime on new bytes, but no user tool sets the ctime back, and a copy
//! or a move to another disk gets a new inode. An entry is used only when all five match, so a
//! torn or lost line (a kill -9 while appending) costs one read again, never a wrong digest; and
//! as every worker checks the stat itself, it may use the entries any other worker hashed.

use crate::error::StageError;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where the digests are kept, under the run's local work folder.
pub const DIR: &str = "cache/media";

/// Files at least this large are hashed on every core (in chunks of this size).
const LARGE: u64 = 8 << 20;

/// What `stat` says of a file, as far as its bytes could have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileStat {
    pub fn of(m: &std::fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        }
    }
}

/// One line of a digests file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    path: String,
    #[serde(flatten)]
    stat: FileStat,
    blake3: String,
}

/// A file's content digest, and whether this call read the file to get it.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    /// BLAKE3 of the bytes, 64 hex digits.
    pub blake3: String,
    pub size: u64,
    /// Read now: the stat matched no kept digest (a new, copied, moved or touched file).
    pub hashed: bool,
}

/// The digests of one run's media files (cheap to clone: shared).
#[derive(Clone, Default)]
pub struct MediaDigests(Arc<Inner>);

#[derive(Default)]
struct Inner {
    known: Mutex<HashMap<String, Line>>,
    /// Paths asked for in this invocation: what a compaction keeps.
    asked: Mutex<HashSet<String>>,
    /// This worker's file, open for appending; none: nothing is written (a dry run).
    log: Mutex<Option<std::fs::File>>,
    own: Option<PathBuf>,
    /// Lines in this worker's file (kept and appended), to tell when it is worth compacting.
    own_lines: AtomicU64,
    hashed_files: AtomicU64,
    hashed_bytes: AtomicU64,
}

impl MediaDigests {
    /// The digests kept under `work` (the run's local work folder); new ones are appended to
    /// `<prefix>digests.jsonl` there.
    pub fn open(work: &Path, prefix: &str) -> std::io::Result<Self> {
        let dir = work.join(DIR);
        std::fs::create_dir_all(&dir)?;
        let own = dir.join(format!("{prefix}digests.jsonl"));
        let (known, lines) = read_all(&dir, &own);
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&own)?;
        // A line cut short (a full disk, a power cut) ends here, not in the next one appended.
        if !ends_a_line(&own)? {
            log.write_all(b"\n")?;
        }
        Ok(Self(Arc::new(Inner {
            known: Mutex::new(known),
            log: Mutex::new(Some(log)),
            own: Some(own),
            own_lines: AtomicU64::new(lines),
            ..Default::default()
        })))
    }

    /// The digests kept under `work`, if any, used but never written (`run --dry-run`).
    pub fn read_only(work: &Path) -> Self {
        let (known, _) = read_all(&work.join(DIR), Path::new(""));
        Self(Arc::new(Inner {
            known: Mutex::new(known),
            ..Default::default()
        }))
    }

    /// The content digest of the file at `path` (absolute): kept when its stat is unchanged,
    /// else read now. Blocking: call it on the CPU pool. Errors: `missing_file` (no such file,
    /// or not a file), `unreadable`, or `changed_while_hashing` (an external error: the next
    /// run reads it again), each naming the path.
    pub fn of(&self, path: &Path) -> Result<Known, StageError> {
        match self.kept(path)? {
            Some(k) => Ok(k),
            None => self.read(path),
        }
    }

    /// The kept digest of the file at `path` if its stat is unchanged: one `stat`, no read (cheap
    /// enough not to wait for the CPU pool). Errors: `missing_file`.
    pub fn kept(&self, path: &Path) -> Result<Option<Known>, StageError> {
        let key = path.display().to_string();
        let stat = std::fs::metadata(path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| FileStat::of(&m))
            .ok_or_else(|| {
                StageError::data(
                    "missing_file",
                    format!("{key} does not exist or is not a file"),
                )
            })?;
        let known = lock(&self.0.known);
        let hit = known.get(&key).filter(|l| l.stat == stat).map(|l| Known {
            blake3: l.blake3.clone(),
            size: stat.size,
            hashed: false,
        });
        drop(known);
        lock(&self.0.asked).insert(key);
        Ok(hit)
    }

    /// Reads the file at `path` for its digest, and keeps it with the stat it had.
    pub fn read(&self, path: &Path) -> Result<Known, StageError> {
        let key = path.display().to_string();
        let (blake3, stat) = hash_file(path)?;
        self.0.hashed_files.fetch_add(1, Ordering::Relaxed);
        self.0.hashed_bytes.fetch_add(stat.size, Ordering::Relaxed);
        let line = Line {
            path: key.clone(),
            stat,
            blake3: blake3.clone(),
        };
        self.append(&line);
        lock(&self.0.asked).insert(key.clone());
        lock(&self.0.known).insert(key, line);
        Ok(Known {
            blake3,
            size: stat.size,
            hashed: true,
        })
    }

    /// Files and bytes read in this invocation.
    pub fn hashed(&self) -> (u64, u64) {
        (
            self.0.hashed_files.load(Ordering::Relaxed),
            self.0.hashed_bytes.load(Ordering::Relaxed),
        )
    }

    /// After a complete listing: rewrites this worker's file with the entries of the files asked
    /// for, when it holds many others (a moved corpus leaves its old paths behind). Atomic: a
    /// temp file renamed over it.
    pub fn compact(&self) -> std::io::Result<()> {
        let Some(own) = &self.0.own else {
            return Ok(());
        };
        let asked = lock(&self.0.asked);
        if self.0.own_lines.load(Ordering::Relaxed) <= 2 * asked.len() as u64 + 64 {
            return Ok(());
        }
        let known = lock(&self.0.known);
        let mut body = Vec::new();
        let mut n = 0;
        for l in asked.iter().filter_map(|p| known.get(p)) {
            serde_json::to_writer(&mut body, l).map_err(std::io::Error::other)?;
            body.push(b'\n');
            n += 1;
        }
        let tmp = own.with_extension("jsonl.tmp");
        std::fs::write(&tmp, &body)?;
        let mut log = lock(&self.0.log);
        std::fs::rename(&tmp, own)?;
        *log = Some(std::fs::OpenOptions::new().append(true).open(own)?);
        self.0.own_lines.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// One line appended in one write, so a kill tears at most the last line (skipped when
    /// read). A failed write only costs a read again next time.
    fn append(&self, line: &Line) {
        let mut log = lock(&self.0.log);
        let Some(f) = log.as_mut() else { return };
        let Ok(mut bytes) = serde_json::to_vec(line) else {
            return;
        };
        bytes.push(b'\n');
        if f.write_all(&bytes).is_ok() {
            self.0.own_lines.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether the file is empty or its last byte ends a line.
fn ends_a_line(f: &Path) -> std::io::Result<bool> {
    use std::io::{Seek, SeekFrom};
    let mut h = std::fs::File::open(f)?;
    if h.metadata()?.len() == 0 {
        return Ok(true);
    }
    h.seek(SeekFrom::End(-1))?;
    let mut last = [0u8];
    h.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every entry of every digests file in `dir` (the later line of a path wins within a file), and
/// how many lines `own` holds.
fn read_all(dir: &Path, own: &Path) -> (HashMap<String, Line>, u64) {
    let mut known = HashMap::new();
    let mut own_lines = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (known, 0);
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    for f in files {
        let Ok(file) = std::fs::File::open(&f) else {
            continue;
        };
        for line in std::io::BufReader::new(file).split(b'\n') {
            let Ok(line) = line else { break };
            if f == own {
                own_lines += 1;
            }
            if let Ok(l) = serde_json::from_slice::<Line>(&line) {
                known.insert(l.path.clone(), l);
            }
        }
    }
    (known, own_lines)
}

/// BLAKE3 of the file's bytes and its stat, or `changed_while_hashing` when the file the path
/// names, or its size or times, changed while it was read (being written, or replaced).
fn hash_file(path: &Path) -> Result<(String, FileStat), StageError> {
    let _step = crate::profile::span("digest");
    let shown = path.display();
    let unreadable = |e: std::io::Error| StageError::data("unreadable", format!("{shown}: {e}"));
    let mut f = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => StageError::data(
            "missing_file",
            format!("{shown} does not exist or is not a file"),
        ),
        _ => unreadable(e),
    })?;
    let before = FileStat::of(&f.metadata().map_err(unreadable)?);
    let mut h = blake3::Hasher::new();
    let read = if before.size >= LARGE {
        let mut buf = vec![0u8; LARGE as usize];
        let mut read = 0u64;
        loop {
            let n = fill(&mut f, &mut buf).map_err(unreadable)?;
            if n == 0 {
                break read;
            }
            h.update_rayon(&buf[..n]);
            read += n as u64;
        }
    } else {
        h.update_reader(&mut f).map_err(unreadable)?;
        h.count()
    };
    let after_fd = f.metadata().map(|m| FileStat::of(&m));
    let after_path = std::fs::metadata(path).map(|m| FileStat::of(&m));
    let same = |s: &std::io::Result<FileStat>| s.as_ref().is_ok_and(|s| *s == before);
    if read != before.size || !same(&after_fd) || !same(&after_path) {
        return Err(StageError::external(
            "changed_while_hashing",
            format!(
                "{shown} changed while it was read ({} of {} bytes; it is being written, replaced or removed): the next run reads it again",
                read, before.size
            ),
        ));
    }
    Ok((h.finalize().to_hex().to_string(), before))
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn fill(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, bytes: &[u8]) {
        std::fs::write(p, bytes).unwrap();
    }

    #[test]
    fn a_kept_digest_needs_the_whole_stat_and_a_copy_is_read_again_to_the_same_digest() {
        let d = tempfile::tempdir().unwrap();
        let (work, media) = (d.path().join("run"), d.path().join("a.bin"));
        write(&media, b"the same bytes");
        let m = MediaDigests::open(&work, "part-").unwrap();
        let first = m.of(&media).unwrap();
        assert!(first.hashed);
        assert_eq!(
            first.blake3,
            blake3::hash(b"the same bytes").to_hex().as_str()
        );
        assert!(!m.of(&media).unwrap().hashed, "an unchanged stat: no read");
        // Another invocation finds it in the file.
        let again = MediaDigests::open(&work, "part-").unwrap();
        assert_eq!(
            again.of(&media).unwrap(),
            Known {
                hashed: false,
                ..first.clone()
            }
        );
        // Copied elsewhere: read, same digest.
        let copy = d.path().join("b.bin");
        std::fs::copy(&media, &copy).unwrap();
        let c = again.of(&copy).unwrap();
        assert!(c.hashed);
        assert_eq!(c.blake3, first.blake3);
        // Same size, other bytes, the old mtime put back: the ctime tells.
        let old = std::fs::metadata(&media).unwrap().modified().unwrap();
        write(&media, b"other  bytes!!");
        std::fs::File::options()
            .write(true)
            .open(&media)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let changed = again.of(&media).unwrap();
        assert!(changed.hashed);
        assert_ne!(changed.blake3, first.blake3);
        assert_eq!(again.hashed(), (2, 28));
    }

    #[test]
    fn a_torn_line_costs_a_read_and_a_missing_file_is_named() {
        let d = tempfile::tempdir().unwrap();
        let (work, media) = (d.path().join("run"), d.path().join("a.bin"));
        write(&media, b"x");
        MediaDigests::open(&work, "part-")
            .unwrap()
            .of(&media)
            .unwrap();
        let own = work.join(DIR).join("part-digests.jsonl");
        let text = std::fs::read_to_string(&own).unwrap();
        std::fs::write(&own, &text[..text.len() - 10]).unwrap();
        let m = MediaDigests::open(&work, "part-").unwrap();
        assert!(m.of(&media).unwrap().hashed);
        // The line appended after the cut one is whole.
        let m = MediaDigests::open(&work, "part-").unwrap();
        assert!(!m.of(&media).unwrap().hashed);
        let gone = d.path().join("gone.mp4");
        let e = m.of(&gone).unwrap_err();
        assert_eq!(e.reason, "missing_file");
        assert!(e.detail.contains("gone.mp4"), "{}", e.detail);
    }

    #[test]
    fn a_file_that_grows_while_it_is_read_is_no_digest() {
        let d = tempfile::tempdir().unwrap();
        let media = d.path().join("big.bin");
        write(&media, &vec![7u8; (LARGE * 3) as usize]);
        let writer = {
            let media = media.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let mut f = std::fs::OpenOptions::new()
                        .append(true)
                        .open(&media)
                        .unwrap();
                    f.write_all(&[1u8; 4096]).unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            })
        };
        let mut refused = 0;
        while !writer.is_finished() {
            if let Err(e) = hash_file(&media) {
                assert_eq!(e.reason, "changed_while_hashing");
                assert!(e.detail.contains("big.bin"));
                refused += 1;
            }
        }
        writer.join().unwrap();
        assert!(
            refused > 0,
            "a file written meanwhile was hashed as if whole"
        );
        // Once it is still, it hashes.
        let (sum, stat) = hash_file(&media).unwrap();
        let bytes = std::fs::read(&media).unwrap();
        assert_eq!(sum, blake3::hash(&bytes).to_hex().as_str());
        assert_eq!(stat.size, bytes.len() as u64);
    }

    #[test]
    fn compaction_keeps_the_files_asked_for() {
        let d = tempfile::tempdir().unwrap();
        let work = d.path().join("run");
        let m = MediaDigests::open(&work, "part-").unwrap();
        for i in 0..100 {
            let p = d.path().join(format!("{i}.bin"));
            write(&p, format!("{i}").as_bytes());
            m.of(&p).unwrap();
        }
        let m = MediaDigests::open(&work, "part-").unwrap();
        let kept = d.path().join("7.bin");
        m.of(&kept).unwrap();
        m.compact().unwrap();
        let own = work.join(DIR).join("part-digests.jsonl");
        assert_eq!(std::fs::read_to_string(&own).unwrap().lines().count(), 1);
        let m = MediaDigests::open(&work, "part-").unwrap();
        assert!(!m.of(&kept).unwrap().hashed);
    }
}
