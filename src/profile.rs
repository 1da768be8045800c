//! `run --profile`: where a run's wall and CPU time go, per stage and per step (decode, resize,
//! detection, recognition, colour, Parquet, digests, ...), measured on the machine it runs on.
//!
//! A step is a span opened on the thread doing the work: its wall time and that thread's CPU
//! time (`CLOCK_THREAD_CPUTIME_ID`) are added up per (stage, step), exclusive of the spans
//! opened inside it, so the steps of one thread add up to its busy time without counting a
//! nanosecond twice. The stage is that of the CPU-pool job the span runs in (`CpuPool::run`
//! opens one per job); spans outside a job (the async runtime's threads) count under
//! `ASYNC`. The pool's threads also count their idle time, so the report can show that steps
//! and idle add up to the threads' lifetimes: what is not in a step is visible, not lost.
//!
//! Off (the default), a span is one relaxed atomic load: the hot paths keep their speed.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);
static STATE: Mutex<Option<State>> = Mutex::new(None);

/// The stage name of spans outside any CPU-pool job.
pub const ASYNC: &str = "(async)";
/// The step name of a job's time outside its named steps.
pub const OTHER: &str = "(other)";

struct State {
    started: Instant,
    steps: BTreeMap<(String, String), Acc>,
    /// Pool threads: (started, idle so far, idle since, ended).
    pool: Vec<PoolThread>,
}

#[derive(Clone, Copy)]
struct PoolThread {
    started: Instant,
    idle: Duration,
    idle_since: Option<Instant>,
    ended: Option<Instant>,
}

/// Time of one (stage, step).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Acc {
    pub calls: u64,
    pub wall: Duration,
    pub cpu: Duration,
}

struct Open {
    name: Cow<'static, str>,
    /// A CPU-pool job: the steps opened inside count under its name as their stage.
    job: bool,
    wall0: Instant,
    cpu0: Duration,
    child_wall: Duration,
    child_cpu: Duration,
}

thread_local! {
    static STACK: RefCell<Vec<Open>> = const { RefCell::new(Vec::new()) };
}

/// Starts counting (from now, forgetting what an earlier run of this process counted).
pub fn enable() {
    *lock() = Some(State {
        started: Instant::now(),
        steps: BTreeMap::new(),
        pool: vec![],
    });
    ON.store(true, Ordering::Relaxed);
}

fn lock() -> std::sync::MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; the clock id is a constant.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if ok {
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    } else {
        Duration::ZERO
    }
}

/// CPU time (user + system) of the whole process so far.
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// An open step; counted when dropped.
#[must_use]
pub struct Span(bool);

/// Opens step `name` on this thread (nothing when profiling is off).
pub fn span(name: &'static str) -> Span {
    open(false, || Cow::Borrowed(name))
}

/// Opens the span of a CPU-pool job of `stage`: the steps inside count under that stage.
pub fn job(stage: &str) -> Span {
    open(true, || Cow::Owned(stage.to_string()))
}

fn open(job: bool, name: impl FnOnce() -> Cow<'static, str>) -> Span {
    if !on() {
        return Span(false);
    }
    let o = Open {
        name: name(),
        job,
        wall0: Instant::now(),
        cpu0: thread_cpu(),
        child_wall: Duration::ZERO,
        child_cpu: Duration::ZERO,
    };
    STACK.with(|s| s.borrow_mut().push(o));
    Span(true)
}

impl Drop for Span {
    fn drop(&mut self) {
        if !self.0 {
            return;
        }
        let (wall, cpu) = (Instant::now(), thread_cpu());
        let counted = STACK.with(|s| {
            let mut s = s.borrow_mut();
            let o = s.pop()?;
            let (w, c) = (wall - o.wall0, cpu.saturating_sub(o.cpu0));
            if let Some(parent) = s.last_mut() {
                parent.child_wall += w;
                parent.child_cpu += c;
            }
            let key = match (s.first(), o.job) {
                (_, true) => (o.name.to_string(), OTHER.to_string()),
                (Some(root), false) if root.job => (root.name.to_string(), o.name.to_string()),
                _ => (ASYNC.to_string(), o.name.to_string()),
            };
            Some((
                key,
                w.saturating_sub(o.child_wall),
                c.saturating_sub(o.child_cpu),
            ))
        });
        if let Some((key, w, c)) = counted
            && let Some(st) = lock().as_mut()
        {
            let a = st.steps.entry(key).or_default();
            a.calls += 1;
            a.wall += w;
            a.cpu += c;
        }
    }
}

