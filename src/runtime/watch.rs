//! The stall detector: what each stage is doing, and one report when the run stops moving.
//!
//! Every stage task keeps a `StageWatch` up to date (videos received, computing, finished and
//! waiting for room downstream; how long its recent videos took). A monitor task looks at them
//! every few seconds. When work is pending and no stage has finished a video for the stall time —
//! `runtime.stall_secs`, or four times the slowest stage's recent per-video time if that is
//! longer — it logs, once, one line per stage saying what it waits on, how many records sit in
//! the channel in front of it, and the CPU pool's queue. It logs again only after the run has moved and stalled anew. It never
//! stops the run: a slow model service and a deadlock look the same from here, and the report is
//! there so a person can tell them apart.

use super::cpu::CpuPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One stage's live state. Counts are of videos.
pub struct StageWatch {
    pub name: String,
    started: Instant,
    received: AtomicU64,
    computing: AtomicU64,
    /// Finished here, not yet handed to the next stage (its channel is full).
    waiting_to_send: AtomicU64,
    finished: AtomicU64,
    /// Milliseconds since `started` of the last finished video.
    last_finish_ms: AtomicU64,
    /// Recent per-video compute time (exponential average), microseconds.
    recent_us: AtomicU64,
    /// Handed to the next stage (what sits in the channel is this minus its `received`).
    sent: AtomicU64,
    input_closed: AtomicBool,
    ended: AtomicBool,
    /// The stage's funnel so far (what the run's summary prints at the end), for the metrics.
    funnel: std::sync::Mutex<super::StageCounts>,
    /// The stage's own counters (frames, OCR lines, ...), for the metrics.
    tally: std::sync::OnceLock<super::stage::Tally>,
    /// Retries of failed computations: [after a wait the service asked for, after our backoff],
    /// and the milliseconds waited before them.
    retries: [AtomicU64; 2],
    retry_wait_ms: [AtomicU64; 2],
}

/// What the metrics endpoint shows of one stage.
pub struct StageSample {
    pub funnel: super::StageCounts,
    pub computing: u64,
    /// Records in the channel in front of the stage (sent by the one before, not yet taken).
    pub queued: u64,
    pub tally: std::collections::BTreeMap<String, u64>,
    /// Retries and milliseconds waited: [service asked, backoff].
    pub retries: [u64; 2],
    pub retry_wait_ms: [u64; 2],
}

impl StageWatch {
    pub fn new(name: &str, started: Instant) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_string(),
            started,
            received: AtomicU64::new(0),
            computing: AtomicU64::new(0),
            waiting_to_send: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            last_finish_ms: AtomicU64::new(0),
            recent_us: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            input_closed: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            funnel: Default::default(),
            tally: Default::default(),
            retries: Default::default(),
            retry_wait_ms: Default::default(),
        })
    }

    pub fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }
    pub fn started_computing(&self) {
        self.computing.fetch_add(1, Ordering::Relaxed);
    }
    /// A video is finished here (computed, reused, rejected or filtered); `took` is its compute
    /// time when it was computed in this run.
    pub fn finished(&self, took: Option<Duration>) {
        if let Some(t) = took {
            self.computing.fetch_sub(1, Ordering::Relaxed);
            let us = t.as_micros().min(u64::MAX as u128) as u64;
            let old = self.recent_us.load(Ordering::Relaxed);
            let new = if old == 0 { us } else { (old * 3 + us) / 4 };
            self.recent_us.store(new, Ordering::Relaxed);
        }
        self.finished.fetch_add(1, Ordering::Relaxed);
        self.last_finish_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }
    pub fn set_waiting_to_send(&self, n: usize) {
        self.waiting_to_send.store(n as u64, Ordering::Relaxed);
    }
    pub fn input_closed(&self) {
        self.input_closed.store(true, Ordering::Relaxed);
    }
    pub fn ended(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }
    /// The stage's own counters, read live by the metrics.
    pub fn attach_tally(&self, tally: super::stage::Tally) {
        let _ = self.tally.set(tally);
    }
    /// A computation is tried again after `wait`, which the service `asked` for or our backoff
    /// chose.
    pub fn retrying(&self, wait: Duration, asked: bool) {
        let i = usize::from(!asked);
        self.retries[i].fetch_add(1, Ordering::Relaxed);
        let ms = wait.as_millis().min(u64::MAX as u128) as u64;
        self.retry_wait_ms[i].fetch_add(ms, Ordering::Relaxed);
    }

    /// The stage's counts as they stand (after each video).
    pub fn publish(&self, counts: &super::StageCounts) {
        let mut f = self.funnel.lock().unwrap_or_else(|e| e.into_inner());
        // Only the funnel: the tally is the stage's own and is read at the end.
        *f = super::StageCounts {
            tally: Default::default(),
            ..counts.clone()
        };
    }

    /// The stage now; `upstream` is the stage before it.
    pub fn sample(&self, upstream: Option<&StageWatch>) -> StageSample {
        StageSample {
            funnel: self
                .funnel
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            computing: self.computing.load(Ordering::Relaxed),
            queued: upstream.map_or(0, |u| {
                u.sent
                    .load(Ordering::Relaxed)
                    .saturating_sub(self.received.load(Ordering::Relaxed))
            }),
            tally: self.tally.get().map(|t| t.snapshot()).unwrap_or_default(),
            retries: self.retries.each_ref().map(|a| a.load(Ordering::Relaxed)),
            retry_wait_ms: self
                .retry_wait_ms
                .each_ref()
                .map(|a| a.load(Ordering::Relaxed)),
        }
    }

    /// One line of the report; `upstream` is the stage before (whose channel feeds this one).
    fn line(&self, upstream: Option<&StageWatch>, capacity: usize) -> String {
        let queued = upstream
            .map(|u| {
                let n = u
                    .sent
                    .load(Ordering::Relaxed)
                    .saturating_sub(self.received.load(Ordering::Relaxed));
                format!(", {n}/{capacity} queued in front")
            })
            .unwrap_or_default();
        let state = if self.ended.load(Ordering::Relaxed) {
            "ended"
        } else if self.input_closed.load(Ordering::Relaxed) {
            "input closed"
        } else {
            "taking input"
        };
        format!(
            "{}: {state}; received {}, finished {}, computing {}, waiting to send {}{queued}, recent {:.1} s/video",
            self.name,
            self.received.load(Ordering::Relaxed),
            self.finished.load(Ordering::Relaxed),
            self.computing.load(Ordering::Relaxed),
            self.waiting_to_send.load(Ordering::Relaxed),
            self.recent_us.load(Ordering::Relaxed) as f64 / 1e6,
        )
    }
}

