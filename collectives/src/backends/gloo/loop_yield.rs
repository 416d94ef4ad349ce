//! Gloo's event loop, kept from spinning on a pair's lock.
//!
//! **What breaks.** Gloo's TCP event loop (`Loop::run`, Debian's 0.5 and
//! upstream alike) waits in `epoll_wait` on level-triggered descriptors and
//! hands each ready one to `Pair::handleEvents`, which only *tries* to take
//! the pair's lock and returns at once when the rank's own thread holds it
//! (in `Pair::send` or `Pair::recv`, writing to the socket). The descriptor is
//! still ready, so `epoll_wait` returns at once again: the loop spins until
//! the lock is free. Where the lock holder runs on another core that is a few
//! microseconds. But a socket write wakes the peer with the kernel's "sync"
//! hint, which on a busy machine puts the woken thread on the writer's core and
//! lets it preempt the writer, lock held. When the peer's answer then wakes
//! this rank's loop on that core, the loop spins there, and the holder it waits
//! for cannot run until the scheduler's next tick: 4 ms for a call of 60 µs.
//!
//! Seen on 2026-11-27 on the 2-core Xeon VM, 2 ranks under `mpirun` beside
//! two busy loops (`ringside bench --backend gloo --load 2`): in 19 of 27
//! runs one or more sizes from 4 B to 64 KiB took a median of 4.0 ms (every
//! call a tick), mostly the first sizes, while the kernel still had all four
//! rank threads on one core. `perf sched` showed a loop thread running
//! 3.7–4.2 ms at a stretch, state R, with its rank's thread runnable on the
//! same core; `perf record` showed it calling `epoll_wait`, which returned
//! ready events each time (`ep_send_events`), and `pthread_mutex_trylock`.
//! PyTorch's Gloo has the same loop; its ranks' threads are arranged
//! differently, and it hit this less often.
//!
//! **What this does.** [`install`] points libgloo's imports of `epoll_wait`,
//! `recv` and `writev` (its GOT entries; only libgloo's, nothing else in the
//! process) at wrappers that call the real ones. The socket ones note that the
//! calling thread moved bytes (or tried to). `epoll_wait`'s returns what the
//! real one returns, but when a thread gets back the same ready set as last
//! time and has made no socket call since, Gloo's handler did nothing with it:
//! the lock was taken. After [`SPIN_BEFORE_YIELD`] of that it calls
//! `sched_yield` before each return, so the lock holder can run. A holder
//! running on another core frees the lock well within that time, so nothing
//! yields then. In the same A/B, `ringside bench --backend gloo --load 2 -b 4
//! -e 64K -f 4` under `mpirun`, builds taken in turn: without the wrappers
//! 19 of 27 runs had sizes at 4 ms, with them none of 23 (yielding after 0, 5
//! or 20 µs); an `LD_PRELOAD` sketch of the same idea had none in 14 against
//! 10 of 14 without. Idle, 4 runs each, the median call was the same or
//! faster (78–98 µs against 90–103).
//!
//! Tried on 2026-11-28 and not kept: a stuck loop sleeping on the lock its
//! handler failed to take (libgloo's `pthread_mutex_trylock` import wrapped,
//! then `pthread_mutex_timedlock`) instead of yielding. Under `--load 2`, 10
//! alternating rounds of `bench -b 16M -e 64M`, in-place medians: 16 MiB 10.0
//! ms yielding, 11.1 sleeping, 16.1 sleeping only after a yield had given the
//! core away; 64 MiB 59, 65, 81 ms. Idle the sleeping loop was 5–14 % slower at
//! 1–64 MiB (a sleeping loop's wake-up costs more than a yield on a free core).
//!
//! Large calls need the yield as much as small ones. 2026-11-28 (2-core Xeon
//! VM, own launcher, `bench --backend gloo -b 16M -e 64M -f 4 -n 20 --load 2`,
//! 10 runs each, with and without `RINGSIDE_GLOO_LOOP_YIELD=off` in turn,
//! in-place medians of the runs): 16 MiB 14.3 ms yielding against 18.6 as
//! shipped, 64 MiB 54 against 94. Counted with `perf stat` over whole runs,
//! per rank and call at 16 MiB under that load: 452 yields and 491
//! `epoll_wait` returns here, against torch's gloo's 2,707 `epoll_wait`
//! returns (its loop spins as shipped); `recv` (107 against 119) and
//! `writev` (51 each) alike. Tried the same day and not kept, same runs:
//! - yielding at once or after 50 µs instead of 5 (8 runs each, in turn):
//!   16 MiB 23.0 / 20.9 / 22.5 ms, 64 MiB 91 / 71 / 71 (0 / 5 / 50 µs; a
//!   slower phase of the VM than the runs above);
//! - keeping the rank's worker from holding the pair lock through a large
//!   write (libgloo's `writev` over 64 KiB from any thread but the loop
//!   answered `EAGAIN`, so Gloo hands the write to its loop): 16 MiB 13.9
//!   against 13.4 ms, 64 MiB 64 against 52, and as many yields idle;
//! - (2026-11-28, later) the worker spinning before it sleeps on a
//!   completion: libgloo's `pthread_cond_clockwait` wrapped to return
//!   spuriously (mutex dropped, a short spin, taken again) for the first 20
//!   or 100 µs of each wait, so a segment finished by the loop on the other
//!   core needs no wake-up. `bench --backend gloo -b 1M -e 64M -f 4 -n 20`,
//!   3 runs each in turn, in-place medians: idle 1 MiB 476 / 657 / 886 µs
//!   (none / 20 / 100 µs), 16 MiB 6.3 / 7.3 / 8.0 ms; under `--load 2`
//!   16 MiB 11.3 against 12.7 ms, 64 MiB 54 against 58 (none / 20 µs). On two
//!   cores the spinning worker takes the core its own loop needs;
//! - the loop polling before it sleeps, as torch's loop keeps its core
//!   (`epoll_wait` with no timeout, repeated for up to 50 or 200 µs, before
//!   the blocking one), same command and medians: idle 1 MiB 582 / 657 / 791
//!   µs (none / 50 / 200 µs), 16 MiB 7.7 / 8.3 / 10.3 ms; under `--load 2`
//!   (4 runs each) 1 MiB 609 against 762 µs, 4 MiB 2.1 against 3.3 ms,
//!   16 MiB 15.8 against 19.2, 64 MiB 105 against 93 (none / 50 µs).
//!
//! `RINGSIDE_GLOO_LOOP_YIELD=off` leaves Gloo's loop as Debian ships it, for
//! comparing. On architectures other than x86-64 and AArch64, or where libgloo
//! cannot be found among the loaded objects, nothing is changed and Gloo runs
//! as shipped ([`install`] says why).

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::got::{self, LIBGLOO};

