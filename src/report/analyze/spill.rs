//! The KS tests' raw values past a memory budget. While the regions stream in, the largest
//! held sample is sorted and written as a run to one temporary file whenever every sample
//! together holds more than `BUDGET` values; a test merges a sample's runs and what it still
//! holds back in `total_cmp` order, the order a sort of all of them gives, so the statistic is
//! the same to the last bit. Below the budget (about two million creator-added regions in two
//! groups) nothing is written and a test sorts in memory as before.
//!
//! Writes and reads one named temporary file (removed when the last sample using it is
//! dropped); calls and caches nothing.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

/// Values held in memory, over every sample, before the largest is written out: 8 Mi values
/// (32 MiB of 32-bit floats).
pub(super) const BUDGET: usize = 8 << 20;

/// Bytes read ahead per run while merging.
const READ_AHEAD: usize = 1 << 16;

/// One sorted run in the file: its first value's index there, and its length.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    len: u64,
}

/// One sample's values: those still held, and the sorted runs already written.
#[derive(Debug, Default)]
pub(super) struct Spilled {
    pub(super) held: Vec<f32>,
    runs: Vec<Run>,
}

impl Spilled {
    pub(super) fn len(&self) -> usize {
        self.held.len() + self.runs.iter().map(|r| r.len as usize).sum::<usize>()
    }

    pub(super) fn has_runs(&self) -> bool {
        !self.runs.is_empty()
    }

    /// Drops every value (a sample no test will read).
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The file the runs go to, created at the first run.
#[derive(Default)]
pub(super) struct SpillFile {
    file: Option<tempfile::NamedTempFile>,
    /// Values written so far: the next run's start.
    written: u64,
}

impl SpillFile {
    /// Writes the largest held samples as runs until at most half the budget is held, when
    /// more than the budget is.
    pub(super) fn over_budget<'a>(
        &mut self,
        samples: impl Iterator<Item = &'a mut Spilled>,
    ) -> io::Result<()> {
        let mut samples: Vec<&mut Spilled> = samples.collect();
        let mut held: usize = samples.iter().map(|s| s.held.len()).sum();
        if held <= BUDGET {
            return Ok(());
        }
        samples.sort_by_key(|s| std::cmp::Reverse(s.held.len()));
        for s in samples {
            if held <= BUDGET / 2 {
                break;
            }
            held -= s.held.len();
            self.write(s)?;
        }
        Ok(())
    }

    /// Sorts `s`'s held values and appends them as a run, freeing their memory.
    pub(super) fn write(&mut self, s: &mut Spilled) -> io::Result<()> {
        let mut v = std::mem::take(&mut s.held);
        if v.is_empty() {
            return Ok(());
        }
        v.sort_unstable_by(f32::total_cmp);
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(tempfile::NamedTempFile::new()?),
        };
        let mut w = BufWriter::with_capacity(READ_AHEAD, file.as_file_mut());
        for x in &v {
            w.write_all(&x.to_le_bytes())?;
        }
        w.flush()?;
        s.runs.push(Run {
            start: self.written,
            len: v.len() as u64,
        });
        self.written += v.len() as u64;
        Ok(())
    }

    /// The file, shared by the samples that read it back (None: nothing was written).
    pub(super) fn into_shared(self) -> Option<Arc<tempfile::NamedTempFile>> {
        self.file.map(Arc::new)
    }
}

/// One source of a merge: a run read from the file, or the values still held.
enum Source {
    Run { reader: BufReader<io::Take<File>> },
    Held(std::vec::IntoIter<f32>),
}

