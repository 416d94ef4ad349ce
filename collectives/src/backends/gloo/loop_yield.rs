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
//! `epoll_ctl`, `recv` and `writev` (its GOT entries; only libgloo's, nothing
//! else in the process) at wrappers that call the real ones. The socket ones
//! note that the calling thread moved bytes (or tried to). `epoll_wait`'s returns what the
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
//! **Only where the holder may wait behind the loop.** A yield helps only
//! where the lock holder is runnable on the loop's own CPU. Where it runs on
//! another, the yield hands the loop's CPU to whatever else is runnable
//! there, and on a machine whose every CPU is busy that is another program,
//! for the rest of its slice (EEVDF moves only the yielder's deadline back).
//! Seen on 2026-11-28 on a 16-core H200 node (Xeon, kernel 6.18, HZ 250)
//! beside 16 busy loops: 1 MiB all_reduce took 2.8–4.4 ms against torch's
//! 0.7–1.9 (2.1–5.1×; `bench --backend gloo --peer torch --repeat 3 --load 16`,
//! 6 runs), with the worker or without it. `perf sched` over 2 s of 1 MiB
//! calls (`perf record -a -g -e sched:sched_wakeup,sched:sched_switch`) had
//! 285 and 354 yields after which a busy loop took the CPU, the yielder
//! waiting a median 3.2–3.5 ms (p90 3.7) after each, and the job with no
//! thread running and one waiting for a CPU for 1.46–1.58 s of the 2. So the socket wrappers also
//! note, per descriptor, the CPU of each call made outside a loop (the
//! holder's: the rank's caller or worker, which write holding the lock), the
//! `epoll_ctl` wrapper which descriptor each handler watches, and a stuck
//! loop yields only where a stuck pair's holder was last seen on its own CPU,
//! or not seen at all (`worth_yielding`); elsewhere it spins on, as torch's
//! loop does, until the holder lets go or the scheduler's tick moves it. Same
//! node, same load, in turn with `RINGSIDE_GLOO_LOOP_YIELD=anywhere` (20:07–20:09
//! node time, `-b 4 -e 16M -f 4`): 1 MiB 523 and 441 µs (0.95 and 0.85×
//! torch's), every size at most 0.97× in both runs, against 629 µs (1.33×)
//! and 4 MiB 1.08× yielding anywhere; an earlier build with one process-wide
//! holder CPU read 694 / 545 µs against 2,807 / 3,934 (2 runs each). Idle on
//! the node, one run: 4 B–4 MiB 0.49–0.91×, 16 MiB 1.08× (7.10 against 6.58
//! ms; the earlier build's and yielding anywhere's idle runs read 0.99).
//!
//! Only where the host's CPUs fit every rank's two busy threads, though
//! ([`plan`]): with fewer, the spinning loop takes a CPU another rank needs.
//! On the 2-core EPYC VM under `--load 2` (7 runs each way of `-b 4 -e 64M -f
//! 4`, in turn with yielding anywhere, 19:44–20:05 UTC; 4 of the 7 from a
//! variant that yielded after 100 µs all the same) a loop that kept its CPU
//! made 16 MiB slower: median 23.1 against 17.0 ms, median ratio to torch's
//! 1.03 against 0.74 (64 MiB 68 against 83 ms, 1 and 4 MiB alike). So there,
//! and wherever twice the host's ranks exceed its CPUs, it yields as before.
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
//! `RINGSIDE_GLOO_LOOP_YIELD=off` leaves Gloo's loop as Debian ships it, and
//! `=anywhere` yields wherever the holder is (as before 2026-11-28), for
//! comparing. On architectures other than x86-64 and AArch64, or where libgloo
//! cannot be found among the loaded objects, nothing is changed and Gloo runs
//! as shipped ([`install`] says why).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::got::{self, LIBGLOO};

/// How long the loop may find the same ready set with no progress before it
/// yields: about what a holder running on another core needs to write a small
/// message and let go. Measured on 2026-11-27 (2-core VM, `--load 2`, 5 runs
/// each, median call over 4 B–64 KiB per run): yielding at once 78–128 µs,
/// after 5 µs 85–125, after 20 µs 98–146; none stalled, where without the
/// wrappers 5 of 5 runs had sizes at 4 ms (one run 12 of 16).
pub const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(5);

/// The variable that turns the wrappers off (`off`, `0` or `false`), or
/// (`anywhere`) lets a stuck loop yield wherever the lock holder was last
/// seen, as before 2026-11-28, for an A/B.
pub const ENV: &str = "RINGSIDE_GLOO_LOOP_YIELD";

