//! Gloo calls on buffers of [`FROM_BYTES`] (1 MiB) and more run on one thread
//! of their own per communicator while the caller waits, as PyTorch's
//! `ProcessGroupGloo` runs each collective on its worker threads (`runLoop`)
//! and the caller waits on the work's future.
//!
//! Why: under load, where the ranks compete for the CPU with other programs,
//! this decides how much CPU a rank gets. Measured on the 2-core Xeon VM on
//! 2026-11-27: a 2-rank job with two busy loops (nice 0, each in a session of
//! its own) beside it, every thread's `/proc/<tid>/schedstat` over 8 s of
//! back-to-back 4 MiB all_reduce calls, and where the loops ran in 300 samples:
//!
//! | | ranks' CPU (2 ranks) | busy loops' CPU | both loops on one core |
//! |---|---|---|---|
//! | Gloo called on the rank's thread (before) | 68 % | 131 % | 0 of 300 samples |
//! | on this worker | 110 % | 93 % | 72 of 300 |
//! | torch.distributed's gloo | 116 % | 89 % | 176 of 300 |
//!
//! The CPU a call needs is about the same either way (~2.2 ms per rank at
//! 4 MiB); what differs is the share. With the call handed to a worker and the
//! caller asleep on a condition variable, the kernel's load balancer at times
//! packs the two busy loops onto one core, as it does beside PyTorch's ranks;
//! with Gloo called on the rank's thread it never did, and each rank got a third
//! of a core. In `bench --backend gloo --peer torch --load 2` (6 alternating
//! runs of each build) 4 MiB went from 1.76× torch's
//! time (median of the per-run ratios; 1.61–2.28) to 0.89× (0.58–1.70), 16 MiB
//! from 1.44× to 1.24×, 64 MiB from 1.01× to 0.90×.
//!
//! Only calls on 1 MiB and more ([`FROM_BYTES`]) take this path: the hand-over
//! costs two more thread wake-ups, and under load a wake-up may wait for a
//! busy program's time slice, which small calls, whose whole time is a few
//! wake-ups, felt (16 B–4 KiB under load 1.1–1.8× torch's with every call on
//! the worker, in 2 runs of 2). At 1 MiB the two ways measured the same.
//! Checked again on 2026-11-28 on the 2-core EPYC VM with a scratch build
//! that read the threshold from the environment (`bench --backend gloo --peer
//! torch --repeat 3 -b 256K -e 16M -f 4 --load 2`, 3 runs each, in turn):
//! worst ratio to torch's 0.92, 0.83 and 0.74 from 1 MiB (this), 0.85, 1.26
//! and 1.07 with no call on the worker, 1.74, 1.49 and 1.47 from 16 MiB (4 MiB
//! on the caller: 1.47–1.74× torch's).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// Calls on buffers from this size up run on the worker; smaller ones on the
/// caller's thread (see the module docs for why).
pub(super) const FROM_BYTES: usize = 1 << 20;

/// A job with its lifetime erased: see [`Worker::call`] for why it cannot
/// outlive what it borrows.
type Job = Box<dyn FnOnce() + Send + 'static>;

enum Slot {
    /// Nothing to do; a caller may post.
    Idle,
    /// Posted, not yet taken by the worker.
    Posted(Job),
    /// Taken and running.
    Running,
    /// Finished; `false` if the job panicked.
    Done(bool),
    /// The communicator is gone: the worker exits.
    Exit,
}

struct Shared {
    slot: Mutex<Slot>,
    changed: Condvar,
}

