//! Ranks: one run directory shared by N worker processes (a Slurm job array, a Kubernetes
//! Indexed Job, or N shells), each doing the videos that hash to it.
//!
//! A video belongs to rank `u64::from_le_bytes(blake3(video_id)[0..8]) mod world`: stable across
//! machines, versions and runs, so a rerun of rank R does exactly the videos rank R did before.
//! Each rank writes its own sequence of shard slots (`r0003-part-00012.parquet`), taken with a
//! create-only put, so two workers on one rank (a requeued array task while the old one still
//! runs) never commit a video twice (`shards`). The first worker pins the world size, the
//! pipeline's fingerprint and the tool version in `run.json`; a worker whose settings differ stops
//! before doing anything.

use crate::error::RunError;
use crate::store::Store;
use serde::{Deserialize, Serialize};

pub const PIN: &str = "run.json";

/// Which share of the videos this process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank {
    pub rank: u32,
    pub world: u32,
    /// Whether the rank was asked for (flags or scheduler variables): a ranked run is strict about
    /// its pin; a plain single-process run may change settings and re-pins.
    pub explicit: bool,
}

impl Default for Rank {
    fn default() -> Self {
        Self {
            rank: 0,
            world: 1,
            explicit: false,
        }
    }
}

/// The rank a video belongs to in a world of `world` ranks.
pub fn owner(video_id: &str, world: u32) -> u32 {
    (crate::record::id_key(video_id) % world.max(1) as u64) as u32
}

/// Why the flags and scheduler variables name no rank: each says which setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum RankError {
    #[error("{name}={value:?} is not a whole number")]
    NotANumber { name: String, value: String },
    #[error("--rank needs --world (the number of ranks)")]
    RankWithoutWorld,
    #[error("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not: pass --world")]
    SlurmWithoutCount,
    #[error("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")]
    SlurmBelowMin { id: u32, min: u32 },
    #[error("JOB_COMPLETION_INDEX is set: pass --world (the Job's completions)")]
    IndexWithoutWorld,
    #[error("--world {0} without --rank (and no SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)")]
    WorldWithoutRank(u32),
    /// `from` names where the rank came from (the flags or a scheduler variable).
    #[error(
        "rank {rank} is not in 0..{world} (from {from}): ranks count from 0 and the world is their number"
    )]
    OutOfRange {
        rank: u32,
        world: u32,
        from: &'static str,
    },
}

impl Rank {
    /// From `--rank/--world`, else the scheduler's variables, else the whole run in one process.
    /// Slurm: `SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN` of `SLURM_ARRAY_TASK_COUNT`;
    /// Kubernetes Indexed Jobs: `JOB_COMPLETION_INDEX` (the world from `--world`, as the Job's
    /// `completions`).
    pub fn resolve(
        rank: Option<u32>,
        world: Option<u32>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, RankError> {
        let num = |name: &str| -> Result<Option<u32>, RankError> {
            env(name)
                .map(|v| {
                    v.trim().parse().map_err(move |_| RankError::NotANumber {
                        name: name.to_string(),
                        value: v,
                    })
                })
                .transpose()
        };
        let (rank, world, from) = match (rank, world) {
            (Some(r), Some(w)) => (r, w, "--rank/--world"),
            (Some(_), None) => return Err(RankError::RankWithoutWorld),
            (None, w) => {
                if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
                    let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
                    let count = match (w, num("SLURM_ARRAY_TASK_COUNT")?) {
                        (Some(w), _) => w,
                        (None, Some(c)) => c,
                        (None, None) => {
                            return Err(RankError::SlurmWithoutCount);
                        }
                    };
                    let r = id
                        .checked_sub(min)
                        .ok_or(RankError::SlurmBelowMin { id, min })?;
                    (r, count, "SLURM_ARRAY_TASK_ID")
                } else if let Some(idx) = num("JOB_COMPLETION_INDEX")? {
                    let w = w.ok_or(RankError::IndexWithoutWorld)?;
                    (idx, w, "JOB_COMPLETION_INDEX")
                } else if let Some(w) = w {
                    return Err(RankError::WorldWithoutRank(w));
                } else {
                    return Ok(Self::default());
                }
            }
        };
        if world == 0 || rank >= world {
            return Err(RankError::OutOfRange { rank, world, from });
        }
        Ok(Self {
            rank,
            world,
            explicit: true,
        })
    }

    /// Whether this process does `video_id`.
    pub fn owns(&self, video_id: &str) -> bool {
        self.world <= 1 || owner(video_id, self.world) == self.rank
    }

    /// The shard name prefix of this rank's slots: `part-` alone when one process does all.
    pub fn shard_prefix(&self) -> String {
        if self.world <= 1 {
            "part-".into()
        } else {
            format!("r{:04}-part-", self.rank)
        }
    }

    /// Where this process records its invocations.
    pub fn manifest_path(&self) -> String {
        if self.world <= 1 {
            crate::store::manifest::MANIFEST.into()
        } else {
            format!(
                "ranks/r{:04}/{}",
                self.rank,
                crate::store::manifest::MANIFEST
            )
        }
    }
}

/// What every worker of a run must agree on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    pub world: u32,
    pub pipeline_fingerprint: String,
    pub tool_version: String,
}

