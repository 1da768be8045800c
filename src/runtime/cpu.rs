//! The CPU pool: a fixed set of threads with their own queue for decoding, hashing and OCR.
//!
//! Why not a semaphore in front of `spawn_blocking`: a tokio semaphore hands a released permit to
//! the first waiter in its queue whether or not anyone polls that waiter. A stage whose task sat
//! on a full output channel left its queued futures unpolled, one of them was handed the permit,
//! and every other stage queued behind a permit nobody would use (issue 10: runs stalled for good
//! once a channel filled). Here a job is queued when its future is first polled and then runs on
//! a pool thread whatever happens to the future: awaiting the result holds nothing shared.
//!
//! Jobs of later stages run first (then oldest first): a video near the end of the chain is
//! finished and its memory freed before an upstream stage starts another one, and an upstream
//! stage cannot fill the queue in front of the stage that would drain the channels.
//!
//! The pool keeps counts per stage (queued, running, done) for the stall report.

use crate::error::StageError;
use std::collections::{BTreeMap, BinaryHeap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Queued {
    /// Position of the submitting stage in the chain: higher runs first.
    rank: u32,
    /// Submission order: lower runs first within a rank.
    seq: u64,
    job: Job,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.rank, self.seq) == (o.rank, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // BinaryHeap pops the greatest: greatest rank, then smallest seq.
        self.rank.cmp(&o.rank).then(o.seq.cmp(&self.seq))
    }
}

/// Counts for one stage's jobs.
#[derive(Default)]
pub struct JobCounts {
    pub queued: AtomicU64,
    pub running: AtomicU64,
    pub done: AtomicU64,
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Queued>,
    seq: u64,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    counts: Mutex<BTreeMap<String, Arc<JobCounts>>>,
}

impl Shared {
    fn counts_for(&self, stage: &str) -> Arc<JobCounts> {
        let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(stage.to_string()).or_default().clone()
    }

    /// The next job; `me` is this thread's place in the profile (idle while it waits).
    fn next_job(&self, me: Option<usize>) -> Option<Job> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(j) = q.heap.pop() {
                crate::profile::pool_thread_idle(me, false);
                return Some(j.job);
            }
            if q.closed {
                return None;
            }
            crate::profile::pool_thread_idle(me, true);
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Closes the queue when the last pool handle is dropped, so the threads end.
struct Owner {
    shared: Arc<Shared>,
    threads: usize,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
        self.shared.ready.notify_all();
    }
}

/// A handle on the pool, labelled with the stage that submits through it.
#[derive(Clone)]
pub struct CpuPool {
    owner: Arc<Owner>,
    rank: u32,
    counts: Arc<JobCounts>,
    /// The stage its jobs count under in `run --profile`.
    stage: Arc<str>,
}

/// What the pool is doing, for the stall report.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSnapshot {
    pub threads: usize,
    /// (stage, queued, running, done)
    pub stages: Vec<(String, u64, u64, u64)>,
}

