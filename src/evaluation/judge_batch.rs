//! The judge of `evaluate --judge FILE` when its service has `mode = "batch"`: before the
//! scoring, every judgment is asked once; those the response cache cannot answer wait in a
//! queue, go out as batches through the provider's batch interface, and are asked again once
//! the batches have answered, until the cache answers them all. A repair of an answer that
//! breaks its schema goes to the next batch, or live, per the service's `batch_repairs`; a
//! request a batch answered with an error goes live, or stays unjudged, per `batch_errors`. The
//! scoring that follows reads every verdict from the cache, as a live judge's second run does.
//!
//! Reads and writes: the queue in `batches/<service>/` beside the judge's response cache (the
//! store's files, `store::batch`; `vidcurate batch status <release>/.judge` lists them). Calls:
//! the service's batch interface through `runtime::batch::BatchService`, as the runner does
//! between passes. Caches: the batches' answers, in the judge's response cache.
//!
//! No Ctrl-C handler: the queue is on disk before anything is sent (each job with its input
//! file id before its batch is created, its batch id as soon as it exists), so a Ctrl-C or a
//! kill loses nothing, and the next `evaluate` polls the batches it finds there (one whose id
//! was lost is found again in the provider's list) instead of paying for them again.

use super::judge::{Ask, Judge, judge_failed};
use crate::error::{ErrorKind, RunError};
use crate::runtime::batch::BatchService;
use crate::store::batch::{load_jobs, queue_dir};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// Asks every judgment of `asks` (each once per sample) until the cache answers them all,
/// sending what waits as batches in between and waiting for them.
pub async fn answer_all(judge: &Judge, asks: &[(Ask, String)]) -> Result<(), RunError> {
    let svc = judge.svc.as_ref();
    let name = &judge.settings.service;
    let dir = queue_dir(&judge.cache_dir, &svc.queue_name);
    svc.attach(&judge.cache_dir)?;
    // Never fired: a Ctrl-C ends the process (see the module docs).
    let cancel = CancellationToken::new();
    let poll = svc.batch_poll_every().as_secs_f64();
    let earlier = load_jobs(&dir)?.iter().filter(|j| !j.imported).count();
    if earlier > 0 {
        eprintln!(
            "judge {name}: {earlier} batch(es) an earlier evaluate sent are not in yet ({}); waiting for them, polling every {poll} s",
            dir.display()
        );
        let s = svc.settle(&judge.cache, &cancel).await?;
        eprintln!(
            "judge {name}: the batches answered {} judgment(s), {} with an error",
            s.answered, s.errors
        );
    }
    loop {
        let waiting = ask_all(judge, asks).await?;
        if waiting == 0 {
            return Ok(());
        }
        let sent = svc.pending();
        let jobs = svc.chunk()?;
        eprintln!(
            "judge {name}: {sent} judgment(s) not in the cache, sent in {jobs} batch(es); waiting for them, polling every {poll} s (recorded in {}: after Ctrl-C or a kill, the same evaluate picks them up)",
            dir.display()
        );
        let s = svc.settle(&judge.cache, &cancel).await?;
        eprintln!(
            "judge {name}: the batches answered {} judgment(s), {} with an error",
            s.answered, s.errors
        );
        // Without an answer or an error the next round would queue the same requests again.
        if s.answered + s.errors == 0 {
            return Err(RunError::Internal(format!(
                "judge {name}: {waiting} judgment(s) wait for a batch, but no batch answered anything; see {}",
                dir.display()
            )));
        }
    }
}

/// Asks every judgment once; returns how many wait for a batch. A call that fails for good
/// stops the evaluation, as it does with a live judge.
async fn ask_all(judge: &Judge, asks: &[(Ask, String)]) -> Result<usize, RunError> {
    let samples = judge.settings.samples;
    let calls = asks
        .iter()
        .flat_map(|(ask, text)| (0..samples).map(move |s| judge.verdict(ask, text, s)));
    let results: Vec<_> = futures::stream::iter(calls)
        .buffer_unordered(judge.settings.in_flight.max(1))
        .collect()
        .await;
    let mut waiting = 0;
    for r in results {
        match r {
            Ok(_) => {}
            Err(e) if e.kind == ErrorKind::Deferred => waiting += 1,
            Err(e) => return Err(judge_failed(&judge.settings.service, e)),
        }
    }
    Ok(waiting)
}
