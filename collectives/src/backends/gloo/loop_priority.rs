//! Gloo's TCP event-loop threads run a little nicer than the rank's own
//! threads.
//!
//! Why: the event loop of Debian's Gloo (a 2022 snapshot) busy-polls — in
//! `perf` about a fifth of a Gloo all_reduce's samples are in `epoll_wait`
//! and socket polling (pytorch/gloo#246, "Don't busy-spin in tcp
//! transport's event loop"). Where the cores are fewer than ranks × 2
//! threads (2 ranks on 2 cores: each rank's caller plus its loop), a
//! spinning loop holds the core that a rank needs to post its next receive
//! or reduce a segment until the scheduler's tick, and a call's median
//! becomes 3.4–4.2 ms instead of 0.3 at a random size of a sweep. On the
//! 2-core development VM, alternating `ringside bench --backend gloo -b 4
//! -e 1M -f 4 -n 20` runs: 18 of 380 medians stalled with the loops at the
//! rank's priority, 4 of 300 with them 5 nicer (0 of 80 at 19). Nicer, not
//! idle: under load from other programs a loop at nice 19 would get ~1.5 %
//! of a core and slow every message; at 5 it keeps a third of a busy core's
//! share.
//!
//! Under load from other programs (busy loops started from the same terminal,
//! a build) the 4 ms stalls had another cause, fixed elsewhere: ranks shared the
//! launcher's session and so its autogroup; each rank now leads a session of
//! its own (`launch/group.rs`). With that, loops at 5 and at 0 measured the same
//! under two busy loops (85–126 µs at 16 B–64 KiB, three runs each), so the
//! idle measurement above still decides.
//!
//! Re-measured after the session fix (2026-11-26, Xeon VM): idle, 8 alternating
//! runs of `bench --backend gloo -b 4 -e 1M` at each setting stalled 0 of 160
//! medians at nice 5 and 0 of 160 at nice 0; under two busy loops, 6 alternating
//! runs against torch's gloo gave nice 0 no gain (4 MiB: 1.72× torch's at nice 0,
//! 1.44× at 5; 16 MiB: 1.36× and 1.31×). The loops stay at 5. The loop thread does
//! the socket reads (about 1.9 ms of CPU per 4 MiB call, the caller 1.4 ms), so
//! what large messages lack under load is CPU, not priority.
//!
//! Again on 2026-11-27 (Xeon VM, `bench --backend gloo --peer torch -b 4M -e 64M -f 4
//! --load 2`, 5 alternating runs at each setting, medians of the per-run ratios to
//! torch's gloo): nice 5 gave 1.97 / 1.22 / 0.85 at 4 / 16 / 64 MiB, nice 0 gave
//! 1.27 / 1.44 / 0.75, with per-run ratios spanning 0.58–2.16. No setting wins at
//! every size, so the idle measurement still decides.
//!
//! Again on 2026-11-27, after Gloo's large calls moved to a worker thread
//! (`worker.rs`): under two busy loops, `bench --backend gloo -b 4 -e 256K -f 4
//! --load 2` in 7 alternating runs at each setting had calls stalled at a tick or
//! more (a median above 2 ms) in 51 of 126 medians at nice 5 and 21 of 126 at
//! nice 0, but whole runs fell into or out of that state either way (another 3
//! runs at nice 0 were stalled or slow at small sizes where 3 at 5 were not), and
//! idle, 2 alternating runs of `bench --backend gloo --peer torch -b 4 -e 64M -f 4`
//! each, nice 0 took 12.1–12.2 ms at 16 MiB and 49–52 ms at 64 MiB where nice 5
//! took 10.2–10.8 and 42.5–42.6. The loops stay at 5.
//!
//! Gloo does not hand out its threads, but a new thread inherits its
//! creator's nice value: Gloo's devices are made on a short-lived thread
//! that runs nicer ([`connect_nicer`]), so exactly the threads Gloo starts
//! there are nicer and the rank's own keep their priority.

use crate::error::{Error, Result};

/// How much nicer than the connecting thread the loops run (see the module
/// docs for why 5).
const NICER_BY: i32 = 5;

/// Makes the calling thread `NICER_BY` nicer (at most 19). Best effort: a
/// thread may always lower its own priority, and where it cannot, Gloo runs
/// as it would without this.
fn make_this_thread_nicer() {
    // SAFETY: getpriority and setpriority have no memory-safety
    // preconditions; who = 0 is the calling thread on Linux.
    unsafe {
        let now = libc::getpriority(libc::PRIO_PROCESS, 0);
        libc::setpriority(libc::PRIO_PROCESS, 0, (now + NICER_BY).min(19));
    }
}

/// Runs `connect` (which makes Gloo's devices, and with them their loop
/// threads) on a thread of its own that runs nicer, and returns its result.
pub(super) fn connect_nicer<T: Send>(connect: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            // Gloo's loop threads inherit this name too, so they show up
            // in `top -H` as what they are.
            .name("ringside-gloo".into())
            .spawn_scoped(s, || {
                make_this_thread_nicer();
                connect()
            })
            .map_err(|e| Error::Protocol(format!("starting Gloo's connecting thread: {e}")))?;
        helper
            .join()
            .map_err(|_| Error::Protocol("Gloo's connecting thread panicked".into()))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nice value of thread `tid` (field 19 of its stat).
    fn nice_of(tid: i32) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // Fields after the parenthesised name start at 3 (state).
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').nth(16).unwrap().parse().unwrap()
    }

    fn gettid() -> i32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }

    #[test]
    fn threads_started_while_connecting_run_nicer_and_the_caller_does_not() {
        let base = nice_of(gettid());
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        // Stands in for a Gloo device: it starts a loop thread that lives
        // on after connecting returns.
        let started = connect_nicer(|| {
            Ok(std::thread::spawn(move || {
                tx.send(gettid()).unwrap();
                let _ = stop_rx.recv();
            }))
        })
        .unwrap();
        let loop_tid = rx.recv().unwrap();
        assert_eq!(nice_of(loop_tid), (base + NICER_BY).min(19));
        assert_eq!(nice_of(gettid()), base, "the caller keeps its priority");
        drop(stop_tx);
        started.join().unwrap();
        // Errors come back as they were.
        let err = connect_nicer::<()>(|| Err(Error::Protocol("no peer".into()))).unwrap_err();
        assert!(err.to_string().contains("no peer"), "{err}");
    }
}