impl CpuPool {
    /// Starts `threads` pool threads (at least one).
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            counts: Mutex::new(BTreeMap::new()),
        });
        for i in 0..threads {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("vidcurate-cpu-{i}"))
                .spawn(move || {
                    let me = crate::profile::pool_thread_started();
                    while let Some(job) = shared.next_job(me) {
                        job();
                        crate::profile::pool_thread_idle(me, true);
                    }
                    crate::profile::pool_thread_ended(me);
                })
                .expect("cannot start a CPU pool thread");
        }
        let counts = shared.counts_for("-");
        Self {
            owner: Arc::new(Owner { shared, threads }),
            rank: 0,
            counts,
            stage: "-".into(),
        }
    }

    /// The same pool, with jobs counted under `stage` at chain position `rank` (later stages'
    /// jobs run first).
    pub fn for_stage(&self, stage: &str, rank: u32) -> Self {
        Self {
            owner: self.owner.clone(),
            rank,
            counts: self.owner.shared.counts_for(stage),
            stage: stage.into(),
        }
    }

    pub fn threads(&self) -> usize {
        self.owner.threads
    }

    pub fn snapshot(&self) -> PoolSnapshot {
        let m = self
            .owner
            .shared
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        PoolSnapshot {
            threads: self.owner.threads,
            stages: m
                .iter()
                .map(|(k, c)| {
                    (
                        k.clone(),
                        c.queued.load(Ordering::Relaxed),
                        c.running.load(Ordering::Relaxed),
                        c.done.load(Ordering::Relaxed),
                    )
                })
                .collect(),
        }
    }

    /// Runs `f` on a pool thread. The job is queued on the first poll; if the caller is dropped
    /// before the job starts, the job is skipped; once started it runs to its end (a decoder
    /// cannot be stopped halfway), and its result is dropped. A panic becomes an internal error.
    pub async fn run<T, F>(&self, f: F) -> Result<T, StageError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, StageError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let (counts, stage) = (self.counts.clone(), self.stage.clone());
        let job: Job = Box::new(move || {
            counts.queued.fetch_sub(1, Ordering::Relaxed);
            if tx.is_closed() {
                return;
            }
            let _job = crate::profile::job(&stage);
            counts.running.fetch_add(1, Ordering::Relaxed);
            let out = std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
                Err(StageError::internal(
                    "cpu_task_panicked",
                    crate::error::panic_message(p.as_ref()),
                ))
            });
            counts.running.fetch_sub(1, Ordering::Relaxed);
            counts.done.fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(out);
        });
        {
            let shared = &self.owner.shared;
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.seq += 1;
            let seq = q.seq;
            self.counts.queued.fetch_add(1, Ordering::Relaxed);
            q.heap.push(Queued {
                rank: self.rank,
                seq,
                job,
            });
            drop(q);
            shared.ready.notify_one();
        }
        rx.await
            .map_err(|_| StageError::internal("cpu_pool_closed", "CPU pool closed"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unpolled_waiter_holds_nothing() {
        // The shape of issue 10: one caller queues work and is then never polled again; another
        // caller's work must still run.
        let pool = CpuPool::new(1);
        let a = pool.for_stage("a", 0);
        let b = pool.for_stage("b", 1);
        let gate = Arc::new(std::sync::Barrier::new(2));
        let g2 = gate.clone();
        let first = a.run(move || {
            g2.wait();
            Ok(1)
        });
        let mut first = Box::pin(first);
        // Poll once so the job is queued, then leave it alone.
        assert!(futures::poll!(first.as_mut()).is_pending());
        let stalled = a.run(|| Ok(2));
        let mut stalled = Box::pin(stalled);
        assert!(futures::poll!(stalled.as_mut()).is_pending());
        gate.wait();
        let third = tokio::time::timeout(Duration::from_secs(10), b.run(|| Ok(3)))
            .await
            .expect("work behind an unpolled waiter never ran");
        assert_eq!(third.unwrap(), 3);
        assert_eq!(first.await.unwrap(), 1);
        assert_eq!(stalled.await.unwrap(), 2);
    }

    #[tokio::test]
    async fn later_stages_run_first_and_panics_are_errors() {
        let pool = CpuPool::new(1);
        let order = Arc::new(Mutex::new(vec![]));
        let gate = Arc::new(std::sync::Barrier::new(2));
        let g2 = gate.clone();
        // Occupy the only thread so the next jobs queue up.
        let hold = pool.for_stage("x", 0);
        let mut held = Box::pin(hold.run(move || {
            g2.wait();
            Ok(())
        }));
        assert!(futures::poll!(held.as_mut()).is_pending());
        let mut futs = vec![];
        for (stage, rank) in [("up", 0u32), ("down", 5), ("up", 0), ("down", 5)] {
            let o = order.clone();
            let p = pool.for_stage(stage, rank);
            let mut f = Box::pin(async move {
                p.run(move || {
                    o.lock().unwrap().push(stage);
                    Ok(())
                })
                .await
            });
            assert!(futures::poll!(f.as_mut()).is_pending());
            futs.push(f);
        }
        gate.wait();
        held.await.unwrap();
        for f in futs {
            f.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec!["down", "down", "up", "up"]);
        let e = pool
            .run::<(), _>(|| panic!("boom"))
            .await
            .expect_err("a panic must be an error");
        assert!(e.to_string().contains("boom"), "{e}");
        let snap = pool.snapshot();
        let down = snap.stages.iter().find(|s| s.0 == "down").unwrap();
        assert_eq!((down.1, down.2, down.3), (0, 0, 2));
    }
}