/// A CPU-pool thread's place in the profile (None when profiling is off).
pub fn pool_thread_started() -> Option<usize> {
    let mut g = lock();
    let st = g.as_mut().filter(|_| on())?;
    let now = Instant::now();
    st.pool.push(PoolThread {
        started: now,
        idle: Duration::ZERO,
        idle_since: Some(now),
        ended: None,
    });
    Some(st.pool.len() - 1)
}

/// A pool thread starts (`idle`) or ends (`!idle`) waiting for a job.
pub fn pool_thread_idle(thread: Option<usize>, idle: bool) {
    let Some(i) = thread else { return };
    if let Some(t) = lock().as_mut().and_then(|st| st.pool.get_mut(i)) {
        let now = Instant::now();
        match (idle, t.idle_since.take()) {
            (true, None) => t.idle_since = Some(now),
            (false, Some(since)) => t.idle += now - since,
            (_, since) => t.idle_since = since,
        }
    }
}

/// A pool thread ends (its pool was dropped).
pub fn pool_thread_ended(thread: Option<usize>) {
    pool_thread_idle(thread, false);
    let Some(i) = thread else { return };
    if let Some(t) = lock().as_mut().and_then(|st| st.pool.get_mut(i)) {
        t.ended = Some(Instant::now());
    }
}

/// What was counted since `enable`.
#[derive(Debug, Clone)]
pub struct Profile {
    pub wall: Duration,
    pub process_cpu: Duration,
    /// (stage, step) → time, exclusive of the steps inside.
    pub steps: BTreeMap<(String, String), Acc>,
    /// CPU-pool threads started.
    pub pool_threads: usize,
    /// The pool threads' lifetimes added up, and their idle time in it.
    pub pool_lifetime: Duration,
    pub pool_idle: Duration,
}

/// The profile so far, when profiling is on.
pub fn snapshot() -> Option<Profile> {
    let g = lock();
    let st = g.as_ref().filter(|_| on())?;
    let now = Instant::now();
    let (mut lifetime, mut idle) = (Duration::ZERO, Duration::ZERO);
    for t in &st.pool {
        lifetime += t.ended.unwrap_or(now) - t.started;
        idle += t.idle + t.idle_since.map_or(Duration::ZERO, |s| now - s);
    }
    Some(Profile {
        wall: now - st.started,
        process_cpu: process_cpu(),
        steps: st.steps.clone(),
        pool_threads: st.pool.len(),
        pool_lifetime: lifetime,
        pool_idle: idle,
    })
}

impl Profile {
    /// The steps' wall time within CPU-pool jobs (the pool's busy time).
    pub fn pool_busy(&self) -> Duration {
        (self.steps.iter())
            .filter(|((stage, _), _)| stage != ASYNC)
            .map(|(_, a)| a.wall)
            .sum()
    }

    /// CPU time counted in any step.
    pub fn steps_cpu(&self) -> Duration {
        self.steps.values().map(|a| a.cpu).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn nested_steps_count_once_under_their_job() {
        enable();
        let t = pool_thread_started();
        {
            pool_thread_idle(t, false);
            let _j = job("profile-test");
            spin(Duration::from_millis(20));
            {
                let _d = span("det");
                spin(Duration::from_millis(40));
                let _r = span("resize");
                spin(Duration::from_millis(10));
            }
        }
        pool_thread_idle(t, true);
        {
            let _p = span("profile-test-parquet");
            spin(Duration::from_millis(5));
        }
        pool_thread_ended(t);
        let p = snapshot().unwrap();
        let get = |a: &str, b: &str| p.steps[&(a.to_string(), b.to_string())];
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let stage = "profile-test";
        let (other, det, resize) = (get(stage, OTHER), get(stage, "det"), get(stage, "resize"));
        assert!((20.0..30.0).contains(&ms(other.wall)), "{other:?}");
        assert!((40.0..50.0).contains(&ms(det.wall)), "{det:?}");
        assert!((10.0..20.0).contains(&ms(resize.wall)), "{resize:?}");
        assert!(ms(det.cpu) > 35.0, "a busy loop is CPU: {det:?}");
        assert_eq!(get(ASYNC, "profile-test-parquet").calls, 1);
        // The thread's life: the job and its idle time after it, nothing counted twice.
        let busy = ms(other.wall + det.wall + resize.wall);
        let (life, idle) = thread_times(t.unwrap());
        let accounted = busy + ms(idle);
        assert!(
            (accounted - ms(life)).abs() < 2.0,
            "{accounted} of {life:?}"
        );
        ON.store(false, Ordering::Relaxed);
        assert!(snapshot().is_none());
    }

    /// (lifetime, idle) of one pool thread that ended.
    fn thread_times(i: usize) -> (Duration, Duration) {
        let g = lock();
        let t = g.as_ref().unwrap().pool[i];
        (t.ended.unwrap() - t.started, t.idle)
    }
}
