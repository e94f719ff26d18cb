//! Running a fan-out's branches: the calling thread takes them in order, workers of the rayon
//! pool help, and when branches block, threads of their own join in.
//!
//! The calling thread claims branches one by one from a shared counter and runs them. Once the
//! fan-out has run for `HELP_AFTER` with branches still unclaimed, it posts helper jobs to the
//! pool; a helper that gets a worker claims branches the same way. Cheap fan-outs are done by
//! the calling thread alone and wake nobody (waking a worker costs microseconds of system time
//! and, on a small machine, the core the run is on: a graph that loops over a small fan-out
//! would spend most of its time waking workers); long branches are shared out and run in
//! parallel; and branches that wait for each other (a barrier, a channel) still run at the same
//! time, since the supervisor (below) starts threads for the ones the calling thread cannot get
//! to.
//!
//! Branches that *block* (a synchronous LLM or HTTP call, a barrier between more branches than
//! the pool has threads) would otherwise wait for a free worker: a fan-out with 100 branches
//! that each wait 20 ms would take 100 × 20 ms / 3. So a fan-out that still has unclaimed
//! branches after `STALL` registers with one process-wide *supervisor* thread, which starts
//! threads of their own for the unclaimed branches, up to the fan-out's limit of branches
//! running at once (`Builder::max_parallel_branches`). Cheap fan-outs finish before `STALL` and
//! never see a thread start; CPU-bound ones get a few extra threads, which changes nothing on
//! the machine's throughput.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

/// How long a fan-out's unclaimed branches wait for a worker before threads of their own start.
const STALL: Duration = Duration::from_millis(1);

/// How long the calling thread runs a fan-out's branches alone before it asks the pool for
/// help: a few wake-ups' worth, so that waking workers costs a cheap fan-out nothing and a long
/// one a few percent.
const HELP_AFTER: Duration = Duration::from_micros(100);

/// Branches that took this long, on average, in the process's recent fan-outs (the
/// calling thread's share of them) make the next fan-out ask the pool for help at once: waking
/// a worker is then cheap next to the work it takes over.
const LONG_JOB: Duration = Duration::from_micros(20);

/// The calling threads' recent time per job, in nanoseconds (a moving average over fan-outs,
/// process-wide; updated without ordering, as a hint).
static RECENT_JOB_NANOS: AtomicU64 = AtomicU64::new(0);

/// How long the supervisor keeps ticking after the last fan-out it watched, so that a run that
/// fans out again and again does not wake it each time.
const LINGER: Duration = Duration::from_millis(200);

/// The jobs, their results, and who has claimed and finished what.
struct FanOut<J: 'static, T: 'static> {
    jobs: Vec<Mutex<Option<J>>>,
    results: Vec<Mutex<Option<thread::Result<T>>>>,
    /// The next job to claim.
    next: AtomicUsize,
    /// How many claimed jobs have finished.
    done: AtomicUsize,
    finished: Mutex<()>,
    all_done: Condvar,
    /// Workers inside `work` (the calling thread, pool helpers, started threads).
    active: AtomicUsize,
    /// The most workers that may run jobs at once.
    max: usize,
    started: Instant,
    /// `run`, usable from threads the supervisor starts (see the SAFETY note in `run_shared`).
    run: &'static (dyn Fn(J) -> T + Sync),
}

impl<J: 'static, T: 'static> FanOut<J, T> {
    /// Claims and runs jobs until none is left to claim, as a worker counted in `active` when it
    /// was set to work (so that `max` holds even for workers that have not started yet).
    fn work(&self, run: &(dyn Fn(J) -> T + Sync)) {
        self.claim_and_run(run, &mut || {});
        self.active.fetch_sub(1, Ordering::AcqRel);
    }

    /// Claims and runs jobs until none is left; `between` runs before each claim after the
    /// first (the calling thread posts its pool helpers there).
    /// Returns how many jobs this thread ran.
    fn claim_and_run(&self, run: &(dyn Fn(J) -> T + Sync), between: &mut dyn FnMut()) -> usize {
        let count = self.jobs.len();
        let mut ran = 0;
        loop {
            if ran > 0 {
                between();
            }
            let index = self.next.fetch_add(1, Ordering::AcqRel);
            if index >= count {
                return ran;
            }
            ran += 1;
            let job = self.jobs[index].lock().unwrap_or_else(PoisonError::into_inner).take();
            let result = match job {
                Some(job) => catch_unwind(AssertUnwindSafe(|| run(job))),
                None => continue,
            };
            *self.results[index].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == count {
                let _finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
                self.all_done.notify_all();
            }
        }
    }
}

/// What the supervisor asks of a registered fan-out.
trait Stalled: Send + Sync {
    /// Starts threads for unclaimed jobs if the fan-out has waited `STALL`; false once nothing
    /// is left to claim (the supervisor forgets it).
    fn assist(self: Arc<Self>) -> bool;
}

