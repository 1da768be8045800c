//! The Slurm path on a real Slurm: Debian's munge and slurm-wlm (installed by scripts/setup.sh)
//! started here on 127.0.0.1 (one node with the machine's CPUs, its own ports and folders),
//! `sbatch --array=0-2 deploy/slurm/array.sbatch` over moto, one task cancelled while it runs and
//! resubmitted as the script's comment says. `vidcurate status` shows the ranks' progress and
//! names the rank to run again; `verify` finds every committed object as recorded, and the final
//! tables equal a local run's.
//!
//! Optional only where slurmd cannot start (a sandbox without the rights it needs): the test
//! then says so, with the daemon's last log lines. Missing programs are a failed setup, not a skip.

use crate::cluster::{bucket, corpus, download, s3_env, snapshot, store};
use crate::need_ffmpeg;
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vidcurate::store::Store;

/// The daemons of one test cluster; killed when dropped (a panic included), and by a watchdog
/// shell each if the test binary itself dies.
struct Cluster {
    dir: PathBuf,
    daemons: Vec<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Runs `args` in the foreground under a watchdog that stops it when this process exits.
fn daemon(args: &[&str], conf: &Path, log: &Path) -> Child {
    let script = format!(
        "\"$0\" \"$@\" & m=$!; while kill -0 {} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 1; done; kill $m 2>/dev/null",
        std::process::id()
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .args(args)
        .env("SLURM_CONF", conf)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::from(
            std::fs::File::create(log.with_extension("err")).unwrap(),
        ))
        .spawn()
        .unwrap()
}

fn tool(name: &str) -> String {
    for dir in ["/usr/sbin", "/usr/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p.display().to_string();
        }
    }
    panic!("{name} is not installed: run ./scripts/setup.sh (it installs munge and slurm-wlm)");
}

