//! The MPI backend's timeout, as NCCL's async error handling keeps one: an MPI call
//! cannot be interrupted, so a thread watches the calls in flight, and one that has
//! waited longer than the job's timeout (a peer frozen by SIGSTOP, a lost node) is
//! reported on this rank, naming the call, its size and the timeout, and then the
//! whole job ends with `MPI_Abort`: the only way out of a hung MPI call.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use mpi::ffi;

/// The exit code `MPI_Abort` asks for: 124, as `timeout(1)` uses.
pub(super) const TIMEOUT_EXIT: i32 = 124;

/// How often the watchdog looks, and the resolution of its clock: a call is
/// aborted between `timeout` and `timeout + TICK` after it started.
const TICK: Duration = Duration::from_millis(200);

/// Watch slots: one per thread that calls MPI (claimed on its first call,
/// given back when it ends). Calls are numbered per communicator under its
/// runtime lock, so a handful are in flight at once; a thread that finds no
/// free slot claims one for its call only.
const SLOTS: usize = 64;

/// One watched call. The fast path is four relaxed stores and one release
/// store to start, one relaxed store to end: no lock, no allocation, no clock
/// read, no syscall (what a mutex-guarded map and `Instant::now` per call
/// cost was +0.4 µs per MPI call, against +0.1 µs for the whole binding before).
/// What is left is below what can be seen: on 2026-11-28 (2-core Xeon VM) a
/// rank timing ringside's 8-byte all_reduce against a raw `MPI_Allreduce` on
/// the same communicator, call by call (scratch builds, 20,000 calls each,
/// rank-local medians), found the whole binding 0.04–0.07 µs slower, and the
/// same within the runs' spread without these stores or with the watch inlined
/// and its first-call work moved out of line. `peers --impl
/// mpi,ringside-mpi,mpi-bare` measures the same way (`bare.rs`): +0.01 to
/// +0.09 µs at 8–256 B in five runs (`benches/measurement-log.md`, "The MPI
/// binding's overhead"), +0.06 to +0.09 in five on the EPYC VM (2026-11-29).
/// The thread is started with the first communicator, and a thread's first
/// call and every error are out of line, so the call itself only stores: one
/// rank alone (`mpirun -np 1 ringside sweep --backend mpi --beside-bare -b 8
/// -e 8 -n 2000000`, EPYC VM, 2026-11-29, 5 launches each in turn) took
/// 0.052–0.064 µs a call against 0.060–0.075 before, by mean, lower in 5 of
/// 5 pairs; the bare call beside it gained as much (its barrier arms a watch).
struct Slot {
    /// Whether a thread owns this slot.
    owned: AtomicBool,
    /// 0 while idle; else 1 + the watchdog's tick count when the call started.
    started: AtomicU64,
    /// The call's name (a pointer to a `&'static str`: one word, read whole).
    what: AtomicPtr<&'static str>,
    bytes: AtomicUsize,
    rank: AtomicUsize,
    /// The timeout in ticks (rounded up).
    timeout_ticks: AtomicU64,
}

static SLOT_TABLE: [Slot; SLOTS] = [const {
    Slot {
        owned: AtomicBool::new(false),
        started: AtomicU64::new(0),
        what: AtomicPtr::new(std::ptr::null_mut()),
        bytes: AtomicUsize::new(0),
        rank: AtomicUsize::new(0),
        timeout_ticks: AtomicU64::new(0),
    }
}; SLOTS];
/// The watchdog's clock: ticks since it started (the calls read it instead of
/// the system clock).
static TICKS: AtomicU64 = AtomicU64::new(0);
static THREAD: OnceLock<()> = OnceLock::new();

/// This thread's slot, given back when the thread ends.
struct Owned(usize);

impl Drop for Owned {
    fn drop(&mut self) {
        SLOT_TABLE[self.0].owned.store(false, Ordering::Release);
    }
}

thread_local! {
    static MINE: Cell<Option<usize>> = const { Cell::new(None) };
    static KEEP: std::cell::RefCell<Option<Owned>> = const { std::cell::RefCell::new(None) };
}