/// How long the loop may find the same ready set with no progress before it
/// yields: about what a holder running on another core needs to write a small
/// message and let go. Measured on 2026-11-27 (2-core VM, `--load 2`, 5 runs
/// each, median call over 4 B–64 KiB per run): yielding at once 78–128 µs,
/// after 5 µs 85–125, after 20 µs 98–146; none stalled, where without the
/// wrappers 5 of 5 runs had sizes at 4 ms (one run 12 of 16).
pub const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(5);

/// The variable that turns the wrappers off (`off`, `0` or `false`).
pub const ENV: &str = "RINGSIDE_GLOO_LOOP_YIELD";

/// Points libgloo's `epoll_wait`, `recv` and `writev` at the wrappers, once
/// per process; later calls return the first call's outcome. `Err` says why
/// Gloo runs as shipped (turned off, or its imports were not found).
pub fn install() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        if crate::job::switched_off(ENV) {
            return Err(format!("{ENV} turns it off"));
        }
        got::patch(
            LIBGLOO,
            &[
                (c"epoll_wait", epoll_wait_hook as *const () as usize),
                (c"recv", recv_hook as *const () as usize),
                (c"writev", writev_hook as *const () as usize),
            ],
        )
    })
    .clone()
}

/// libgloo's `recv`: the real one, noted as progress.
unsafe extern "C" fn recv_hook(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    MOVED.with(|m| m.set(true));
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { libc::recv(fd, buf, len, flags) }
}

/// libgloo's `writev`: the real one, noted as progress.
unsafe extern "C" fn writev_hook(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    MOVED.with(|m| m.set(true));
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { libc::writev(fd, iov, n) }
}