impl Pin {
    fn differences(&self, other: &Pin) -> Vec<String> {
        let mut d = vec![];
        if self.world != other.world {
            d.push(format!(
                "world: run.json has {}, this worker {}",
                self.world, other.world
            ));
        }
        if self.pipeline_fingerprint != other.pipeline_fingerprint {
            d.push(format!(
                "pipeline fingerprint: run.json has {}, this worker {} (the pipeline file or the data it names changed)",
                self.pipeline_fingerprint, other.pipeline_fingerprint
            ));
        }
        if self.tool_version != other.tool_version {
            d.push(format!(
                "tool version: run.json has {}, this worker {}",
                self.tool_version, other.tool_version
            ));
        }
        d
    }
}

/// Pins `want` in the run directory, or checks it against the pin there. A ranked worker whose
/// settings differ is refused (unless `repin`); a single process re-pins, as a rerun with new
/// settings has always been allowed to.
pub async fn pin(store: &dyn Store, want: &Pin, rank: &Rank, repin: bool) -> Result<(), RunError> {
    let io = |e| store.io_error(PIN, e);
    let bytes = serde_json::to_vec_pretty(want).map_err(|e| RunError::Internal(e.to_string()))?;
    for _ in 0..3 {
        if store.put_if_absent(PIN, bytes.clone()).await.map_err(io)? {
            return Ok(());
        }
        let have = match store.get(PIN).await {
            Ok(b) => b,
            // Removed between our two calls (an operator's repin): try again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(e)),
        };
        let have: Pin = serde_json::from_slice(&have).map_err(|e| {
            RunError::Config(format!("{}/{PIN}: unreadable pin: {e}", store.location()))
        })?;
        let diff = have.differences(want);
        if diff.is_empty() {
            return Ok(());
        }
        // A process without rank flags must not quietly take over a ranked run: its `part-`
        // slots would not collide with the ranks' slots, and both would commit the same videos.
        if repin || (!rank.explicit && have.world <= 1) {
            tracing::info!(changes = %diff.join("; "), "Settings changed: re-pinning run.json.");
            store.put(PIN, bytes).await.map_err(io)?;
            return Ok(());
        }
        return Err(RunError::Config(format!(
            "{}: this worker's settings differ from the run's pin ({PIN}): {}. Start every worker with the same pipeline, world and tool version, or pass --repin once to start the run over with new settings.",
            store.location(),
            diff.join("; ")
        )));
    }
    Err(RunError::Config(format!(
        "{}/{PIN} keeps changing under this worker",
        store.location()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    /// Why `Rank::resolve` refuses these flags and variables.
    fn refusal(
        rank: Option<u32>,
        world: Option<u32>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> String {
        Rank::resolve(rank, world, env).unwrap_err().to_string()
    }

    #[test]
    fn rank_comes_from_flags_slurm_or_kubernetes() {
        let none = env(&[]);
        assert_eq!(Rank::resolve(None, None, &none).unwrap(), Rank::default());
        let r = Rank::resolve(Some(2), Some(4), &none).unwrap();
        assert_eq!((r.rank, r.world, r.explicit), (2, 4, true));
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "12"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
        ]);
        let r = Rank::resolve(None, None, &slurm).unwrap();
        assert_eq!((r.rank, r.world), (2, 8));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3")]);
        assert!(refusal(None, None, &k8s).contains("--world"));
        assert_eq!(Rank::resolve(None, Some(5), &k8s).unwrap().rank, 3);
        assert!(refusal(Some(4), Some(4), &none).contains("0..4"));
        assert!(Rank::resolve(Some(1), None, &none).is_err());
        let bad = env(&[("SLURM_ARRAY_TASK_ID", "x")]);
        assert!(refusal(None, None, &bad).contains("SLURM_ARRAY_TASK_ID"));
    }

    #[test]
    fn ownership_is_stable_and_spread() {
        // Pinned values: the documented hash must not change between versions.
        assert_eq!(owner("dQw4w9WgXcQ", 4), owner("dQw4w9WgXcQ", 4));
        let mut per_rank = [0u32; 4];
        for i in 0..4000 {
            per_rank[owner(&format!("video-{i}"), 4) as usize] += 1;
        }
        assert!(
            per_rank.iter().all(|&n| (900..1100).contains(&n)),
            "{per_rank:?}"
        );
        let r = Rank {
            rank: 1,
            world: 4,
            explicit: true,
        };
        assert_eq!(r.shard_prefix(), "r0001-part-");
        assert!(Rank::default().owns("anything"));
    }

    #[tokio::test]
    async fn a_worker_with_another_world_is_refused() {
        let (_dir, store) = crate::store::test_support::run_dir();
        let pin4 = Pin {
            world: 4,
            pipeline_fingerprint: "abc".into(),
            tool_version: "1".into(),
        };
        let r = Rank {
            rank: 0,
            world: 4,
            explicit: true,
        };
        pin(&*store, &pin4, &r, false).await.unwrap();
        pin(&*store, &pin4, &r, false).await.unwrap();
        let pin3 = Pin {
            world: 3,
            ..pin4.clone()
        };
        let err = pin(&*store, &pin3, &Rank { world: 3, ..r }, false)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("run.json has 4, this worker 3"), "{err}");
        // A process without rank flags may not take over a ranked run quietly...
        let one = Pin {
            world: 1,
            ..pin4.clone()
        };
        assert!(pin(&*store, &one, &Rank::default(), false).await.is_err());
        // ... but --repin starts the run over, and a single-process run re-pins as settings change.
        pin(&*store, &one, &Rank::default(), true).await.unwrap();
        let other = Pin {
            pipeline_fingerprint: "def".into(),
            ..one.clone()
        };
        pin(&*store, &other, &Rank::default(), false).await.unwrap();
        let have: Pin = serde_json::from_slice(&store.get(PIN).await.unwrap()).unwrap();
        assert_eq!(have, other);
    }
}
