//! Running a fan-out's branches: the calling thread takes them in order, and workers of the
//! rayon pool help.
//!
//! The calling thread claims branches one by one from a shared counter and runs them. Before it
//! starts, it posts helper jobs to the pool; a helper that gets a worker claims branches the
//! same way. Cheap branches are all done by the calling thread before a worker has even woken
//! (waking one costs tens of microseconds), so they pay nothing for it; long branches are
//! shared out and run in parallel; and branches that wait for each other (a barrier, a channel)
//! still run at the same time, since a helper takes the ones the calling thread cannot get to.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;

/// The jobs, their results, and who has claimed and finished what.
struct Shared<J, T> {
    jobs: Vec<Mutex<Option<J>>>,
    results: Vec<Mutex<Option<thread::Result<T>>>>,
    /// The next job to claim.
    next: AtomicUsize,
    /// How many claimed jobs have finished.
    done: AtomicUsize,
    finished: Mutex<()>,
    all_done: Condvar,
}

impl<J, T> Shared<J, T> {
    /// Claims and runs jobs until none is left to claim.
    fn work(&self, run: &(dyn Fn(J) -> T + Sync)) {
        let count = self.jobs.len();
        loop {
            let index = self.next.fetch_add(1, Ordering::AcqRel);
            if index >= count {
                return;
            }
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

/// Runs every job through `run`, on this thread and up to `helpers` pool workers, and returns
/// the results in the jobs' order. A panic in `run` is raised again here once every job is done.
pub(crate) fn run_shared<J, T>(jobs: Vec<J>, run: &(dyn Fn(J) -> T + Sync), helpers: usize) -> Vec<T>
where
    J: Send + 'static,
    T: Send + 'static,
{
    let count = jobs.len();
    let shared = Arc::new(Shared {
        jobs: jobs.into_iter().map(|job| Mutex::new(Some(job))).collect(),
        results: (0..count).map(|_| Mutex::new(None)).collect(),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        finished: Mutex::new(()),
        all_done: Condvar::new(),
    });
    // SAFETY: a helper calls `run` only after claiming a job index below `count`, and this
    // function does not return, nor unwind, before every claimed job has finished (`done ==
    // count`, below; each job's panic is caught inside `work`). So every call through the
    // extended reference happens while `run` is borrowed here. A helper that starts after this
    // function returned finds no job to claim and touches nothing but its `Arc`.
    let run_anywhere: &'static (dyn Fn(J) -> T + Sync) =
        unsafe { std::mem::transmute::<&(dyn Fn(J) -> T + Sync), &'static (dyn Fn(J) -> T + Sync)>(run) };
    for _ in 0..helpers.min(count.saturating_sub(1)) {
        let shared = Arc::clone(&shared);
        rayon::spawn(move || shared.work(run_anywhere));
    }
    shared.work(run);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn results_come_back_in_order() {
        let out = run_shared((0..100).collect(), &|i: usize| i * 2, 4);
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
            )
        }));
        assert!(caught.is_err());
        assert_eq!(finished.load(Ordering::SeqCst), 7);
    }
}