/// When the run counts as stalled.
#[derive(Debug, Clone, Copy)]
pub struct StallPolicy {
    /// No video finished anywhere for this long while work is pending.
    pub after: Duration,
    /// ... and for this many times the slowest stage's recent per-video time.
    pub slowest_factor: u32,
    /// How often the monitor looks.
    pub every: Duration,
}

impl StallPolicy {
    pub fn new(after: Duration) -> Self {
        Self {
            after,
            slowest_factor: 4,
            every: (after / 4).clamp(Duration::from_millis(200), Duration::from_secs(10)),
        }
    }
}

/// Whether the run is stalled now: the time since the last finished video, if it is past the
/// limit while work is pending.
fn stalled_for(
    watches: &[Arc<StageWatch>],
    policy: &StallPolicy,
    now: Instant,
) -> Option<Duration> {
    let pending = watches.iter().any(|w| !w.ended.load(Ordering::Relaxed));
    if !pending {
        return None;
    }
    let started = watches.first()?.started;
    let last = watches
        .iter()
        .map(|w| w.last_finish_ms.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    let idle = now
        .duration_since(started)
        .saturating_sub(Duration::from_millis(last));
    let slowest = watches
        .iter()
        .map(|w| Duration::from_micros(w.recent_us.load(Ordering::Relaxed)))
        .max()
        .unwrap_or_default();
    let limit = policy.after.max(slowest * policy.slowest_factor);
    (idle >= limit).then_some(idle)
}

/// The report, one line per stage (in chain order) and one for the CPU pool.
pub fn report(watches: &[Arc<StageWatch>], capacity: usize, cpu: &CpuPool) -> Vec<String> {
    let mut lines: Vec<String> = watches
        .iter()
        .enumerate()
        .map(|(i, w)| w.line(i.checked_sub(1).map(|u| &*watches[u]), capacity))
        .collect();
    let snap = cpu.snapshot();
    let per: Vec<String> = snap
        .stages
        .iter()
        .filter(|s| s.1 + s.2 > 0)
        .map(|(name, q, r, _)| format!("{name} {r} running/{q} queued"))
        .collect();
    lines.push(format!(
        "cpu pool ({} threads): {}",
        snap.threads,
        if per.is_empty() {
            "idle".to_string()
        } else {
            per.join(", ")
        }
    ));
    lines
}

/// Watches until `stop` fires; logs a report once per stall. `watches` are in chain order;
/// `capacity` is the channels' capacity.
pub fn spawn_monitor(
    watches: Vec<Arc<StageWatch>>,
    capacity: usize,
    cpu: CpuPool,
    policy: StallPolicy,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(policy.every);
        let mut reported_at: Option<u64> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let last = watches
                .iter()
                .map(|w| w.finished.load(Ordering::Relaxed))
                .sum::<u64>();
            match stalled_for(&watches, &policy, Instant::now()) {
                Some(idle) if reported_at != Some(last) => {
                    reported_at = Some(last);
                    let lines = report(&watches, capacity, &cpu);
                    tracing::warn!(
                        "Stalled: no stage has finished a video for {} s while work is pending. What each stage is waiting on:\n  {}",
                        idle.as_secs(),
                        lines.join("\n  ")
                    );
                }
                _ => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_needs_pending_work_and_idle_past_both_limits() {
        let t0 = Instant::now();
        let a = StageWatch::new("a", t0);
        let b = StageWatch::new("b", t0);
        let ws = vec![a.clone(), b.clone()];
        let p = StallPolicy::new(Duration::from_secs(60));
        assert!(stalled_for(&ws, &p, t0 + Duration::from_secs(59)).is_none());
        assert!(stalled_for(&ws, &p, t0 + Duration::from_secs(61)).is_some());
        // A slow stage (30 s a video) raises the limit to 120 s.
        b.started_computing();
        b.recent_us.store(30_000_000, Ordering::Relaxed);
        assert!(stalled_for(&ws, &p, t0 + Duration::from_secs(100)).is_none());
        assert!(stalled_for(&ws, &p, t0 + Duration::from_secs(121)).is_some());
        a.ended();
        b.ended();
        assert!(stalled_for(&ws, &p, t0 + Duration::from_secs(500)).is_none());
    }
}
