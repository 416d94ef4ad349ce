//! The MPI backend's timeout, as NCCL's async error handling keeps one: an MPI call
//! cannot be interrupted, so a thread watches the calls in flight, and one that has
//! waited longer than the job's timeout (a peer frozen by SIGSTOP, a lost node) is
//! reported on this rank, naming the call, its size and the timeout, and then the
//! whole job ends with `MPI_Abort`: the only way out of a hung MPI call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use mpi::ffi;

/// The exit code `MPI_Abort` asks for: 124, as `timeout(1)` uses.
pub(super) const TIMEOUT_EXIT: i32 = 124;

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(200);

struct Watch {
    what: &'static str,
    bytes: usize,
    rank: usize,
    started: Instant,
    timeout: Duration,
}

static WATCHES: Mutex<Option<HashMap<u64, Watch>>> = Mutex::new(None);
static NEXT: AtomicU64 = AtomicU64::new(0);
static THREAD: OnceLock<()> = OnceLock::new();

fn watches() -> MutexGuard<'static, Option<HashMap<u64, Watch>>> {
    // Entries are inserted and removed whole: a poisoned lock holds no torn state.
    WATCHES.lock().unwrap_or_else(|e| e.into_inner())
}

/// An MPI call in flight; dropping it ends the watch.
pub(super) struct Watched(u64);

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(w) = watches().as_mut() {
            w.remove(&self.0);
        }
    }
}

/// Watches one call of `what` moving `bytes` on `rank` for at most `timeout`.
pub(super) fn watch(what: &'static str, bytes: usize, rank: usize, timeout: Duration) -> Watched {
    THREAD.get_or_init(|| {
        // Without the thread the call is only unwatched, as before: not a reason
        // to fail the call.
        let _ = std::thread::Builder::new()
            .name("ringside-mpi-watchdog".into())
            .spawn(run);
    });
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let watch = Watch {
        what,
        bytes,
        rank,
        started: Instant::now(),
        timeout,
    };
    watches().get_or_insert_with(HashMap::new).insert(id, watch);
    Watched(id)
}

/// The error line for a call that overran its timeout.
fn overrun_message(w: &Watch, waited: Duration) -> String {
    format!(
        "rank {}: {} of {} has waited {:.1} s, past the timeout of {:.1} s (--timeout / \
         RINGSIDE_TIMEOUT): a peer is frozen, dead or unreachable. An MPI call cannot be \
         interrupted, so the job is aborted (MPI_Abort, exit code {TIMEOUT_EXIT}).",
        w.rank,
        w.what,
        measure::size::fmt_bytes(w.bytes as f64),
        waited.as_secs_f64(),
        w.timeout.as_secs_f64()
    )
}

fn run() {
    loop {
        std::thread::sleep(TICK);
        let overrun = watches().as_ref().and_then(|w| {
            w.values()
                .find(|w| w.started.elapsed() > w.timeout)
                .map(|w| overrun_message(w, w.started.elapsed()))
        });
        if let Some(msg) = overrun {
            eprintln!("{msg}");
            // SAFETY: MPI is initialised (a watch exists only around an MPI call);
            // MPI_Abort ends every rank of the job and does not return.
            unsafe {
                ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, TIMEOUT_EXIT);
            }
            std::process::exit(TIMEOUT_EXIT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overrun_message_names_call_size_and_timeout() {
        let w = Watch {
            what: "MPI_Allreduce",
            bytes: 64 << 20,
            rank: 1,
            started: Instant::now(),
            timeout: Duration::from_secs(10),
        };
        let m = overrun_message(&w, Duration::from_secs(11));
        for part in [
            "rank 1",
            "MPI_Allreduce",
            "64 MiB",
            "11.0 s",
            "10.0 s",
            "MPI_Abort",
        ] {
            assert!(m.contains(part), "{part} missing: {m}");
        }
    }

    #[test]
    fn a_finished_call_is_no_longer_watched() {
        let w = watch("MPI_Barrier", 0, 0, Duration::from_secs(3600));
        assert!(watches().as_ref().is_some_and(|m| !m.is_empty()));
        let id = w.0;
        drop(w);
        assert!(!watches().as_ref().unwrap().contains_key(&id));
    }
}