/// One thread that runs jobs handed to it, one at a time.
pub(super) struct Worker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread (with the calling thread's nice value and CPU set).
    pub(super) fn start() -> Result<Worker> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::Idle),
            changed: Condvar::new(),
        });
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gloo-worker".into())
            .spawn(move || serve(&theirs))
            .map_err(|e| Error::Protocol(format!("starting Gloo's worker thread: {e}")))?;
        Ok(Worker {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `f` on the worker and returns its result, blocking until it has
    /// finished. A panic in `f` comes back as an error.
    pub(super) fn call<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        let mut out: Option<R> = None;
        let out_ref = &mut out;
        let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || *out_ref = Some(f()));
        // SAFETY: the job borrows `f`'s captures and `out` from this frame.
        // This function does not return (and so the frame does not end) before
        // the worker has reported the job finished (`Slot::Done`, set after the
        // job returned or unwound), and nothing else touches the job: the
        // borrows end while the frame is alive, exactly as with a scoped thread.
        // The lock below is never poisoned by the job: it runs with the lock
        // released, inside catch_unwind.
        let job: Job = unsafe { std::mem::transmute(job) };
        let mut slot = self.lock();
        // Calls are serialised by the communicator's own lock; wait anyway
        // rather than overwrite a job in flight.
        while !matches!(*slot, Slot::Idle) {
            slot = self.wait(slot);
        }
        *slot = Slot::Posted(job);
        self.shared.changed.notify_all();
        let ok = loop {
            if let Slot::Done(ok) = *slot {
                break ok;
            }
            slot = self.wait(slot);
        };
        *slot = Slot::Idle;
        self.shared.changed.notify_all();
        drop(slot);
        match (ok, out) {
            (true, Some(r)) => Ok(r),
            _ => Err(Error::Protocol(
                "a Gloo call panicked on Gloo's worker thread".into(),
            )),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // Only this module takes the lock, and no code that can panic runs
        // while it is held, so a poisoned lock still holds a consistent slot.
        self.shared.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: std::sync::MutexGuard<'a, Slot>) -> std::sync::MutexGuard<'a, Slot> {
        self.shared
            .changed
            .wait(g)
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        {
            let mut slot = self.lock();
            // `call` returns only once its job is done, so nothing is in flight.
            *slot = Slot::Exit;
            self.shared.changed.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(shared: &Shared) {
    let lock = || shared.slot.lock().unwrap_or_else(|p| p.into_inner());
    let mut slot = lock();
    loop {
        match std::mem::replace(&mut *slot, Slot::Running) {
            Slot::Posted(job) => {
                drop(slot);
                let ok = catch_unwind(AssertUnwindSafe(job)).is_ok();
                slot = lock();
                *slot = Slot::Done(ok);
                shared.changed.notify_all();
            }
            Slot::Exit => return,
            other => {
                *slot = other;
                slot = shared.changed.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_runs_on_the_worker_thread_borrowing_the_callers_data() {
        let w = Worker::start().unwrap();
        let mut v = vec![1, 2, 3];
        let caller = std::thread::current().id();
        let (sum, on) = w
            .call(|| {
                v.push(4);
                (v.iter().sum::<i32>(), std::thread::current().id())
            })
            .unwrap();
        assert_eq!(sum, 10);
        assert_eq!(v, [1, 2, 3, 4]);
        assert_ne!(on, caller, "the job ran on the caller's thread");
        let name = w
            .call(|| std::thread::current().name().map(String::from))
            .unwrap();
        assert_eq!(name.as_deref(), Some("gloo-worker"));
    }

    #[test]
    fn a_panicking_call_is_an_error_and_the_worker_goes_on() {
        let w = Worker::start().unwrap();
        let r = w.call(|| -> u8 { panic!("boom") });
        assert!(
            matches!(r, Err(Error::Protocol(ref m)) if m.contains("panicked")),
            "{r:?}"
        );
        assert_eq!(w.call(|| 7).unwrap(), 7);
    }

    #[test]
    fn calls_from_several_threads_each_get_their_own_result() {
        let w = Worker::start().unwrap();
        std::thread::scope(|s| {
            for i in 0..4u64 {
                let w = &w;
                s.spawn(move || {
                    for k in 0..200 {
                        assert_eq!(w.call(|| i * 1000 + k).unwrap(), i * 1000 + k);
                    }
                });
            }
        });
    }
}