impl<J: Send + 'static, T: Send + 'static> Stalled for FanOut<J, T> {
    fn assist(self: Arc<Self>) -> bool {
        let count = self.jobs.len();
        let claimed = self.next.load(Ordering::Acquire).min(count);
        if claimed >= count {
            return false;
        }
        if self.started.elapsed() < STALL {
            return true;
        }
        let room = self.max.saturating_sub(self.active.load(Ordering::Acquire));
        for _ in 0..room.min(count - claimed) {
            self.active.fetch_add(1, Ordering::AcqRel);
            let shared = Arc::clone(&self);
            let started = thread::Builder::new().name("tea-branch".into()).spawn(move || shared.work(shared.run));
            if started.is_err() {
                // The system refused a thread: the workers already running get to the jobs.
                self.active.fetch_sub(1, Ordering::AcqRel);
                break;
            }
        }
        true
    }
}

/// The process-wide supervisor: fan-outs with unclaimed jobs, checked every `STALL`.
struct Supervisor {
    watched: Mutex<Watched>,
    wake: Condvar,
}

/// What the supervisor watches, and whether it waits to be woken (`parked`) or ticks.
struct Watched {
    list: Vec<Weak<dyn Stalled>>,
    parked: bool,
}

fn supervisor() -> &'static Supervisor {
    static SUPERVISOR: OnceLock<&'static Supervisor> = OnceLock::new();
    SUPERVISOR.get_or_init(|| {
        let supervisor: &'static Supervisor = Box::leak(Box::new(Supervisor {
            watched: Mutex::new(Watched { list: Vec::new(), parked: false }),
            wake: Condvar::new(),
        }));
        let started = thread::Builder::new().name("tea-supervisor".into()).spawn(move || supervisor.watch());
        if started.is_err() {
            // Without a supervisor, fan-outs run as before: on this thread and the pool.
            supervisor.watched.lock().unwrap_or_else(PoisonError::into_inner).list.clear();
        }
        supervisor
    })
}

impl Supervisor {
    /// Every `STALL` while fan-outs are watched (and for `LINGER` after the last): asks each
    /// to assist, keeps those still claiming. Allocation-free once its two lists have grown
    /// (the list and a scratch list swap), so a process that counts its allocations sees none
    /// from here per fan-out.
    fn watch(&self) {
        let mut scratch: Vec<Weak<dyn Stalled>> = Vec::new();
        let mut last_watched = Instant::now();
        loop {
            {
                let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
                if watched.list.is_empty() && last_watched.elapsed() >= LINGER {
                    watched.parked = true;
                    while watched.list.is_empty() {
                        watched = self.wake.wait(watched).unwrap_or_else(PoisonError::into_inner);
                    }
                    watched.parked = false;
                }
            }
            thread::sleep(STALL);
            std::mem::swap(&mut self.watched.lock().unwrap_or_else(PoisonError::into_inner).list, &mut scratch);
            if !scratch.is_empty() {
                last_watched = Instant::now();
            }
            for weak in scratch.drain(..) {
                let Some(fan_out) = weak.upgrade() else { continue };
                if fan_out.assist() {
                    self.watched.lock().unwrap_or_else(PoisonError::into_inner).list.push(weak);
                }
            }
        }
    }

    /// Watches `fan_out`; wakes the supervisor only if it is parked (a run that fans out often
    /// finds it ticking).
    fn register(&self, fan_out: Weak<dyn Stalled>) {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        watched.list.push(fan_out);
        if watched.parked {
            self.wake.notify_one();
        }
    }
}