/// `RINGSIDE_GLOO_LOOP_YIELD=anywhere`: yield without asking where the holder is.
static ANYWHERE: AtomicBool = AtomicBool::new(false);

/// Whether the job's threads fit this host's CPUs ([`plan`]), so that a loop
/// may spin on while its holder runs elsewhere.
static CPU_TO_SPARE: AtomicBool = AtomicBool::new(false);

/// Tells the loops how many of the job's ranks share `cpus` CPUs on this
/// host (the last communicator made says). Only where every rank can keep two
/// threads running (the holder writing, its loop reading: `cpus_to_spare`)
/// does a stuck loop keep its CPU while its holder was last seen on another;
/// with fewer CPUs the spinning loop takes a CPU another rank needs, and it
/// yields wherever the holder is, as it did before 2026-11-28.
pub fn plan(ranks_on_host: usize, cpus: usize) {
    let spare = !ANYWHERE.load(Ordering::Relaxed) && cpus_to_spare(ranks_on_host, cpus);
    CPU_TO_SPARE.store(spare, Ordering::Relaxed);
}

/// The rule behind [`plan`].
fn cpus_to_spare(ranks_on_host: usize, cpus: usize) -> bool {
    cpus >= 2 * ranks_on_host.max(1)
}

/// Points libgloo's `epoll_wait`, `epoll_ctl`, `recv` and `writev` at the
/// wrappers, once per process; later calls return the first call's outcome.
/// `Err` says why Gloo runs as shipped (turned off, or its imports were not
/// found).
pub fn install() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        if crate::job::switched_off(ENV) {
            return Err(format!("{ENV} turns it off"));
        }
        let anywhere = std::env::var(ENV).is_ok_and(|v| v.trim() == "anywhere");
        ANYWHERE.store(anywhere, Ordering::Relaxed);
        got::patch(
            LIBGLOO,
            &[
                (c"epoll_wait", epoll_wait_hook as *const () as usize),
                (c"epoll_ctl", epoll_ctl_hook as *const () as usize),
                (c"recv", recv_hook as *const () as usize),
                (c"writev", writev_hook as *const () as usize),
            ],
        )
    })
    .clone()
}

/// libgloo's `recv`: the real one, through [`socket_call`].
unsafe extern "C" fn recv_hook(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: the caller's arguments, passed on unchanged.
    socket_call(fd, || unsafe { libc::recv(fd, buf, len, flags) })
}

/// libgloo's `writev`: the real one, through [`socket_call`].
unsafe extern "C" fn writev_hook(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's arguments, passed on unchanged.
    socket_call(fd, || unsafe { libc::writev(fd, iov, n) })
}

/// Runs a socket call on `fd`, noted as progress; on a thread other than a
/// loop (the rank's caller or worker, which makes these calls holding the
/// pair's lock) also notes its CPU, before the call and again after it (a
/// long write may have moved the thread).
fn socket_call(fd: c_int, call: impl FnOnce() -> isize) -> isize {
    MOVED.with(|m| m.set(true));
    let holder = !IS_LOOP.with(Cell::get);
    if holder {
        holders::note(fd);
    }
    let r = call();
    if holder {
        holders::note(fd);
    }
    r
}

/// libgloo's `epoll_ctl`: the real one, and which descriptor each handler
/// the loop will report watches.
unsafe extern "C" fn epoll_ctl_hook(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut libc::epoll_event,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let rc = unsafe { libc::epoll_ctl(epfd, op, fd, event) };
    if rc == 0 {
        // SAFETY: for ADD and MOD `event` points at the caller's event.
        let handler =
            (op != libc::EPOLL_CTL_DEL && !event.is_null()).then(|| unsafe { (*event).u64 });
        holders::watch(op, fd, handler);
    }
    rc
}

/// Where the thread holding each pair's lock was last seen: the CPU of the last
/// socket call made on the pair's descriptor from outside a loop, and the
/// descriptor behind each handler the loops report.
mod holders {
    use super::*;

    /// Descriptors below this are tracked; above, where the holder is counts
    /// as unknown (and a stuck loop yields, as it always did).
    const FDS: usize = 4096;

    /// Per descriptor: the CPU + 1 of the last call from outside a loop (0: none).
    static CPU: [AtomicU32; FDS] = [const { AtomicU32::new(0) }; FDS];

    /// The descriptor behind each handler (an epoll event's data).
    static HANDLERS: Mutex<BTreeMap<u64, c_int>> = Mutex::new(BTreeMap::new());