fn tail(path: &Path) -> String {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// Starts munged, slurmctld and slurmd; None (with the reason printed) when slurmd cannot start.
fn start(dir: &Path) -> Option<Cluster> {
    for sub in ["state", "spool", "logs"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let key = dir.join("munge.key");
    let bytes: Vec<u8> = (0..1024u32)
        .map(|i| blake3::hash(&i.to_le_bytes()).as_bytes()[0])
        .collect();
    std::fs::write(&key, bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = dir.join("munge.sock");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let conf = dir.join("slurm.conf");
    let d = dir.display();
    write(
        &conf,
        &format!(
            "ClusterName=vidcurate\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={}\nSlurmdPort={}\n\
             SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nAuthInfo=socket={}\nCredType=cred/munge\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core_Memory\nStateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\nJobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n\
             MpiDefault=none\nReturnToService=2\n\
             NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN\n\
             PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            free_port(),
            free_port(),
            sock.display()
        ),
    );
    let (munged, ctld, slurmd) = (tool("munged"), tool("slurmctld"), tool("slurmd"));
    let (k, s) = (key.display().to_string(), sock.display().to_string());
    let mut c = Cluster {
        dir: dir.to_path_buf(),
        daemons: vec![],
    };
    let pid = format!("{d}/munged.pid");
    let seed = format!("{d}/munge.seed");
    let mlog = format!("{d}/munged.log");
    c.daemons.push(daemon(
        &[
            &munged,
            "-F",
            "--force",
            "--socket",
            &s,
            "--key-file",
            &k,
            "--pid-file",
            &pid,
            "--seed-file",
            &seed,
            "--log-file",
            &mlog,
        ],
        &conf,
        &dir.join("munged.out"),
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sock.exists() {
        assert!(
            Instant::now() < deadline,
            "munged did not start: {}",
            tail(Path::new(&mlog))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let conf_s = conf.display().to_string();
    c.daemons.push(daemon(
        &[&ctld, "-D", "-f", &conf_s],
        &conf,
        &dir.join("ctld.out"),
    ));
    c.daemons.push(daemon(
        &[&slurmd, "-D", "-N", "localhost", "-f", &conf_s],
        &conf,
        &dir.join("slurmd.out"),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = c.slurm("sinfo", &["-h", "-o", "%T"]).output().unwrap();
        let state = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if state == "idle" {
            return Some(c);
        }
        if Instant::now() > deadline {
            eprintln!(
                "skipped: slurmd could not start here (node state {state:?}); slurmd.log says:\n{}\n{}",
                tail(&dir.join("slurmd.log")),
                tail(&dir.join("slurmd.err"))
            );
            return None;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

impl Cluster {
    fn slurm(&self, cmd: &str, args: &[&str]) -> Command {
        let mut c = Command::new(cmd);
        c.args(args).env("SLURM_CONF", self.dir.join("slurm.conf"));
        c
    }

    /// Task ids of `job` in `state` (squeue's compact codes: R, PD).
    fn tasks(&self, job: &str, state: &str) -> Vec<String> {
        let o = self
            .slurm("squeue", &["-h", "-r", "-j", job, "-t", state, "-o", "%i"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    fn wait_done(&self, job: &str) {
        let deadline = Instant::now() + Duration::from_secs(600);
        // Not "all": that lists finished tasks too, for MinJobAge (5 minutes) after they end.
        while !self.tasks(job, "PD,CF,R,CG,S").is_empty() {
            assert!(Instant::now() < deadline, "job {job} did not finish");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// `sbatch --parsable` with the repository's array script; the job id.
fn sbatch(c: &Cluster, work: &Path, array: &str, args: &[&str]) -> String {
    sbatch_env(c, work, array, args, &[])
}

/// `sbatch` with more environment for the tasks (the script's VIDCURATE_IMAGE, say).
fn sbatch_env(
    c: &Cluster,
    work: &Path,
    array: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/array.sbatch");
    let bin_dir = bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The script asks for 4 CPUs and 8 GiB per task; this node has fewer, and command-line
    // options override #SBATCH lines.
    let mut cmd = c.slurm(
        "sbatch",
        &[
            "--parsable",
            &format!("--array={array}"),
            "--cpus-per-task=1",
            "--mem=500M",
        ],
    );
    cmd.arg(&script)
        .args(args)
        .current_dir(work)
        .env("PATH", path)
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)));
    s3_env(&mut cmd);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn status(url: &str, work: &Path) -> (Option<i32>, String) {
    let mut c = Command::new(bin());
    c.args(["status", url]).current_dir(work);
    let o = s3_env(&mut c).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

#[test]
fn an_array_job_with_a_cancelled_and_resubmitted_task_equals_a_local_run() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let Some(cluster) = start(&d.path().join("slurm")) else {
        return;
    };
    let p = corpus(d.path());
    let reference = d.path().join("ref");
    let o = run_into(&p, &reference, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want = snapshot(&reference);

    let url = bucket("slurm");
    let work = d.path();
    std::fs::create_dir_all(work.join("logs")).unwrap();
    let p_s = p.to_str().unwrap();
    let job = sbatch(&cluster, work, "0-2", &[p_s, &url]);
    // Rank 1 is cancelled while it runs, after its first commit.
    let s = store(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let task = format!("{job}_1");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let running = cluster.tasks(&job, "R").contains(&task);
        let committed = rt
            .block_on(s.list("probe"))
            .unwrap_or_default()
            .iter()
            .any(|p| p.contains("r0001-part-"));
        if running && committed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "task {task} never ran: {}",
            tail(&cluster.dir.join("slurmctld.log"))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = cluster.slurm("scancel", &[&task]).output().unwrap();
    assert!(
        o.status.success(),
        "scancel: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    cluster.wait_done(&job);

    let (code, text) = status(&url, work);
    assert_eq!(code, Some(5), "a cancelled rank is not complete: {text}");
    assert!(text.contains("world 3"), "{text}");
    assert!(text.contains("ranks to run again: 1\n"), "{text}");
    let rank_line = |r: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(r))
            .unwrap_or_else(|| panic!("no line for rank {r}: {text}"))
            .to_string()
    };
    assert!(rank_line("0").contains("complete"), "{text}");
    assert!(!rank_line("1").contains("complete"), "{text}");

    // As the script's comment says: only that index, with the world size; and as a site that
    // runs containers does, in the image scripts/image.sh builds (tests/image.rs), by podman.
    let image = crate::image::podman_image();
    // Without our binary on the task's PATH: the task can only have run in the container.
    let env = image.map(|(name, flags)| {
        vec![
            ("VIDCURATE_IMAGE", name),
            ("VIDCURATE_PODMAN_ARGS", flags),
            ("PATH", std::env::var("PATH").unwrap_or_default()),
        ]
    });
    let again = sbatch_env(
        &cluster,
        work,
        "1",
        &[p_s, &url, "3"],
        &env.unwrap_or_default(),
    );
    cluster.wait_done(&again);
    let (code, text) = status(&url, work);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("every rank is complete"), "{text}");
    // Every object the four tasks committed (the cancelled one's too) is as recorded.
    let mut c = Command::new(bin());
    c.args(["verify", &url]).current_dir(work);
    let o = s3_env(&mut c).output().unwrap();
    let checked = String::from_utf8_lossy(&o.stdout).to_string();
    eprintln!("$ vidcurate verify {url}\n{checked}");
    assert_eq!(o.status.code(), Some(0), "{checked}");
    assert!(
        checked.contains(&format!("verify {url}: "))
            && checked.contains("every object is as committed"),
        "{checked}"
    );
    let local = d.path().join("copy");
    download(&url, &local);
    assert_eq!(snapshot(&local), want, "tables as a local run's");
    let logs: Vec<_> = std::fs::read_dir(work.join("logs")).unwrap().collect();
    assert_eq!(logs.len(), 4, "one log per task run (3 + the resubmission)");
}