/// Claims a free slot, if any.
fn claim() -> Option<usize> {
    (0..SLOTS).find(|&i| {
        SLOT_TABLE[i]
            .owned
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })
}

/// This thread's own slot, claimed on its first call: the only work a call
/// does beyond its stores, so it is kept out of line.
#[cold]
#[inline(never)]
fn first_slot() -> Option<(usize, bool)> {
    let Some(i) = claim() else {
        // Every slot is owned by a thread: wait for one to come free for this
        // call (more than 64 threads in MPI calls at once; not seen in practice).
        return (0..1000).find_map(|_| {
            std::thread::yield_now();
            claim().map(|i| (i, true))
        });
    };
    let kept = KEEP.try_with(|k| *k.borrow_mut() = Some(Owned(i))).is_ok();
    if kept {
        MINE.with(|m| m.set(Some(i)));
        Some((i, false))
    } else {
        // The thread is ending: use the slot for this call only.
        Some((i, true))
    }
}

/// An MPI call in flight; dropping it ends the watch.
pub(super) struct Watched {
    slot: Option<(usize, bool)>,
}

impl Drop for Watched {
    #[inline]
    fn drop(&mut self) {
        if let Some((i, temporary)) = self.slot {
            SLOT_TABLE[i % SLOTS].started.store(0, Ordering::Relaxed);
            if temporary {
                SLOT_TABLE[i].owned.store(false, Ordering::Release);
            }
        }
    }
}

/// Starts the watchdog thread, once per process. Called when a communicator
/// is made, so that the calls themselves only store.
pub(super) fn start() {
    THREAD.get_or_init(|| {
        // Without the thread the calls are only unwatched, as before: not a
        // reason to fail.
        let _ = std::thread::Builder::new()
            .name("ringside-mpi-watchdog".into())
            .spawn(run);
    });
}

/// Watches one call of `what` moving `bytes` on `rank` for at most
/// `timeout_ticks` ([`ticks_of`] the timeout, worked out once per
/// communicator).
#[inline]
pub(super) fn watch(
    what: &'static &'static str,
    bytes: usize,
    rank: usize,
    timeout_ticks: u64,
) -> Watched {
    let slot = match MINE.with(Cell::get) {
        Some(i) => Some((i, false)),
        None => first_slot(),
    };
    if let Some((i, _)) = slot {
        // `i` is always below SLOTS; the mask spares the call a bounds check.
        let s = &SLOT_TABLE[i % SLOTS];
        s.what
            .store(what as *const &'static str as *mut _, Ordering::Relaxed);
        s.bytes.store(bytes, Ordering::Relaxed);
        s.rank.store(rank, Ordering::Relaxed);
        s.timeout_ticks.store(timeout_ticks, Ordering::Relaxed);
        // Release: the watchdog that sees `started` sees the fields above.
        s.started
            .store(1 + TICKS.load(Ordering::Relaxed), Ordering::Release);
    }
    Watched { slot }
}

/// `d` in watchdog ticks, rounded up.
pub(super) fn ticks_of(d: Duration) -> u64 {
    // In u64 (saturating past 584 years): u128 division is a library call, on
    // every MPI call's path.
    let tick = TICK.as_nanos() as u64;
    let nanos = d
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()));
    nanos.div_ceil(tick)
}

/// The error line for a call that overran its timeout.
fn overrun_message(
    what: &str,
    bytes: usize,
    rank: usize,
    waited: Duration,
    timeout: Duration,
) -> String {
    format!(
        "rank {rank}: {what} of {} has waited {:.1} s, past the timeout of {:.1} s (--timeout / \
         RINGSIDE_TIMEOUT): a peer is frozen, dead or unreachable. An MPI call cannot be \
         interrupted, so the job is aborted (MPI_Abort, exit code {TIMEOUT_EXIT}).",
        measure::size::fmt_bytes(bytes as f64),
        waited.as_secs_f64(),
        timeout.as_secs_f64()
    )
}