    fn handlers() -> std::sync::MutexGuard<'static, BTreeMap<u64, c_int>> {
        // Nothing that can panic runs under the lock: a poisoned map is whole.
        HANDLERS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calling thread's CPU, if the kernel says.
    pub(super) fn here() -> Option<u32> {
        // SAFETY: no preconditions (glibc reads it from rseq: a few ns).
        u32::try_from(unsafe { libc::sched_getcpu() }).ok()
    }

    /// Notes the calling thread's CPU against `fd`.
    pub(super) fn note(fd: c_int) {
        if let (Some(slot), Some(cpu)) = (usize::try_from(fd).ok().and_then(|i| CPU.get(i)), here())
        {
            slot.store(cpu + 1, Ordering::Relaxed);
        }
    }

    /// Where the last call on `fd` from outside a loop ran, if known.
    pub(super) fn last_cpu(fd: c_int) -> Option<u32> {
        let slot = CPU.get(usize::try_from(fd).ok()?)?;
        slot.load(Ordering::Relaxed).checked_sub(1)
    }

    /// `epoll_ctl(op, fd)` succeeded, for `handler` unless `op` deleted it.
    pub(super) fn watch(op: c_int, fd: c_int, handler: Option<u64>) {
        let mut map = handlers();
        if op != libc::EPOLL_CTL_MOD {
            // Added (perhaps a reused descriptor) or deleted: forget the
            // descriptor's old handler and holder.
            map.retain(|_, f| *f != fd);
            if let Some(slot) = usize::try_from(fd).ok().and_then(|i| CPU.get(i)) {
                slot.store(0, Ordering::Relaxed);
            }
        }
        if let Some(h) = handler {
            map.insert(h, fd);
        }
    }

    /// The descriptor behind `handler`, if it was registered through the wrapper.
    pub(super) fn fd_of(handler: u64) -> Option<c_int> {
        handlers().get(&handler).copied()
    }
}

/// Whether a loop stuck on `ready` should yield its CPU: only where that could
/// let a lock holder run, that is where some stuck pair's holder was last
/// seen on this very CPU (it waits behind this thread), or where that is not
/// known. Elsewhere the holder is running on its own CPU, or waiting behind
/// another program there, and a yield would only hand this CPU to a
/// stranger, for the rest of its slice (see the module docs).
fn worth_yielding(ready: &[libc::epoll_event], cpu_to_spare: bool) -> bool {
    if !cpu_to_spare {
        return true;
    }
    let here = holders::here();
    ready.iter().any(|e| {
        let holder = holders::fd_of(e.u64).and_then(holders::last_cpu);
        holder_may_wait_here(holder, here)
    })
}

/// The rule behind [`worth_yielding`] for one pair: yield unless both CPUs
/// are known and differ.
fn holder_may_wait_here(holder: Option<u32>, here: Option<u32>) -> bool {
    match (holder, here) {
        (Some(h), Some(me)) => h == me,
        _ => true,
    }
}