impl Source {
    fn next(&mut self) -> io::Result<Option<f32>> {
        match self {
            Source::Held(it) => Ok(it.next()),
            Source::Run { reader } => {
                let mut b = [0u8; 4];
                match reader.read_exact(&mut b) {
                    Ok(()) => Ok(Some(f32::from_le_bytes(b))),
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// A sample's values in ascending `total_cmp` order: its runs and its held values merged.
/// A read error ends the sequence and is kept in `error`.
pub(super) struct Merge {
    sources: Vec<Source>,
    heads: Vec<Option<f32>>,
    pub(super) error: Option<io::Error>,
    /// Keeps the file until the merge is done.
    _file: Arc<tempfile::NamedTempFile>,
}

impl Merge {
    pub(super) fn new(s: Spilled, file: Arc<tempfile::NamedTempFile>) -> io::Result<Self> {
        let mut held = s.held;
        held.sort_unstable_by(f32::total_cmp);
        let mut sources = vec![];
        for r in &s.runs {
            let mut f = File::open(file.path())?;
            f.seek(SeekFrom::Start(r.start * 4))?;
            sources.push(Source::Run {
                reader: BufReader::with_capacity(READ_AHEAD, f.take(r.len * 4)),
            });
        }
        sources.push(Source::Held(held.into_iter()));
        let heads = sources
            .iter_mut()
            .map(Source::next)
            .collect::<io::Result<_>>()?;
        Ok(Self {
            sources,
            heads,
            error: None,
            _file: file,
        })
    }
}

impl Iterator for Merge {
    type Item = f32;

    fn next(&mut self) -> Option<f32> {
        let mut best: Option<(usize, f32)> = None;
        for (k, h) in self.heads.iter().enumerate() {
            if let Some(x) = *h
                && best.is_none_or(|(_, b)| x.total_cmp(&b).is_lt())
            {
                best = Some((k, x));
            }
        }
        let (k, x) = best?;
        match self.sources[k].next() {
            Ok(next) => self.heads[k] = next,
            Err(e) => {
                self.error = Some(e);
                self.heads.iter_mut().for_each(|h| *h = None);
                return None;
            }
        }
        Some(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_back_in_the_order_a_full_sort_gives() {
        let mut rng = 0x9e37_79b9_u32;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            // Few distinct values (ties across runs), negative zero and an infinity among them.
            match rng % 50 {
                0 => -0.0,
                1 => f32::INFINITY,
                k => (k as f32 - 25.0) / 7.0,
            }
        };
        let all: Vec<f32> = (0..10_000).map(|_| next()).collect();
        let mut file = SpillFile::default();
        let mut s = Spilled::default();
        for chunk in all.chunks(3_000) {
            s.held.extend_from_slice(chunk);
            file.write(&mut s).unwrap();
        }
        s.held.extend_from_slice(&all[..123]);
        assert_eq!((s.runs.len(), s.len()), (4, 10_123));
        let mut want = all.clone();
        want.extend_from_slice(&all[..123]);
        want.sort_unstable_by(f32::total_cmp);
        let mut m = Merge::new(s, file.into_shared().unwrap()).unwrap();
        let got: Vec<u32> = m.by_ref().map(f32::to_bits).collect();
        assert!(m.error.is_none());
        assert_eq!(got, want.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }

    #[test]
    fn only_the_largest_samples_go_to_disk_and_only_past_the_budget() {
        let mut file = SpillFile::default();
        let mut a = Spilled {
            held: vec![1.0; BUDGET / 2],
            ..Default::default()
        };
        let mut b = Spilled {
            held: vec![2.0; BUDGET / 4],
            ..Default::default()
        };
        file.over_budget([&mut a, &mut b].into_iter()).unwrap();
        assert!(!a.has_runs() && !b.has_runs() && file.into_shared().is_none());
        let mut file = SpillFile::default();
        b.held.extend(vec![3.0; BUDGET / 2]);
        file.over_budget([&mut a, &mut b].into_iter()).unwrap();
        // b (3/4 of the budget) goes; a (1/2) may stay.
        assert_eq!((a.has_runs(), b.has_runs()), (false, true));
        assert_eq!((a.len(), b.len()), (BUDGET / 2, BUDGET / 4 + BUDGET / 2));
    }
}
