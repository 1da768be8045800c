//! Progress: an indicatif bar per stage on a terminal; periodic plain log lines elsewhere (CI).

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Default)]
pub struct Counter {
    pub done: AtomicU64,
    pub rejected: AtomicU64,
}

pub struct StageProgress {
    pub name: String,
    pub bar: Option<ProgressBar>,
    pub counter: Arc<Counter>,
}

impl StageProgress {
    pub fn inc(&self, rejected: bool) {
        self.counter.done.fetch_add(1, Ordering::Relaxed);
        if rejected {
            self.counter.rejected.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(b) = &self.bar {
            b.inc(1);
            if rejected {
                b.set_message(format!(
                    "{} rejected",
                    self.counter.rejected.load(Ordering::Relaxed)
                ));
            }
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish();
        }
    }
}

pub struct Progress {
    multi: Option<MultiProgress>,
    stages: Vec<Arc<StageProgress>>,
    total: Arc<AtomicU64>,
}

impl Progress {
    /// Bars when stderr is a terminal, unless `quiet`.
    pub fn new(quiet: bool) -> Self {
        let multi = (!quiet && std::io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(5)));
        Self {
            multi,
            stages: vec![],
            total: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn stage(&mut self, name: &str) -> Arc<StageProgress> {
        let bar = self.multi.as_ref().map(|m| {
            let b = m.add(ProgressBar::new(0));
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>12.bold} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_prefix(name.to_string());
            b
        });
        let s = Arc::new(StageProgress {
            name: name.to_string(),
            bar,
            counter: Arc::new(Counter::default()),
        });
        self.stages.push(s.clone());
        s
    }

    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        for s in &self.stages {
            if let Some(b) = &s.bar {
                b.set_length(total);
            }
        }
    }

    /// Without a terminal, logs one line per stage every `every`, until the token fires.
    pub fn spawn_logger(&self, every: Duration, stop: tokio_util::sync::CancellationToken) {
        if self.multi.is_some() {
            return;
        }
        let stages = self.stages.clone();
        let total = self.total.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let total = total.load(Ordering::Relaxed);
                for s in &stages {
                    tracing::info!(
                        stage = %s.name,
                        done = s.counter.done.load(Ordering::Relaxed),
                        total,
                        rejected = s.counter.rejected.load(Ordering::Relaxed),
                        "Progress."
                    );
                }
            }
        });
    }
}