/// Runs every job through `run`, on this thread and (once the jobs have run for `HELP_AFTER`)
/// up to `helpers` pool workers (and, for jobs left unclaimed for `STALL`, threads of their own,
/// up to `max` jobs running at once), and returns the results in the jobs' order. A panic in `run` is raised again here once every job
/// is done.
pub(crate) fn run_shared<J, T>(jobs: Vec<J>, run: &(dyn Fn(J) -> T + Sync), helpers: usize, max: usize) -> Vec<T>
where
    J: Send + 'static,
    T: Send + 'static,
{
    let count = jobs.len();
    // SAFETY: a helper calls `run` only after claiming a job index below `count`, and this
    // function does not return, nor unwind, before every claimed job has finished (`done ==
    // count`, below; each job's panic is caught inside `work`). So every call through the
    // extended reference happens while `run` is borrowed here. A helper (pool worker or started
    // thread) that starts after this function returned finds no job to claim and touches
    // nothing but its `Arc`.
    let run_anywhere: &'static (dyn Fn(J) -> T + Sync) =
        unsafe { std::mem::transmute::<&(dyn Fn(J) -> T + Sync), &'static (dyn Fn(J) -> T + Sync)>(run) };
    let max = max.max(1);
    let shared = Arc::new(FanOut {
        jobs: jobs.into_iter().map(|job| Mutex::new(Some(job))).collect(),
        results: (0..count).map(|_| Mutex::new(None)).collect(),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        finished: Mutex::new(()),
        all_done: Condvar::new(),
        // The calling thread; pool helpers count when they are posted.
        active: AtomicUsize::new(1),
        max,
        started: Instant::now(),
        run: run_anywhere,
    });
    let mut helpers = helpers.min(count.saturating_sub(1)).min(max - 1);
    // Even when the pool has a helper for every job, those helpers may never get a worker (the
    // workers are all blocked in branches of other fan-outs): the supervisor watches every
    // fan-out of more than one job.
    if count > 1 && max > 1 {
        let weak: Weak<dyn Stalled> = Arc::downgrade(&shared) as Weak<dyn Stalled>;
        supervisor().register(weak);
    }
    // The calling thread works; once the fan-out has run for `HELP_AFTER` with jobs left to
    // claim — or at once, when recent fan-outs' jobs were long — it posts the pool helpers
    // (counted in `active` so that `max` holds).
    let long_jobs = RECENT_JOB_NANOS.load(Ordering::Relaxed) >= LONG_JOB.as_nanos() as u64;
    let mut post_helpers = || {
        if helpers == 0
            || shared.next.load(Ordering::Acquire) >= count
            || (!long_jobs && shared.started.elapsed() < HELP_AFTER)
        {
            return;
        }
        let room = max.saturating_sub(shared.active.load(Ordering::Acquire));
        for _ in 0..std::mem::take(&mut helpers).min(room) {
            shared.active.fetch_add(1, Ordering::AcqRel);
            let shared = Arc::clone(&shared);
            rayon::spawn(move || shared.work(run_anywhere));
        }
    };
    if long_jobs {
        post_helpers();
    }
    let ran = shared.claim_and_run(run, &mut post_helpers);
    if ran > 0 {
        let per_job = u64::try_from(shared.started.elapsed().as_nanos() / ran as u128).unwrap_or(u64::MAX);
        let recent = RECENT_JOB_NANOS.load(Ordering::Relaxed);
        RECENT_JOB_NANOS.store(recent / 2 + per_job / 2, Ordering::Relaxed);
    }
    shared.active.fetch_sub(1, Ordering::AcqRel);
    let mut finished = shared.finished.lock().unwrap_or_else(PoisonError::into_inner);
    while shared.done.load(Ordering::Acquire) < count {
        finished = shared.all_done.wait(finished).unwrap_or_else(PoisonError::into_inner);
    }
    drop(finished);
    let mut results = Vec::with_capacity(count);
    for slot in &shared.results {
        match slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(Ok(result)) => results.push(result),
            Some(Err(panic)) => resume_unwind(panic),
            None => unreachable!("every job was claimed and finished"),
        }
    }
    results
}

/// Runs `job` — a fan-out journal's writer (`Journal::flush`) — on a pool of its own: a few
/// threads that only write, so that a journal's writes never wait behind long branches on the
/// rayon pool. Without that pool (a thread could not be started), on the calling thread.
pub(crate) fn write_behind(job: impl FnOnce() + Send + 'static) {
    static WRITERS: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let writers = WRITERS.get_or_init(|| {
        let threads = thread::available_parallelism().map_or(2, |n| n.get().max(2));
        rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("tea-journal-{i}")).build().ok()
    });
    match writers {
        Some(pool) => pool.spawn(job),
        None => job(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn results_come_back_in_order() {
        let out = run_shared((0..100).collect(), &|i: usize| i * 2, 4, 64);
        assert_eq!(out, (0..100).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn jobs_that_wait_for_each_other_run_at_the_same_time() {
        let barrier = Barrier::new(2);
        let out = run_shared(
            vec![1, 2],
            &|i: u32| {
                barrier.wait();
                i
            },
            1,
            64,
        );
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn a_panic_is_raised_after_every_job_finished() {
        let finished = AtomicUsize::new(0);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            run_shared(
                (0..8).collect(),
                &|i: u32| {
                    if i == 3 {
                        panic!("job 3");
                    }
                    finished.fetch_add(1, Ordering::SeqCst);
                },
                2,
                64,
            )
        }));
        assert!(caught.is_err());
        assert_eq!(finished.load(Ordering::SeqCst), 7);
    }

    #[test]
    fn blocking_jobs_all_run_at_once_up_to_the_limit() {
        // Twelve jobs that each wait for all twelve: only possible if all run at the same time,
        // whatever the pool's size (no helpers from the pool here at all).
        let barrier = Barrier::new(12);
        let out = run_shared(
            (0..12).collect(),
            &|i: u32| {
                barrier.wait();
                i
            },
            0,
            12,
        );
        assert_eq!(out, (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn the_limit_caps_the_jobs_running_at_once() {
        let running = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        run_shared(
            (0..20).collect(),
            &|_: u32| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(10));
                running.fetch_sub(1, Ordering::SeqCst);
            },
            1,
            4,
        );
        let peak = peak.load(Ordering::SeqCst);
        assert!((2..=4).contains(&peak), "at most 4 at once, and more than one: {peak}");
    }
}