/// libgloo's `epoll_wait`: the real one, then a yield if the loop is stuck.
unsafe extern "C" fn epoll_wait_hook(
    epfd: c_int,
    events: *mut libc::epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let n = unsafe { libc::epoll_wait(epfd, events, maxevents, timeout) };
    if n > 0 {
        // SAFETY: epoll_wait filled the first n entries.
        let ready = unsafe { std::slice::from_raw_parts(events, n as usize) };
        let moved = MOVED.with(|m| m.replace(false));
        // `try_with`: never a panic (an abort, here) in a thread's teardown.
        let stuck = WATCH
            .try_with(|w| w.borrow_mut().stuck(ready, moved, Instant::now))
            .unwrap_or(false);
        if stuck {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
    n
}

thread_local! {
    /// Whether this thread made a socket call through libgloo since its last
    /// return from `epoll_wait`.
    static MOVED: Cell<bool> = const { Cell::new(false) };
    static WATCH: RefCell<Watch> = RefCell::new(Watch::default());
}

/// One loop thread's view of its last returns from `epoll_wait`.
#[derive(Default)]
struct Watch {
    /// The last ready set: (event data, event bits) per descriptor.
    key: Vec<(u64, u32)>,
    /// When it was first seen with no progress.
    since: Option<Instant>,
    /// Yields this thread made.
    yields: u64,
}

impl Watch {
    /// Whether the loop should yield, given the ready set just returned,
    /// whether it made a socket call since the last return, and the clock
    /// (read only when the set repeats unmoved: most returns need no time).
    fn stuck(
        &mut self,
        ready: &[libc::epoll_event],
        moved: bool,
        now: impl FnOnce() -> Instant,
    ) -> bool {
        let key = |e: &libc::epoll_event| ({ e.u64 }, { e.events });
        let same =
            self.key.len() == ready.len() && self.key.iter().zip(ready).all(|(k, e)| *k == key(e));
        if !same || moved {
            if !same {
                self.key.clear();
                self.key.extend(ready.iter().map(key));
            }
            self.since = None;
            return false;
        }
        let now = now();
        let stuck = now.duration_since(*self.since.get_or_insert(now)) >= SPIN_BEFORE_YIELD;
        self.yields += u64::from(stuck);
        stuck
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    fn ev(data: u64, events: u32) -> libc::epoll_event {
        libc::epoll_event { events, u64: data }
    }

    #[test]
    fn watch_yields_only_after_the_same_ready_set_made_no_progress_for_a_while() {
        let t0 = Instant::now();
        let at = |us| t0 + Duration::from_micros(us);
        let inb = libc::EPOLLIN as u32;
        let mut w = Watch::default();
        // First sight; then the same set with nothing read, for 20 µs.
        assert!(!w.stuck(&[ev(1, inb)], false, || at(0)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(1)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(5)));
        assert!(w.stuck(&[ev(1, inb)], false, || at(6)), "5 µs unmoved");
        assert!(
            w.stuck(&[ev(1, inb)], false, || at(7)),
            "and on while stuck"
        );
        // A socket call (progress) starts the wait over.
        assert!(!w.stuck(&[ev(1, inb)], true, || at(8)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(10)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(14)));
        assert!(w.stuck(&[ev(1, inb)], false, || at(15)));
        // Another handler or other bits: a new set.
        assert!(!w.stuck(&[ev(2, inb)], false, || at(90)));
        assert!(!w.stuck(&[ev(2, inb | libc::EPOLLOUT as u32)], false, || at(200)));
        assert!(!w.stuck(&[ev(2, inb), ev(1, inb)], false, || at(300)));
        // Streaming, or small calls back to back: the same set every time,
        // with a read after each.
        let mut w = Watch::default();
        for us in 0..100 {
            assert!(!w.stuck(&[ev(4, inb)], us > 0, || at(us * 30)));
        }
    }

    /// The loop of a rank whose pair lock is held sees the same readable
    /// socket over and over and reads nothing: what took a scheduler tick per
    /// call under load (module docs). Through the wrappers, as libgloo calls
    /// them: a loop that keeps finding an unread socket yields; one that
    /// reads after each return never does.
    #[test]
    fn a_loop_that_cannot_take_its_pair_lock_yields_instead_of_spinning() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        // SAFETY: no preconditions; closed below.
        let ep = unsafe { libc::epoll_create1(0) };
        assert!(ep >= 0);
        let mut reg = ev(0xfeed, libc::EPOLLIN as u32);
        // SAFETY: valid descriptors and event.
        let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, rx.as_raw_fd(), &mut reg) };
        assert_eq!(rc, 0);
        let mine = || WATCH.with(|w| w.borrow().yields);
        let mut out = [ev(0, 0); 8];
        let mut wait = || {
            // SAFETY: a valid epoll fd and 8 entries.
            unsafe { epoll_wait_hook(ep, out.as_mut_ptr(), 8, 1000) }
        };
        let mut buf = [0u8; 64];
        let mut read = |n: usize| {
            // SAFETY: `buf` has room for n <= 64 bytes.
            let got = unsafe { recv_hook(rx.as_raw_fd(), buf.as_mut_ptr().cast(), n, 0) };
            assert_eq!(got, n as isize);
        };

        tx.write_all(&[7; 64]).unwrap();
        let before = mine();
        let start = Instant::now();
        while start.elapsed() < SPIN_BEFORE_YIELD * 50 {
            assert_eq!(wait(), 1);
        }
        assert!(
            mine() > before,
            "spinning on an unread socket never yielded"
        );

        read(64);
        let before = mine();
        let start = Instant::now();
        while start.elapsed() < SPIN_BEFORE_YIELD * 50 {
            tx.write_all(&[1; 4]).unwrap();
            assert_eq!(wait(), 1);
            read(4);
        }
        assert_eq!(mine(), before, "a loop making progress yielded");
        // SAFETY: ours.
        unsafe { libc::close(ep) };
    }

    #[test]
    fn install_points_libgloos_imports_at_the_wrappers() {
        if let Err(why) = install() {
            if std::env::var_os(ENV).is_some() {
                eprintln!("skipped: {why}");
                return;
            }
            panic!("{why}");
        }
        for (name, hook) in [
            (c"epoll_wait", epoll_wait_hook as *const () as usize),
            (c"recv", recv_hook as *const () as usize),
            (c"writev", writev_hook as *const () as usize),
        ] {
            let now = got::current(LIBGLOO, name);
            assert!(!now.is_empty(), "libgloo's {name:?} not found");
            assert!(now.iter().all(|&a| a == hook), "{name:?} still {now:x?}");
        }
        // Idempotent: a second install changes nothing and agrees.
        assert_eq!(install(), Ok(()));
    }
}