/// libgloo's `epoll_wait`: the real one, then a yield if the loop is stuck.
unsafe extern "C" fn epoll_wait_hook(
    epfd: c_int,
    events: *mut libc::epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    IS_LOOP.with(|l| l.set(true));
    // SAFETY: the caller's arguments, passed on unchanged.
    let n = unsafe { libc::epoll_wait(epfd, events, maxevents, timeout) };
    if n > 0 {
        // SAFETY: epoll_wait filled the first n entries.
        let ready = unsafe { std::slice::from_raw_parts(events, n as usize) };
        let moved = MOVED.with(|m| m.replace(false));
        // `try_with`: never a panic (an abort, here) in a thread's teardown.
        let yields = WATCH
            .try_with(|w| {
                let mut w = w.borrow_mut();
                let yields = w.stuck(ready, moved, Instant::now)
                    && worth_yielding(ready, CPU_TO_SPARE.load(Ordering::Relaxed));
                w.yields += u64::from(yields);
                yields
            })
            .unwrap_or(false);
        if yields {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
    n
}

thread_local! {
    /// Whether this thread is one of Gloo's loops (it calls `epoll_wait`).
    static IS_LOOP: Cell<bool> = const { Cell::new(false) };
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
    /// Yields this thread made (the wrapper counts them).
    yields: u64,
}

impl Watch {
    /// Whether the loop is stuck (and may yield), given the ready set just
    /// returned, whether it made a socket call since the last return, and the
    /// clock (read only when the set repeats unmoved: most returns need no time).
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
        now.duration_since(*self.since.get_or_insert(now)) >= SPIN_BEFORE_YIELD
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
    fn a_loop_keeps_its_cpu_only_where_every_rank_has_two() {
        assert!(!cpus_to_spare(2, 2), "2 ranks on a 2-core laptop");
        assert!(!cpus_to_spare(2, 3));
        assert!(cpus_to_spare(2, 4));
        assert!(cpus_to_spare(2, 16), "2 ranks on a 16-core node");
        assert!(!cpus_to_spare(8, 8));
        assert!(cpus_to_spare(0, 2), "no rank count: as one rank");
        let anywhere = [ev(0xdead, libc::EPOLLIN as u32)];
        assert!(
            worth_yielding(&anywhere, false),
            "without CPUs to spare a stuck loop yields wherever its holder is"
        );
    }

    #[test]
    fn a_pairs_holder_may_wait_here_unless_seen_on_another_cpu() {
        assert!(holder_may_wait_here(Some(3), Some(3)));
        assert!(!holder_may_wait_here(Some(2), Some(3)));
        assert!(holder_may_wait_here(None, Some(3)), "holder not seen yet");
        assert!(holder_may_wait_here(Some(2), None), "own CPU unknown");
    }

    /// On 2026-11-28, on a 16-core node beside 16 busy loops, 1 MiB all_reduce
    /// took 2.8–4.4 ms against torch's 0.7–1.9: a loop stuck behind its pair's
    /// lock yielded, its CPU went to a busy loop for the rest of that one's
    /// slice, and the holder was running on another CPU all along. A loop
    /// yields only where the holder was last seen on its own CPU.
    #[test]
    fn a_loop_stuck_behind_a_holder_on_another_cpu_keeps_its_cpu() {
        if std::env::var_os(ENV).is_some() {
            eprintln!("skipped: {ENV} is set");
            return;
        }
        let cpus = crate::sys::affinity::allowed_cpus().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        let fd = rx.as_raw_fd();
        // A rank's thread writes on the pair's socket from `cpu`, as Gloo's
        // `Pair::send` does holding the lock.
        let hold_from = |cpu: usize| {
            std::thread::spawn(move || {
                crate::sys::affinity::bind_to(&[cpu]).unwrap();
                let byte = [0u8; 1];
                let iov = libc::iovec {
                    iov_base: byte.as_ptr() as *mut c_void,
                    iov_len: 1,
                };
                // SAFETY: one iovec over a live byte; `fd` is open.
                assert_eq!(unsafe { writev_hook(fd, &iov, 1) }, 1);
            })
            .join()
            .unwrap();
        };
        // SAFETY: no preconditions; closed below.
        let ep = unsafe { libc::epoll_create1(0) };
        assert!(ep >= 0);
        let mut reg = ev(0xbeef, libc::EPOLLIN as u32);
        // SAFETY: valid descriptors and event, as libgloo passes them.
        let rc = unsafe { epoll_ctl_hook(ep, libc::EPOLL_CTL_ADD, fd, &mut reg) };
        assert_eq!(rc, 0);
        // The loop, on `cpu`: the yields it makes while its socket stays
        // unread, on a host with CPUs to spare ([`plan`]), and what
        // `worth_yielding` says there on the set it gets back.
        let spin_on = |cpu: usize| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    crate::sys::affinity::bind_to(&[cpu]).unwrap();
                    let mut out = [ev(0, 0); 8];
                    let start = Instant::now();
                    while start.elapsed() < SPIN_BEFORE_YIELD * 50 {
                        // SAFETY: a valid epoll fd and 8 entries.
                        assert_eq!(unsafe { epoll_wait_hook(ep, out.as_mut_ptr(), 8, 1000) }, 1);
                    }
                    // As on a host with CPUs to spare ([`plan`]).
                    (
                        WATCH.with(|w| w.borrow().yields),
                        worth_yielding(&out[..1], true),
                    )
                })
                .join()
                .unwrap()
            })
        };
        tx.write_all(&[7; 64]).unwrap();
        let loop_cpu = cpus[0];
        let (yields, would) = spin_on(loop_cpu);
        assert!(
            yields > 0 && would,
            "no holder seen yet: the loop should yield"
        );
        hold_from(loop_cpu);
        let (yields, would) = spin_on(loop_cpu);
        assert!(
            yields > 0 && would,
            "the holder waits on the loop's CPU: the loop should yield"
        );
        let Some(&other) = cpus.get(1) else {
            eprintln!("skipped the other-CPU half: this process may use one CPU only");
            return;
        };
        hold_from(other);
        // (Whether it yielded here depends on what the last communicator in
        // this test process told `plan`; what it would do with CPUs to spare:)
        let (_, would) = spin_on(loop_cpu);
        assert!(
            !would,
            "the holder was seen on CPU {other}: a yield on CPU {loop_cpu} only helps a stranger"
        );
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
            (c"epoll_ctl", epoll_ctl_hook as *const () as usize),
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