/// The message for slot `s` if its call has overrun at tick `now`.
fn overrun(s: &Slot, now: u64) -> Option<String> {
    let started = s.started.load(Ordering::Acquire);
    if started == 0 {
        return None;
    }
    let waited = now.saturating_sub(started - 1);
    let limit = s.timeout_ticks.load(Ordering::Relaxed);
    if waited <= limit {
        return None;
    }
    let what = s.what.load(Ordering::Relaxed);
    // SAFETY: `what` was stored from a `&'static &'static str` before the
    // release store of `started` that we acquired; it is never freed.
    let what: &str = if what.is_null() {
        "an MPI call"
    } else {
        unsafe { *what }
    };
    let msg = overrun_message(
        what,
        s.bytes.load(Ordering::Relaxed),
        s.rank.load(Ordering::Relaxed),
        TICK * u32::try_from(waited).unwrap_or(u32::MAX),
        TICK * u32::try_from(limit).unwrap_or(u32::MAX),
    );
    // The same call still in flight (not one that ended and another that began
    // while we read): only then is this the overrun we describe.
    (s.started.load(Ordering::Acquire) == started).then_some(msg)
}

fn run() {
    loop {
        std::thread::sleep(TICK);
        let now = TICKS.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(msg) = SLOT_TABLE.iter().find_map(|s| overrun(s, now)) {
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
    fn timeouts_round_up_to_whole_ticks_and_saturate() {
        assert_eq!(ticks_of(Duration::ZERO), 0);
        assert_eq!(ticks_of(Duration::from_nanos(1)), 1);
        assert_eq!(ticks_of(TICK), 1);
        assert_eq!(ticks_of(Duration::from_secs(3)), 15);
        assert_eq!(ticks_of(Duration::from_millis(3001)), 16);
        assert_eq!(ticks_of(Duration::MAX), u64::MAX.div_ceil(200_000_000));
    }

    #[test]
    fn the_overrun_message_names_call_size_and_timeout() {
        let m = overrun_message(
            "MPI_Allreduce",
            64 << 20,
            1,
            Duration::from_secs(11),
            Duration::from_secs(10),
        );
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

    /// The slot a call used is idle again after it, and a call past its
    /// timeout is reported with its own name and size.
    #[test]
    fn a_finished_call_is_no_longer_watched_and_an_overrun_is_named() {
        let w = watch(&"MPI_Barrier", 0, 0, ticks_of(Duration::from_secs(3600)));
        let (i, _) = w.slot.expect("a slot");
        assert_ne!(SLOT_TABLE[i].started.load(Ordering::Relaxed), 0);
        drop(w);
        assert_eq!(SLOT_TABLE[i].started.load(Ordering::Relaxed), 0);

        let w = watch(
            &"MPI_Allreduce",
            4096,
            3,
            ticks_of(Duration::from_millis(400)),
        );
        let (i, _) = w.slot.expect("a slot");
        let start = SLOT_TABLE[i].started.load(Ordering::Relaxed) - 1;
        assert!(
            overrun(&SLOT_TABLE[i], start + 2).is_none(),
            "2 ticks = 400 ms"
        );
        let msg = overrun(&SLOT_TABLE[i], start + 3).expect("3 ticks are past 400 ms");
        assert!(msg.contains("rank 3: MPI_Allreduce of 4 KiB"), "{msg}");
        drop(w);
        assert!(overrun(&SLOT_TABLE[i], start + 100).is_none());
    }

    /// A thread keeps one slot for all its calls and gives it back when it
    /// ends, so threads that come and go never run out of slots.
    #[test]
    fn threads_give_their_slot_back() {
        for _ in 0..(2 * SLOTS) {
            std::thread::spawn(|| {
                let a = watch(&"MPI_Send", 8, 0, ticks_of(Duration::from_secs(3600)));
                let b = watch(&"MPI_Recv", 8, 0, ticks_of(Duration::from_secs(3600)));
                assert_eq!(a.slot.map(|s| s.0), b.slot.map(|s| s.0));
            })
            .join()
            .unwrap();
        }
    }
}
