//! The Gloo backend: Debian's libgloo (0.5) through a small C++ shim
//! (`shim.cc`, bridged with `cxx`).
//!
//! **Rendezvous** goes through ringside's own store: the shim's
//! `gloo::rendezvous::Store` subclass calls back into [`Store`] (keys under
//! `{opts.prefix}gloo/`), so multi-node jobs need no shared filesystem.
//! **Transport** is Gloo's TCP device, on the interface named by
//! `GLOO_SOCKET_IFNAME` (as PyTorch reads it), else on `opts.listen_ip`.
//! Gloo's event-loop threads keep the rank's priority, as in PyTorch (see
//! "Gloo's threads" below). Calls on buffers of 1 MiB and more run on a worker thread while the caller
//! waits, as in PyTorch's `ProcessGroupGloo` (`worker.rs`).
//! Gloo's sockets and its loop's epoll descriptor are opened close-on-exec
//! (`close_on_exec.rs`: Gloo opens them inheritable), so a program a rank
//! starts does not hold its connections open after it, their send
//! buffers are never set below 256 KiB (`socket_options.rs`: Gloo sizes them to
//! its first, small messages, and then a small message waits out the peer's
//! delayed ACK), and those inside the host leave BBR for cubic where the
//! system chose BBR (`sys::congestion`: BBR paces them at what a busy rank
//! managed to read).
//! Gloo's context timeout is `opts.timeout`; Gloo's "timed out" errors become
//! [`Error::Timeout`], every other C++ exception an [`Error::Protocol`] — none
//! escapes as an abort. After any error the communicator refuses further calls.
//!
//! **all_reduce algorithm**: `opts.algo` (the same `--algo` as the reference
//! backend's): `ring`, `ring-chunked`, `halving-doubling`, `bcube`, and a
//! reference-only name → default; with `--algo auto` (no algorithm asked for),
//! `RINGSIDE_GLOO_ALGO=ring|ring_chunked|halving_doubling|bcube|default` if
//! set, else default. `default`, `ring` and `bcube`
//! are `gloo::allreduce` (the entry point PyTorch's ProcessGroupGloo calls)
//! with, for `default`, bcube on small calls and Gloo's own choice (its ring)
//! otherwise ([`BCUBE_BELOW`] says why), in segments of up to 1 MiB as
//! Gloo's and PyTorch's ([`SEGMENT_BYTES`] has why not 4 MiB), `Algorithm::RING` or
//! `Algorithm::BCUBE` (Gloo's own segments).
//! `ring_chunked` and `halving_doubling` exist only as Gloo's classic
//! algorithm objects (`gloo::AllreduceRingChunked`,
//! `gloo::AllreduceHalvingDoubling`), which are bound to one buffer: the shim
//! builds one per (algorithm, dtype, op, count), keeps up to 16 (every rank
//! builds and evicts the same ones at the same call, behind a barrier), and
//! copies the caller's data through its work buffer. They run on a second
//! context and TCP device of their own, made over the first (no store
//! traffic).
//!
//! How each collective maps onto Gloo:
//!
//! | collective | Gloo |
//! |---|---|
//! | all_reduce | the algorithm above, in place on the output |
//! | broadcast, reduce, all_gather, all_to_all, gather, scatter, barrier | `gloo::broadcast`, `gloo::reduce`, ... (options API; reduce is `gloo::allreduce` while a classic algorithm is selected) |
//! | reduce_scatter | n `gloo::reduce` calls (block r to rank r) on a scratch copy of the input  |
//! | send / recv | unbound buffers on one fixed slot (Gloo keeps per-peer order) |
//!
//! Nothing in the conformance matrix is declined. Gloo has no bfloat16 and
//! its collectives do not take aliased input and output; instead of
//! declining those, reductions use the shim's own kernels for every dtype
//! (bf16 and f16 through f32, rounding once per step; integers wrap), and
//! in-place forms stage through scratch copies. `Avg` is a sum followed by
//! [`finish_avg`]. Reduce on non-root ranks runs in scratch memory, so their
//! buffers are left unchanged. Declined, identically on every rank and
//! before any communication ([`Error::Unsupported`]): device (CUDA) buffers;
//! more than `i32::MAX` elements on a classic algorithm (they count in
//! `int`).
//!
//! # On a busy machine
//!
//! Gloo as Debian and PyTorch ship it took a scheduler tick (4 ms) per call
//! beside busy programs. What ringside changes around it, each with the
//! measurements under "Measurements" below or in the file named:
//!
//! - Gloo's event loop yields when it keeps finding a ready socket whose pair
//!   lock another thread holds ([`loop_yield`]; `RINGSIDE_GLOO_LOOP_YIELD`).
//! - The rank's thread, Gloo's loop and the worker ask for a 100 µs
//!   scheduler slice ("A short scheduler slice"; `RINGSIDE_GLOO_SLICE`).
//! - Gloo's loop threads keep the rank's priority, as PyTorch's do ("Gloo's
//!   threads").
//! - Calls of 1 MiB and more run on a worker thread while the caller waits,
//!   as in PyTorch's `ProcessGroupGloo` (`worker.rs`).
//! - Send buffers of at least 256 KiB (`socket_options.rs`;
//!   `RINGSIDE_GLOO_SEND_BUFFER`), and connections inside the host on cubic
//!   where the system chose BBR (`sys::congestion`; `RINGSIDE_TCP_CONGESTION`).
//! - Ranks that share a scheduling group are bound to their share of the
//!   CPUs ("Placement"; `RINGSIDE_BIND`).
//!
//! What is left (2026-11-29, 2-core VMs): at 1–16 MiB beside two busy loops
//! a single round of ringside's or torch's gloo can be 2–3× another, as the
//! scheduler places the threads; both need about the same CPU per call there.
//! Over 7 rounds in turn ringside's median was 0.65–0.99× torch's at worst
//! (four runs; 16 MiB the close one); over 3 or 5, one size went over 1.0× in
//! three runs of four.
//! `benches/measurement-log.md` has every dated run, including what was tried
//! and not kept.
//!
//! # Measurements
//!
//! **Mended on 2026-11-29**: with a classic algorithm selected, the full
//! conformance matrix hung in a later options-style collective after the
//! 4 MiB all_reduce cases, and in a sweep (`RINGSIDE_GLOO_ALGO=ring_chunked
//! ringside bench --backend gloo -b 4K -e 64K -f 4`) every 16 KiB call took
//! 44 or 88 ms, 40 KiB too, the sizes around them 0.3–0.5 ms. Both were
//! Gloo's send buffers, sized to its first small messages, making a message
//! wait for the peer's ACK (`socket_options.rs`): with them at 256 KiB or more
//! the full matrix passes at world 3 with either classic algorithm (17.8 s)
//! and those calls take 0.36–0.51 ms; with `RINGSIDE_GLOO_SEND_BUFFER=off`
//! the full matrix still hangs. Gloo's classic
//! `ReduceScatterHalvingDoubling`, built per call, gave wrong results,
//! hence reduce_scatter below.
//!
//! **Under load** (two busy loops beside a 2-rank job on 2 cores), measured
//! with `ringside bench --backend gloo --peer torch --load 2` (add `--repeat
//! 5` so both sides take turns and each is judged on its median round; the
//! README has the latest table, `benches/measurement-log.md` the earlier ones
//! and how much TCP's congestion control moves the large sizes): what decides a
//! call's time is how much CPU the rank gets and how late it is woken, not how
//! much CPU the call needs (about the same as torch's: ~2.2 ms per rank for
//! 4 MiB idle, 7.5–9 ms for 16 MiB under load, against torch's ~2.9 and ~7.8).
//! What was found on 2026-11-27 (`worker.rs` has the figures): with Gloo
//! called on the rank's thread, the kernel's load balancer never packed the
//! busy loops together and each rank got a third of a core, where torch's
//! ranks, which hand each call to a worker thread, got more than half. Tried
//! without a lasting gain under load on 2026-11-26/27: Gloo's segment size
//! (`setMaxSegmentSize` 1, 4 or 16 MiB; 4 MiB was the default for its
//! idle gain until the loop fix below, [`SEGMENT_BYTES`]), the classic
//! ring-chunked algorithm with its pairs in Gloo's synchronous mode
//! (faster idle, twice as slow under load at 64 MiB), and a shorter scheduler
//! slice for every rank thread (`sched_setattr`, 100 µs: slow states and
//! stalls as often, 3 runs each way by median on 2026-11-27); later the same
//! day, a short slice for the callers only, or the loop threads 5 nicer
//! (6 runs each: stalled sizes in 5 of 6 runs either way, as without); on
//! 2026-11-28, 4 MiB initial TCP buffers (`tcp_rmem`/`tcp_wmem` defaults,
//! 8 runs each in turn under `--load 2`: 16 MiB 14.8 against 12.1 ms, 64 MiB
//! 55 against 68, no consistent effect).
//!
//! **The 4 ms calls were Gloo's event loop spinning** (found 2026-11-27, late):
//! its handler only *tries* to take the pair's lock, and on a busy machine
//! the rank's thread holding it was preempted on the loop's own core, so the
//! loop spun until the next scheduler tick. Under `mpirun` beside two busy
//! loops that stalled one or more sizes from 4 B to 64 KiB in 19 of 27 runs,
//! mostly the first ones, while the kernel still kept the four rank threads
//! on one core. [`loop_yield`] has the traces and the fix: libgloo's loop
//! now yields when it finds the same ready socket with nothing done for 5 µs
//! (`RINGSIDE_GLOO_LOOP_YIELD=off` restores Gloo as shipped, for an A/B).
//! With it no size stalled in any of 23 runs, idle calls took the same time,
//! and 1–64 MiB under load got no slower (4 runs with, 3 without, taken in
//! turn, against the torch peer: 16 MiB in 9.9–18.1 ms against 14.0–19.9,
//! 64 MiB in 54–87 ms against 81–89). Idle, 16 MiB got faster (6.7–7.3 ms
//! against 9.8–10.8, 2 runs each against the torch peer): during large calls
//! the loop found its pair taken by the worker's writes about a million times
//! a run (`perf stat` of `bench -b 16M -e 64M -f 4`: 1.02 M `epoll_wait` calls
//! without the wrappers, 121–173 k with, for ~19 k `recv` calls either way),
//! and the spinning took a core from the ranks. Earlier readings of these
//! stalls as run-queue delay (a loop thread woken late behind a busy loop,
//! which does happen to about 1 % of wake-ups, ringside's and torch's alike)
//! missed the spin: a spinning thread is running, not waiting.
//! Counted by stalled medians, `bcube` at small sizes did no better, but it
//! halves a small call's time in the runs where every wake-up waits behind a
//! busy loop (see [`BCUBE_BELOW`]), hence the default. Pinning each rank
//! (caller and loops) to a core of its own did worse then: medians of 8.0–8.1
//! ms (two ticks) at 14 of 16 sizes in 3 of 3 runs, the loop spinning on the
//! core of the thread it waited for. With the loop mended it does better
//! ("Placement" below), and ranks are bound.
//!
//! **Gloo's threads.** Each TCP device starts one event-loop thread, which
//! does the socket reads and the writes a full socket defers; it sleeps in
//! `epoll_wait` between events, but spins while another thread holds a
//! ready pair's lock (in Debian's Gloo and in PyTorch's; [`loop_yield`]).
//! Until 2026-11-27 ringside started those threads 5 nicer than the rank,
//! from an idle measurement on the 2-core VM where that kept them from
//! preempting the rank's reductions. On a 16-core H200 node with 16 busy
//! loops beside the job (`bench --backend gloo --peer torch --repeat 3 --load
//! 16 -b 4 -e 16M -f 4`, 3 alternating runs each way) the nicer loops made
//! calls take one scheduler tick (4 ms) at 5–7 sizes from 64 B to 256 KiB in
//! 2 of 3 runs, up to 18× torch's gloo, and 1–16 MiB took 1.34–5.67× torch's
//! in every run; at the rank's priority no size was over 1.0× in one run,
//! 4 MiB was at 1.23 in another, and 16 B, 64 B and 256 KiB took 1.7–1.9 ms in
//! the third (torch's 16 B too). A thread woken at a lower weight gets a later virtual deadline,
//! so it does not preempt a busy program and waits out its slice. On the
//! 2-core VM under two busy loops the two settings measured alike (5 runs
//! each; sizes over 1.0× torch: 11 of 65 at the rank's priority, 10 of 65
//! nicer), but idle the nicer loops were faster from 4 MiB (4 runs each):
//! 16 MiB in 9.3–11.6 ms against 11.5–12.4, 64 MiB in 43.0–44.5 against
//! 52.1–57.4 (0.73–0.93× and 0.78–0.85× torch's against 0.89–1.00× and
//! 0.98–1.06×). That idle speed on two cores is what this choice alone gave
//! up; 4 MiB segments won it back until the loop fix ([`SEGMENT_BYTES`]).
//!
//! **A short scheduler slice** (`short_slice` below, `sys::slice`): the rank's
//! caller asks for a 100 µs EEVDF slice before Gloo's threads and the worker
//! start, so all of them run with it (the caller's own comes back when the
//! communicator goes). A woken thread with the default slice waits for a busy
//! program's slice to run out, and that slice grows with the CPUs: on a
//! 16-core H200 node beside 16 busy loops, calls of 4 B–256 KiB took one
//! scheduler tick (4 ms) at 1–3 sizes in each of 4 runs with the default and at
//! none in 3 runs with the short slice (`ringside bench --backend gloo --peer
//! torch --repeat 3 -b 4 -e 1M|64M -f 4 --load 16`, taken in turn, 2026-11-28
//! 16:55–17:09 UTC; 0.24–0.67× torch's gloo there, against up to 32× with the
//! default). Calls on the worker, 1 MiB and up, did not change there: 1 MiB
//! took one or two ticks in all 7 runs, either way, and 4 MiB two in the 3 that
//! measured it: not the slice's, nor the worker's (without the worker they
//! stalled alike), but Gloo's loop yielding its CPU to a busy loop while the
//! lock holder ran on another, mended since ([`loop_yield`], "Only where the
//! holder may wait behind the loop"). On the 2-core EPYC VM
//! (17:10–17:45 UTC, `--load 2`, 6 runs each way in turn, medians per size):
//! 16 MiB 19.6 against 29.3 ms, 64 MiB 81 against 89, but 1 MiB 1.37 against
//! 1.23 and 4 MiB 6.1 against 5.1; every size at most 1.0× torch's in 3 of 6
//! runs with it and 2 of 6 without; idle alike (2 runs each). The slice
//! changes when a thread runs, not how much: its share stays its weight's.
//! A 2026-11-27 trial on the Xeon VM (2 cores, where the default slice is
//! 1.4 ms) had found no gain, which is why it waited until a larger machine
//! showed what it is for. `RINGSIDE_GLOO_SLICE=off` (or a number of µs) for
//! an A/B.
//!
//! **Placement.** When the launcher says where a rank sits on its host
//! ([`Options::local_rank`] and [`Options::per_node`], which
//! [`crate::job::options`] sets), the host's ranks fit its CPUs, and the ranks
//! share a scheduling group (`mpirun`'s ranks share its session), the rank's
//! thread is bound to a share of the CPUs of its own before Gloo's loop thread
//! and the worker start, so all three run there, until the communicator goes
//! (`sys::affinity`, the rule the shared-memory transport follows;
//! `RINGSIDE_BIND=none` opts out). Only with [`loop_yield`] in place: Gloo's
//! loop as shipped spins on a core it shares with the thread it waits for.
//! A rank that is a scheduling group of its own (`sys::autogroup`:
//! torchrun's ranks and ringside's launcher's, each in a session of its own)
//! stays unbound. There the kernel gives each rank a fair share beside every
//! other program, and a bound rank can spend it on its own core only: beside
//! two busy loops the two bound ranks got 0.74–0.83 of the 2 cores and the
//! loops 1.16–1.25 (6 s of a 16 MiB phase, `/proc/<pid>/stat`, 2 runs), and
//! in 6 alternating runs each of `bench --backend gloo --peer torch --repeat 3
//! -b 4 -e 64M -f 4 --load 2` under the own launcher (2026-11-28, 03:44–03:55
//! UTC) the worst ratio to torch's gloo was 1.24–1.64 bound (over 1.0 at 4, 16
//! or 64 MiB in 6 of 6 runs) and 0.84–1.36 unbound (over 1.0 in 3 of 6: 1.34
//! and 1.36 at 16 MiB, 1.0005 at 64 MiB); idle, 0.72 and 0.72 against 0.76 and
//! 0.77 (2 runs each).
//!
//! Why bound ranks in one group do so much better under load (worst ratio
//! 0.64–0.76 in 7 of 7 such runs that day: 2 under `mpirun --bind-to none`, 5
//! under the own launcher with the whole job moved into one session for the
//! test; 0.84 and 1.16 unbound): they take the cores. Over 6 s of a 16 MiB
//! phase the two ranks used 1.84–1.87 of the 2 cores and the two busy loops
//! 0.11–0.14, although the scheduler's own figures
//! (`/sys/kernel/debug/sched/debug`) gave the job's group a weight of 483–609
//! on each CPU against each loop's 1024, a third of a core. That is this
//! kernel's scheduler (6.18, EEVDF) giving the group far more than its
//! weight (why was not traced further), not a fair share, so ringside's
//! launcher does not put a job's ranks in one session to get it; `mpirun`
//! does, and binds by default, for every MPI program alike.
//!
//! Measured earlier on 2026-11-28 on the 2-core Xeon VM, when every rank
//! with a known place was bound, in-place medians, bound against
//! `RINGSIDE_BIND=none` in turn:
//!
//! | | 1 MiB | 4 MiB | 16 MiB | 64 MiB |
//! |---|---|---|---|---|
//! | own launcher, idle (4 rounds each) | 0.33–0.46 / 0.45–0.63 ms | 1.28–1.63 / 1.32–1.73 | 4.9–6.7 / 5.4–6.7 | 25–36 / 28–31 |
//! | own launcher, `--load 2` (5 each) | 0.33–0.49 / 0.49–0.57 | 1.2–2.9 / 1.6–2.9 | 12.5–20.5 / 5.0–16.6 | 72–82 / 53–93 |
//! | `mpirun`, `--load 2` (`--bind-to core` / `none`, 6 each) | 0.48–0.56 / 0.57–0.85 | 1.5–1.7 / 2.4–3.0 | 5.8–7.1 / 6.9–10.4 | 31–36 / 43–55 |
//!
//! 4 B–256 KiB measured alike either way under the own launcher (4 rounds,
//! `--load 2`), and 50–90 against 60–160 µs under `mpirun`. What binding
//! changes under load is how the kernel shares the cores. Under the own
//! launcher (a scheduler group per rank) the bound ranks got about 40 % of a
//! core each and the two busy loops about 58 % each, every time; unbound, the
//! kernel at times packed both loops onto one core and gave the ranks the
//! other (about 48 % each), at times not. Under `mpirun` (both ranks in one
//! group) the bound ranks took 85–95 % of each core and the busy loops got
//! 4–18 % (28–45 % with the ranks unbound): a job bound this way, as `mpirun`
//! binds by default, takes the cores from other programs on the machine.
//! With the ranks bound, a 100 µs EEVDF slice for every rank thread
//! (`sched_setattr`; the default here is 1.4 ms) measured within noise under
//! the own launcher and `--load 2` (6 rounds each, medians: 16 MiB 16.5 against
//! 16.0 ms, 64 MiB 70 against 76), so it was not kept.

mod close_on_exec;
mod got;
pub mod loop_yield;
pub mod preload;
mod socket_options;
mod worker;

use crate::sys::{affinity, slice};

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::checks::{self, blocked_count, gather_count, input_bytes, per_rank};
use super::scratch::area;
use crate::algorithms::Algo;
use crate::backends::Options;
use crate::buffer::{Buffer, BufferMut};
use crate::copy::copy;
use crate::element::{ReduceOp, finish_avg};
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::{Backend, Communicator, Input};

const B: Backend = Backend::Gloo;

#[cxx::bridge(namespace = "ringside_gloo")]
mod ffi {
    extern "Rust" {
        type Kv<'a>;
        fn kv_set(kv: &Kv<'_>, key: &CxxString, value: &[u8]) -> Result<()>;
        fn kv_get(kv: &Kv<'_>, key: &CxxString) -> Result<Vec<u8>>;
        /// `crate::copy::copy` for the shim's staging copies.
        fn copy_bytes(dst: &mut [u8], src: &[u8]);
    }

    unsafe extern "C++" {
        include!("collectives/src/backends/gloo/shim.h");

        type Comm;

        fn connect<'a>(
            kv: &Kv<'a>,
            rank: i32,
            size: i32,
            iface: &str,
            hostname: &str,
            timeout_ms: i64,
            classic: bool,
        ) -> Result<UniquePtr<Comm>>;
        fn all_reduce(
            self: Pin<&mut Comm>,
            buf: &mut [u8],
            dtype: u8,
            op: u8,
            algo: u8,
            segment_bytes: u64,
            tag: u32,
        ) -> Result<()>;
        fn broadcast(self: Pin<&mut Comm>, buf: &mut [u8], root: i32, tag: u32) -> Result<()>;
        fn reduce(
            self: Pin<&mut Comm>,
            buf: &mut [u8],
            dtype: u8,
            op: u8,
            root: i32,
            tag: u32,
        ) -> Result<()>;
        fn all_gather(
            self: Pin<&mut Comm>,
            input: &[u8],
            output: &mut [u8],
            tag: u32,
        ) -> Result<()>;
        fn all_to_all(
            self: Pin<&mut Comm>,
            input: &[u8],
            output: &mut [u8],
            tag: u32,
        ) -> Result<()>;
        fn gather(
            self: Pin<&mut Comm>,
            input: &[u8],
            output: &mut [u8],
            root: i32,
            tag: u32,
        ) -> Result<()>;
        fn scatter(
            self: Pin<&mut Comm>,
            input: &[u8],
            output: &mut [u8],
            root: i32,
            tag: u32,
        ) -> Result<()>;
        fn barrier(self: Pin<&mut Comm>, tag: u32) -> Result<()>;
        fn send(self: Pin<&mut Comm>, buf: &[u8], peer: i32) -> Result<()>;
        fn recv(self: Pin<&mut Comm>, buf: &mut [u8], peer: i32) -> Result<()>;
    }
}

// SAFETY: a Gloo context is not tied to the thread that created it; it is only
// unsafe to use from two threads at once, and `GlooComm` keeps it behind a Mutex.
unsafe impl Send for ffi::Comm {}

/// Our store as Gloo's rendezvous sees it (only alive during [`connect`]).
pub struct Kv<'a> {
    store: &'a dyn Store,
    prefix: String,
    /// The first store error, kept typed (a C++ exception would flatten it).
    first_error: Mutex<Option<Error>>,
}

impl Kv<'_> {
    fn keep(&self, e: Error) -> String {
        let msg = e.to_string();
        if let Ok(mut slot) = self.first_error.lock() {
            slot.get_or_insert(e);
        }
        msg
    }
}

fn kv_set(kv: &Kv<'_>, key: &cxx::CxxString, value: &[u8]) -> std::result::Result<(), String> {
    let key = format!("{}{}", kv.prefix, key.to_string_lossy());
    kv.store.set(&key, value).map_err(|e| kv.keep(e))
}

fn kv_get(kv: &Kv<'_>, key: &cxx::CxxString) -> std::result::Result<Vec<u8>, String> {
    let key = format!("{}{}", kv.prefix, key.to_string_lossy());
    kv.store.get(&key).map_err(|e| kv.keep(e))
}

/// The shim's staging copies (the classic algorithms' work buffers), made by
/// [`copy`] so that they miss glibc's slow `rep movsb` case as every other
/// hot copy does. The shim passes equal lengths; a mismatch copies the shorter
/// (a panic here would abort the process).
fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    copy(&mut dst[..n], &src[..n]);
}

/// Which Gloo all_reduce runs (codes shared with the shim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlooAlgo {
    /// `gloo::allreduce` with `Algorithm::BCUBE` below [`BCUBE_BELOW`] bytes,
    /// Gloo's own choice (its ring) from there.
    Default = 0,
    /// `gloo::allreduce` with `Algorithm::RING`.
    Ring = 1,
    /// `gloo::AllreduceRingChunked` (a classic algorithm object).
    RingChunked = 2,
    /// `gloo::AllreduceHalvingDoubling` (a classic algorithm object).
    HalvingDoubling = 3,
    /// `gloo::allreduce` with `Algorithm::BCUBE`.
    Bcube = 4,
}

/// Below this many bytes the default all_reduce is Gloo's `bcube`, from here
/// Gloo's ring (what torch.distributed's gloo always runs).
///
/// Why: a small call's time is its messages' wake-ups, not its bytes. At
/// world 2 Gloo's ring sends four messages per rank (the buffer cut into
/// 2 × world segments, each passed on in the reduce-scatter and again in the
/// all-gather) where bcube sends two (half the buffer each way, then the
/// reduced half back). Under load each message wakes two threads (Gloo's loop,
/// then the caller), and a woken thread may wait behind a busy program: on the
/// 2-core Xeon VM on 2026-11-27, `/proc/<tid>/schedstat` of every rank thread
/// during back-to-back 256 B calls beside two busy loops showed each thread
/// woken once per message and waiting 40–66 µs for a core each time; the
/// calls took 210–240 µs. `bench --backend gloo --peer torch -b 4 -e 64M -f 4
/// --load 2`, 4 alternating runs of each build: at 16 B–64 KiB bcube took
/// 44–52 µs in 3 runs (180–215 in one), the ring 67–77 in 1 run (183–241 in
/// 3); a size from 4 B to 256 KiB over 1.0× torch's time in 2 runs of 4 with
/// bcube (a 4 ms stall at 4 KiB, 1.03 at 16 KiB), in 3 of 4 with the ring (1
/// to 6 sizes each). Idle, the two were alike up to 256 KiB; at 1 MiB bcube
/// was slower (602–617 against 524–548 µs in 3 runs of `-b 16K -e 1M`: it
/// allocates a whole-buffer scratch per call), hence the limit.
pub const BCUBE_BELOW: usize = 512 << 10;

/// The default all_reduce's ring passes the buffer on in segments of at most
/// this many bytes: Gloo's own limit, which PyTorch keeps (set explicitly, so
/// the choice and its history stay in one place).
///
/// Gloo's ring cuts a buffer into max(bytes / segment, 2 × world) segments
/// and waits for each, so the limit changes calls from 8 MiB at world 2
/// (a 4 MiB call is cut into four 1 MiB segments either way). From
/// 2026-11-27 until later that day the limit here was 4 MiB: fewer waits per
/// call measured faster idle (`bench --backend gloo --peer torch --repeat 3
/// -b 4M -e 64M -f 2`, 4 alternating runs each: 8–64 MiB 0.78–0.91× torch's
/// against 0.89–1.07×), and alike or better under `--load 2`. Those runs had
/// Gloo's loop spinning on the pair lock while the worker wrote
/// ([`loop_yield`]), which larger segments met less often. With the loop
/// fixed, 1 MiB is as fast or faster (2-core Xeon VM, a scratch build with
/// the limit from the environment, taken in turn, in-place medians):
///
/// | where | 16 MiB: 4 MiB / 1 MiB segments | 64 MiB: 4 MiB / 1 MiB |
/// |---|---|---|
/// | idle, own launcher (4 runs each) | 7.7 / 7.5 ms | 44.8 (43.5–45.2) / 39.1 (35.7–40.3) ms |
/// | `--load 2`, own launcher (6 each) | 9 / 7.5 | 66.5 (56–82) / 55 (37–76) |
/// | `--load 2`, under `mpirun` (6 each) | 9.5 / 9.5 | 57.5 (48–98) / 44.5 (38–53) |
///
/// Under `mpirun` (both ranks in one scheduler group) the ranks' share of
/// the two cores during 64 MiB calls was 60–97 % with 4 MiB segments and
/// 84–155 % with 1 MiB (`/proc/<tid>/schedstat`, one-second samples).
///
/// The cost, not settled: against the torch peer under `--load 2` and the own
/// launcher (`bench --backend gloo --peer torch --repeat 3 -b 4 -e 64M -f 4`),
/// 16 MiB was over torch's time in 3 of 5 runs with 1 MiB segments (1.17,
/// 1.27, 1.77) and at 0.83–1.06 in 4 runs with 4 MiB; the main job's tour
/// under `mpirun` had 64 MiB at 0.94 and 1.02 with 1 MiB, 1.26–1.62 in 3
/// tours with 4 MiB.
pub const SEGMENT_BYTES: u64 = 1 << 20;

impl GlooAlgo {
    /// The algorithm a call on `count` elements of `bytes` bytes in all runs
    /// among `world` ranks: [`GlooAlgo::Default`] becomes bcube below
    /// [`BCUBE_BELOW`] bytes, except on fewer than 2 × world elements, where
    /// most of the ring's segments are empty and it skips them (at world 2 a
    /// single element is one message each way, where bcube still sends its
    /// empty half: 4 B took 22–25 µs on the ring against 44–45 on bcube under
    /// two busy loops, 74–89 against 158–173 idle). An algorithm asked for
    /// stays.
    pub fn for_call(self, count: usize, world: usize, bytes: usize) -> GlooAlgo {
        match self {
            GlooAlgo::Default if bytes < BCUBE_BELOW && count >= 2 * world => GlooAlgo::Bcube,
            asked => asked,
        }
    }

    /// The most bytes Gloo's ring passes on in one piece for a call run by
    /// this algorithm: [`SEGMENT_BYTES`] for the default, 0 (Gloo's own
    /// 1 MiB, what PyTorch runs) for an algorithm asked for.
    pub fn segment_bytes(self) -> u64 {
        match self {
            GlooAlgo::Default => SEGMENT_BYTES,
            _ => 0,
        }
    }

    /// Whether this is one of Gloo's classic algorithm objects.
    pub fn is_classic(self) -> bool {
        matches!(self, GlooAlgo::RingChunked | GlooAlgo::HalvingDoubling)
    }

    /// Parses `ring`, `ring_chunked`, `halving_doubling`, `bcube` or `default`.
    pub fn parse(s: &str) -> Option<GlooAlgo> {
        Some(match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "ring" => GlooAlgo::Ring,
            "ring_chunked" => GlooAlgo::RingChunked,
            "halving_doubling" | "hd" => GlooAlgo::HalvingDoubling,
            "bcube" => GlooAlgo::Bcube,
            "default" | "auto" => GlooAlgo::Default,
            _ => return None,
        })
    }

    /// The closest match to `algo` when one was asked for (`--algo`, or
    /// `RINGSIDE_ALGO`), else `RINGSIDE_GLOO_ALGO` if set, else Gloo's
    /// default: a flag wins over an environment variable, as every other
    /// `RINGSIDE_*` variable loses to its flag.
    pub fn choose(algo: Algo) -> Result<GlooAlgo> {
        Ok(match algo {
            Algo::Ring => GlooAlgo::Ring,
            Algo::RingChunked => GlooAlgo::RingChunked,
            Algo::HalvingDoubling => GlooAlgo::HalvingDoubling,
            Algo::Bcube => GlooAlgo::Bcube,
            Algo::RecursiveDoubling | Algo::Tree | Algo::Hierarchical => GlooAlgo::Default,
            Algo::Auto => match std::env::var("RINGSIDE_GLOO_ALGO") {
                Ok(s) => GlooAlgo::parse(&s).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "RINGSIDE_GLOO_ALGO={s:?}: expected ring, ring_chunked, halving_doubling, bcube or default"
                    ))
                })?,
                Err(_) => GlooAlgo::Default,
            },
        })
    }
}

/// Connects a Gloo communicator among `world` ranks sharing `store`.
pub fn connect(
    store: &dyn Store,
    rank: usize,
    world: usize,
    opts: &Options,
) -> Result<Box<dyn Communicator>> {
    Ok(Box::new(GlooComm::connect(store, rank, world, opts)?))
}

/// A communicator backed by Gloo.
pub struct GlooComm {
    rank: usize,
    world: usize,
    algo: GlooAlgo,
    timeout: Duration,
    inner: Mutex<Inner>,
    /// Where Gloo calls on 1 MiB and more run (`worker.rs` says why).
    worker: worker::Worker,
    /// The rank's CPU binding, undone when the communicator goes (dropped
    /// after the worker and Gloo's context, whose threads it covered).
    _binding: Option<affinity::Binding>,
    /// The caller's shorter scheduler slice, put back when the communicator
    /// goes (Gloo's threads and the worker inherited it: [`short_slice`]).
    _slice: Option<slice::Slice>,
}

struct Inner {
    comm: cxx::UniquePtr<ffi::Comm>,
    seq: u32,
    broken: Option<String>,
    scratch: Vec<u64>,
}

/// Gloo's classic algorithms count elements in `int`.
fn fits_int(count: usize, what: &str) -> Result<()> {
    if i32::try_from(count).is_err() {
        return Err(Error::Unsupported {
            backend: B,
            what: format!("{what} of {count} elements (Gloo counts in 32-bit int)"),
        });
    }
    Ok(())
}

/// The shim's op code: Sum, Prod, Min, Max as 0–3 (`Avg` sums).
fn op_code(op: ReduceOp) -> u8 {
    op.combining().code()
}

impl GlooComm {
    /// Rendezvous through `store` and connect Gloo's TCP full mesh.
    pub fn connect(
        store: &dyn Store,
        rank: usize,
        world: usize,
        opts: &Options,
    ) -> Result<GlooComm> {
        if world == 0 || rank >= world || i32::try_from(world).is_err() {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} of world {world} is not a valid position"
            )));
        }
        let algo = GlooAlgo::choose(opts.algo)?;
        let iface = std::env::var("GLOO_SOCKET_IFNAME").unwrap_or_default();
        let hostname = opts.listen_ip.to_string();
        let classic = algo.is_classic();
        let kv = Kv {
            store,
            prefix: format!("{}gloo/", opts.prefix),
            first_error: Mutex::new(None),
        };
        let ms = i64::try_from(opts.timeout.as_millis()).unwrap_or(i64::MAX);
        // Before Gloo's loop threads start. Where it cannot be done Gloo runs
        // as shipped, spin and all (`loop_yield` says when), which is no
        // reason to refuse the job.
        let yielding = loop_yield::install().is_ok();
        // Before any binding below narrows them: the CPUs the host's ranks share.
        let host_cpus = affinity::allowed_cpus().map_or(1, |c| c.len());
        loop_yield::plan(opts.per_node.unwrap_or(world), host_cpus);
        // Before Gloo opens a descriptor, so that none of them outlives the
        // rank in a program it starts (`close_on_exec`). Where it cannot be
        // done they stay inheritable, as Gloo ships them.
        let _ = close_on_exec::install();
        // Before Gloo connects and sends: its send buffers never shrink to a
        // few KiB, where two small messages in a row wait out the peer's
        // delayed ACK, and its connections inside the host leave BBR
        // (`socket_options`). Where it cannot be done Gloo sets them as shipped.
        let _ = socket_options::install();
        // Also before they start, so that they inherit it: the rank's caller
        // and Gloo threads on the rank's own CPUs ("Placement" above). Not
        // with Gloo's loop as shipped, which spins on a core it shares with
        // the thread it waits for, nor in a rank that is a scheduling group of
        // its own, which bound could use its fair share on one core only.
        let binding = affinity::bind_in_shared_group(place_to_bind(opts, yielding));
        // Before Gloo's threads and the worker start, so that they inherit it.
        let slice = short_slice()?;
        // On the rank's own thread, so that Gloo's event-loop threads keep the
        // rank's priority, as in PyTorch: see "Gloo's threads" above for what
        // running them nicer cost.
        let comm = ffi::connect(
            &kv,
            rank as i32,
            world as i32,
            &iface,
            &hostname,
            ms,
            classic,
        )
        .map_err(|e| {
            let stored = kv.first_error.lock().ok().and_then(|mut s| s.take());
            stored.unwrap_or_else(|| gloo_error(&e, opts.timeout))
        })?;
        // (An error above drops `binding`, which undoes it.)
        let worker = worker::Worker::start()?;
        Ok(GlooComm {
            _binding: binding,
            _slice: slice,
            worker,
            rank,
            world,
            algo,
            timeout: opts.timeout,
            inner: Mutex::new(Inner {
                comm,
                seq: 0,
                broken: None,
                scratch: Vec::new(),
            }),
        })
    }

    /// The all_reduce algorithm in use.
    pub fn algo(&self) -> GlooAlgo {
        self.algo
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        super::guard::lock_usable(&self.inner, |g| g.broken.as_deref())
    }

    fn check_root(&self, root: usize) -> Result<i32> {
        checks::check_root(root, self.world)?;
        Ok(root as i32)
    }

    /// Runs one collective with the next tag; any error from Gloo marks the
    /// communicator broken (Gloo's state after an exception is unknown).
    fn run(
        &self,
        bytes: usize,
        body: impl FnOnce(&mut Inner, u32) -> std::result::Result<Result<()>, cxx::Exception>,
    ) -> Result<()> {
        let mut g = self.lock()?;
        g.seq = g.seq.wrapping_add(1);
        let seq = g.seq;
        let inner: &mut Inner = &mut g;
        let step = self.call(bytes, || body(inner, seq));
        self.settle(&mut g, step)
    }

    /// Runs `f`, which calls into Gloo on a buffer of `bytes`: on the worker
    /// thread from [`worker::FROM_BYTES`] up, else on the caller's (see
    /// `worker.rs` for why).
    fn call(&self, bytes: usize, f: impl FnOnce() -> Step) -> Result<Step> {
        if bytes < worker::FROM_BYTES {
            return Ok(f());
        }
        let f = AssertSend(f);
        self.worker.call(move || f.into_inner()())
    }

    /// What a Gloo call's outcome means for the caller; any error from Gloo
    /// marks the communicator broken (Gloo's state after an exception is
    /// unknown), and so does a panic on the worker.
    fn settle(&self, g: &mut Inner, step: Result<Step>) -> Result<()> {
        match step {
            Ok(Ok(res)) => res,
            Ok(Err(e)) => {
                let err = gloo_error(&e, self.timeout);
                g.broken = Some(err.to_string());
                Err(err)
            }
            Err(panicked) => {
                g.broken = Some(panicked.to_string());
                Err(panicked)
            }
        }
    }
}

/// Gloo reports timeouts as exceptions saying "Timed out"; keep them typed.
fn gloo_error(e: &cxx::Exception, after: Duration) -> Error {
    let msg = e.what();
    let lower = msg.to_ascii_lowercase();
    if lower.contains("timed out") || lower.contains("timeout") {
        Error::Timeout {
            what: format!("gloo ({msg})"),
            after,
        }
    } else {
        Error::Protocol(format!("gloo: {msg}"))
    }
}

/// A validated call: `Err(Error)` before any communication, else the body's result.
type Step = std::result::Result<Result<()>, cxx::Exception>;

/// Turns a validation failure into the `run` body's shape.
macro_rules! check {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        }
    };
}

impl Communicator for GlooComm {
    fn backend(&self) -> Backend {
        B
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce(&self, input: Input<'_>, output: &mut BufferMut<'_>, op: ReduceOp) -> Result<()> {
        let (n, algo) = (self.world, self.algo);
        self.run(output.byte_len(), |g, tag| -> Step {
            let (dtype, count) = (output.dtype(), output.len());
            let src = check!(input_bytes(B, &input, dtype, count, "all_reduce"));
            let out = check!(output.host_bytes_mut(B));
            if algo.is_classic() {
                check!(fits_int(count, "all_reduce"));
            }
            if let Some(s) = src {
                copy(out, s);
            }
            if count == 0 || n == 1 {
                return Ok(Ok(()));
            }
            let algo = algo.for_call(count, n, out.len());
            g.comm.pin_mut().all_reduce(
                out,
                dtype.code(),
                op_code(op),
                algo as u8,
                algo.segment_bytes(),
                tag,
            )?;
            if op == ReduceOp::Avg {
                finish_avg(dtype, out, n);
            }
            Ok(Ok(()))
        })
    }

    fn broadcast(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        let me = self.rank;
        self.run(output.byte_len(), |g, tag| -> Step {
            let r = check!(self.check_root(root));
            let (dtype, count) = (output.dtype(), output.len());
            let src = if me == root {
                check!(input_bytes(B, &input, dtype, count, "broadcast"))
            } else {
                None
            };
            let out = check!(output.host_bytes_mut(B));
            if let Some(s) = src {
                copy(out, s);
            }
            if count == 0 || self.world == 1 {
                return Ok(Ok(()));
            }
            g.comm.pin_mut().broadcast(out, r, tag)?;
            Ok(Ok(()))
        })
    }

    fn reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(output.byte_len(), |g, tag| -> Step {
            let r = check!(self.check_root(root));
            let dtype = output.dtype();
            let count = match &input {
                Input::Buffer(b) => b.len(),
                Input::InPlace => output.len(),
            };
            if me == root && output.len() != count {
                return Ok(Err(Error::InvalidArgument(format!(
                    "reduce: root output has {} elements, input {count}",
                    output.len()
                ))));
            }
            let src = check!(input_bytes(B, &input, dtype, count, "reduce"));
            let out = check!(output.host_bytes_mut(B));
            let bytes = count * dtype.size();
            if me == root {
                if let Some(s) = src {
                    copy(out, s);
                }
                if count == 0 || n == 1 {
                    return Ok(Ok(()));
                }
                g.comm
                    .pin_mut()
                    .reduce(out, dtype.code(), op_code(op), r, tag)?;
                if op == ReduceOp::Avg {
                    finish_avg(dtype, out, n);
                }
            } else {
                if count == 0 {
                    return Ok(Ok(()));
                }
                // Gloo uses every rank's buffer as working space; non-roots
                // work in scratch so the caller's buffers stay as they were.
                let Inner { comm, scratch, .. } = g;
                let work = area(scratch, bytes);
                copy(work, src.unwrap_or(&out[..bytes.min(out.len())]));
                comm.pin_mut()
                    .reduce(work, dtype.code(), op_code(op), r, tag)?;
            }
            Ok(Ok(()))
        })
    }

    fn all_gather(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(output.byte_len(), |g, tag| -> Step {
            let dtype = output.dtype();
            let count = check!(per_rank(output.len(), n, "all_gather output"));
            let src = check!(input_bytes(B, &input, dtype, count, "all_gather"));
            let out = check!(output.host_bytes_mut(B));
            let bytes = count * dtype.size();
            let mine = me * bytes..(me + 1) * bytes;
            if count == 0 || n == 1 {
                if let Some(s) = src {
                    copy(&mut out[mine], s);
                }
                return Ok(Ok(()));
            }
            let Inner { comm, scratch, .. } = g;
            let s = match src {
                Some(s) => s,
                None => {
                    // In place: Gloo's input may not alias its output.
                    let own = area(scratch, bytes);
                    copy(own, &out[mine]);
                    own
                }
            };
            comm.pin_mut().all_gather(s, out, tag)?;
            Ok(Ok(()))
        })
    }

    fn reduce_scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(output.byte_len() * n, |g, tag| -> Step {
            let dtype = output.dtype();
            let count = check!(blocked_count(&input, output.len(), n, "reduce_scatter"));
            let src = check!(input_bytes(B, &input, dtype, n * count, "reduce_scatter"));
            let out = check!(output.host_bytes_mut(B));
            let bytes = count * dtype.size();
            let mine = me * bytes..(me + 1) * bytes;
            let Inner { comm, scratch, .. } = g;
            // Block r is reduced to rank r, in a scratch copy of the whole
            // input (Gloo's reduce uses every rank's buffer as working space).
            let work = area(scratch, n * bytes);
            copy(work, src.unwrap_or(out));
            if count > 0 && n > 1 {
                for (r, block) in work.chunks_exact_mut(bytes).enumerate() {
                    comm.pin_mut()
                        .reduce(block, dtype.code(), op_code(op), r as i32, tag)?;
                }
            }
            let dst = match src {
                Some(_) => &mut out[..],
                None => &mut out[mine.clone()],
            };
            copy(dst, &work[mine]);
            if op == ReduceOp::Avg {
                finish_avg(dtype, dst, n);
            }
            Ok(Ok(()))
        })
    }

    fn all_to_all(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let n = self.world;
        self.run(output.byte_len(), |g, tag| -> Step {
            let dtype = output.dtype();
            let count = check!(per_rank(output.len(), n, "all_to_all output"));
            let src = check!(input_bytes(B, &input, dtype, n * count, "all_to_all"));
            let out = check!(output.host_bytes_mut(B));
            if count == 0 || n == 1 {
                if let Some(s) = src {
                    copy(out, s);
                }
                return Ok(Ok(()));
            }
            let Inner { comm, scratch, .. } = g;
            let s = match src {
                Some(s) => s,
                None => {
                    let sent = area(scratch, out.len());
                    copy(sent, out);
                    sent
                }
            };
            comm.pin_mut().all_to_all(s, out, tag)?;
            Ok(Ok(()))
        })
    }

    fn gather(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(output.byte_len(), |g, tag| -> Step {
            let r = check!(self.check_root(root));
            let dtype = output.dtype();
            let count = check!(gather_count(&input, output.len(), n, me == root));
            let src = check!(input_bytes(B, &input, dtype, count, "gather"));
            let out = check!(output.host_bytes_mut(B));
            let bytes = count * dtype.size();
            let mine = me * bytes..(me + 1) * bytes;
            if count == 0 || n == 1 {
                if let (Some(s), true) = (src, me == root) {
                    copy(&mut out[mine], s);
                }
                return Ok(Ok(()));
            }
            let Inner { comm, scratch, .. } = g;
            let s = match src {
                Some(s) => s,
                None => {
                    let own = area(scratch, bytes);
                    copy(own, &out[mine]);
                    own
                }
            };
            comm.pin_mut().gather(s, out, r, tag)?;
            Ok(Ok(()))
        })
    }

    fn scatter(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(output.byte_len(), |g, tag| -> Step {
            let r = check!(self.check_root(root));
            let dtype = output.dtype();
            let count = check!(blocked_count(&input, output.len(), n, "scatter"));
            let src = if me == root {
                check!(input_bytes(B, &input, dtype, n * count, "scatter"))
            } else {
                None
            };
            let out = check!(output.host_bytes_mut(B));
            let bytes = count * dtype.size();
            let mine = me * bytes..(me + 1) * bytes;
            let in_place = matches!(input, Input::InPlace);
            if count == 0 || n == 1 {
                if let Some(s) = src {
                    copy(out, &s[mine]);
                }
                return Ok(Ok(()));
            }
            let Inner { comm, scratch, .. } = g;
            if in_place {
                // Send from a copy: the root's own block is both a source and
                // the destination.
                let sent = area(scratch, if me == root { out.len() } else { 0 });
                copy(sent, if me == root { &out[..] } else { &[] });
                comm.pin_mut().scatter(sent, &mut out[mine], r, tag)?;
            } else {
                comm.pin_mut().scatter(src.unwrap_or(&[]), out, r, tag)?;
            }
            Ok(Ok(()))
        })
    }

    fn barrier(&self) -> Result<()> {
        let n = self.world;
        self.run(0, |g, tag| -> Step {
            if n > 1 {
                g.comm.pin_mut().barrier(tag)?;
            }
            Ok(Ok(()))
        })
    }

    fn send(&self, buf: &Buffer<'_>, peer: usize) -> Result<()> {
        self.point_to_point(peer, buf.byte_len(), |comm| {
            let bytes = check!(buf.host_bytes(B));
            if !bytes.is_empty() {
                comm.pin_mut().send(bytes, peer as i32)?;
            }
            Ok(Ok(()))
        })
    }

    fn recv(&self, buf: &mut BufferMut<'_>, peer: usize) -> Result<()> {
        self.point_to_point(peer, buf.byte_len(), |comm| {
            let bytes = check!(buf.host_bytes_mut(B));
            if !bytes.is_empty() {
                comm.pin_mut().recv(bytes, peer as i32)?;
            }
            Ok(Ok(()))
        })
    }
}

impl GlooComm {
    /// Send/recv involve only two ranks, so they take no collective tag.
    fn point_to_point(
        &self,
        peer: usize,
        bytes: usize,
        body: impl FnOnce(&mut cxx::UniquePtr<ffi::Comm>) -> Step,
    ) -> Result<()> {
        if peer >= self.world || peer == self.rank {
            return Err(Error::InvalidArgument(format!(
                "peer {peer} is not another rank of this world of {}",
                self.world
            )));
        }
        let mut g = self.lock()?;
        let comm = &mut g.comm;
        let step = self.call(bytes, || body(comm));
        self.settle(&mut g, step)
    }
}

/// Lets a Gloo call's closure, which borrows the caller's buffers (views that
/// hold raw pointers, so not `Send`), run on the worker thread.
struct AssertSend<F>(F);

// SAFETY: the buffers are host memory borrowed for the call, and the caller is
// blocked in `Worker::call` until the closure has finished, so exactly one
// thread touches them at any time, as with a scoped thread. Device buffers are
// refused before any Gloo call (`host_bytes` / `host_bytes_mut`).
unsafe impl<F> Send for AssertSend<F> {}

impl<F> AssertSend<F> {
    /// A method, not a field access: a closure that named `.0` would capture
    /// only the field, which is not `Send`.
    fn into_inner(self) -> F {
        self.0
    }
}

/// The rank's place on its host (local rank, ranks on the host) when its
/// Gloo threads may be bound there ("Placement" in the module docs): the
/// place is known and Gloo's loop yields instead of spinning (`yielding`).
/// [`affinity::bind_in_shared_group`] then binds only a rank that shares its
/// scheduling group with the job's other ranks.
fn place_to_bind(opts: &Options, yielding: bool) -> Option<(usize, usize)> {
    match (opts.local_rank, opts.per_node) {
        (Some(local), Some(on_host)) if yielding => Some((local, on_host)),
        _ => None,
    }
}

/// The slice Gloo's threads ask the scheduler for: `RINGSIDE_GLOO_SLICE`
/// (microseconds, or `off` for the kernel's default, for an A/B; anything else
/// is an error), else [`slice::SHORTEST`], 100 µs. Every hand-off of a Gloo
/// call wakes a thread (the loop for a message, the caller or the worker for
/// its end); beside busy programs a woken thread with the default slice waits
/// for theirs to end (`sys::slice` says why and how long). Best effort: where
/// the kernel refuses, Gloo runs with the default.
fn short_slice() -> Result<Option<slice::Slice>> {
    let asked = std::env::var("RINGSIDE_GLOO_SLICE").ok();
    let slice = match asked.as_deref().map(str::trim) {
        Some("off") => return Ok(None),
        Some(us) => Duration::from_micros(us.parse().map_err(|_| {
            Error::InvalidArgument(format!(
                "RINGSIDE_GLOO_SLICE={us:?}: expected microseconds (e.g. 100) or `off`"
            ))
        })?),
        None => slice::SHORTEST,
    };
    Ok(slice::Slice::shorten(slice).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::MemStore;

    /// `n` Gloo ranks on threads of this process, each running `f` on its
    /// communicator.
    pub(super) fn world(n: usize, f: impl Fn(&GlooComm) + Sync) {
        let store = MemStore::new(Duration::from_secs(20));
        let mut opts = Options::new([0; 16]).unwrap();
        opts.timeout = Duration::from_secs(20);
        std::thread::scope(|s| {
            for r in 0..n {
                let (store, opts, f) = (&store, &opts, &f);
                s.spawn(move || {
                    let c = GlooComm::connect(store, r, n, opts).unwrap();
                    f(&c);
                });
            }
        });
    }

    /// Regression (16-core node beside 16 busy loops): with the kernel's
    /// default slice a woken Gloo thread waited out a busy program's, a 4 ms
    /// tick, at small calls. The caller and the worker (and Gloo's loop
    /// threads, started in between) run with the short slice while the
    /// communicator lives, and the caller's own comes back after it.
    #[test]
    fn gloo_threads_run_with_a_short_slice_and_the_caller_gets_its_own_back() {
        if std::env::var_os("RINGSIDE_GLOO_SLICE").is_some() {
            eprintln!("skipped: RINGSIDE_GLOO_SLICE is set");
            return;
        }
        // Asked on a thread of its own, so that a kernel that keeps no slice
        // per thread skips the test rather than hiding a missing one.
        let kept = std::thread::spawn(|| {
            let asked = slice::Slice::shorten(slice::SHORTEST);
            asked.is_ok() && slice::current() == Some(slice::SHORTEST)
        })
        .join()
        .unwrap();
        if !kept {
            eprintln!("skipped: this kernel keeps no scheduler slice per thread (before 6.12)");
            return;
        }
        let store = MemStore::new(Duration::from_secs(20));
        let mut opts = Options::new([0; 16]).unwrap();
        opts.timeout = Duration::from_secs(20);
        std::thread::scope(|s| {
            for r in 0..2 {
                let (store, opts) = (&store, &opts);
                s.spawn(move || {
                    let before = slice::current();
                    let c = GlooComm::connect(store, r, 2, opts).unwrap();
                    let caller = slice::current();
                    let worker = c.worker.call(slice::current).unwrap();
                    // Both ranks end their calls before either drops.
                    c.barrier().unwrap();
                    drop(c);
                    assert_eq!(caller, Some(slice::SHORTEST), "the caller's slice");
                    assert_eq!(worker, Some(slice::SHORTEST), "the worker's slice");
                    assert_eq!(slice::current(), before, "the caller's slice after");
                });
            }
        });
    }

    /// Each local rank runs on CPUs of its own while its communicator lives
    /// (its Gloo threads, started meanwhile, inherit them), and gets its mask
    /// back when it goes; a rank whose place on the host is unknown stays
    /// where it was. (Ranks sharing their session, as `mpirun`'s do; this
    /// test process does.)
    #[test]
    fn a_local_rank_is_bound_to_its_own_cpus_while_its_communicator_lives() {
        let before = match affinity::cpus_to_test_binding(true) {
            Ok(cpus) => cpus,
            Err(why) => return eprintln!("skipped: {why}"),
        };
        if let Err(why) = loop_yield::install() {
            eprintln!("skipped: Gloo's loop runs as shipped, and then no rank binds: {why}");
            return;
        }
        let store = MemStore::new(Duration::from_secs(20));
        let masks: Vec<_> = std::thread::scope(|s| {
            let ranks: Vec<_> = (0..2)
                .map(|r| {
                    let store = &store;
                    s.spawn(move || {
                        let mut opts = Options::new([0; 16]).unwrap();
                        opts.timeout = Duration::from_secs(20);
                        opts.local_rank = Some(r);
                        opts.per_node = Some(2);
                        let c = GlooComm::connect(store, r, 2, &opts).unwrap();
                        let bound = affinity::allowed_cpus().unwrap();
                        c.barrier().unwrap();
                        drop(c);
                        (bound, affinity::allowed_cpus().unwrap())
                    })
                })
                .collect();
            ranks.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (r, (bound, after)) in masks.iter().enumerate() {
            assert_eq!(
                Some(bound),
                affinity::cpus_for(r, 2, &before, false).as_ref(),
                "rank {r}"
            );
            assert_eq!(after, &before, "rank {r}'s mask after the communicator");
        }
        assert!(masks[0].0.iter().all(|c| !masks[1].0.contains(c)));

        // Unknown place on the host (`Options::new`'s default): left alone.
        let unbound = std::sync::Mutex::new(Vec::new());
        world(2, |c| {
            unbound
                .lock()
                .unwrap()
                .push(affinity::allowed_cpus().unwrap());
            // Gloo's connect can return on one rank while the other still
            // finishes its side: a rank that dropped its communicator at once
            // failed the other's connect ("Connection closed by peer") in 1 to
            // 3 of 25 runs of this module's tests.
            c.barrier().unwrap();
        });
        assert!(unbound.into_inner().unwrap().iter().all(|m| *m == before));
    }

    /// Gloo's loop as shipped spins on the core it shares with the thread it
    /// waits for ("Placement"); a rank in a session of its own is left
    /// unbound by `sys::affinity::bind_in_shared_group`, whose test has it.
    #[test]
    fn only_a_rank_with_a_known_place_and_a_yielding_loop_may_be_bound() {
        let mut opts = Options::new([0; 16]).unwrap();
        opts.local_rank = Some(1);
        opts.per_node = Some(2);
        assert_eq!(place_to_bind(&opts, true), Some((1, 2)));
        assert_eq!(place_to_bind(&opts, false), None, "Gloo's loop spins");
        opts.per_node = None;
        assert_eq!(place_to_bind(&opts, true), None, "unknown place");
    }

    #[test]
    fn all_reduce_sums_on_three_threads() {
        world(3, |c| {
            let mut v = vec![c.rank() as f32 + 1.0; 1000];
            c.all_reduce(
                Input::InPlace,
                &mut BufferMut::from_slice(&mut v),
                ReduceOp::Sum,
            )
            .unwrap();
            assert!(v.iter().all(|&x| x == 6.0));
        });
    }

    /// Small calls halve their messages with bcube, but not where the ring's
    /// segments are mostly empty; an algorithm asked for is never swapped.
    #[test]
    fn the_default_all_reduce_is_bcube_below_the_limit_and_gloos_ring_from_it_or_on_a_few_elements()
    {
        let f32s = |n: usize| (n, 2, 4 * n);
        let default = |(count, world, bytes)| GlooAlgo::Default.for_call(count, world, bytes);
        assert_eq!(default(f32s(4)), GlooAlgo::Bcube);
        assert_eq!(default(f32s(BCUBE_BELOW / 4 - 1)), GlooAlgo::Bcube);
        assert_eq!(default(f32s(BCUBE_BELOW / 4)), GlooAlgo::Default);
        // Fewer elements than the ring has segments: the ring sends fewer.
        assert_eq!(default(f32s(3)), GlooAlgo::Default);
        assert_eq!(default((5, 3, 20)), GlooAlgo::Default);
        assert_eq!(default((6, 3, 24)), GlooAlgo::Bcube);
        for asked in [GlooAlgo::Ring, GlooAlgo::Bcube, GlooAlgo::RingChunked] {
            assert_eq!(asked.for_call(1, 2, 4), asked);
            assert_eq!(asked.for_call(16 << 20, 2, 64 << 20), asked);
        }
    }

    /// Sums `(i % 7) + rank` over `n` f32 elements with the default
    /// all_reduce, in place, and returns how many elements came out wrong.
    fn wrong_in_a_summed_ramp(c: &GlooComm, n: usize) -> usize {
        let mut v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 + c.rank() as f32).collect();
        c.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut v),
            ReduceOp::Sum,
        )
        .unwrap();
        // Small integers: every order of the sum gives the same bits.
        let w = c.world;
        let want = |i: usize| (w * (i % 7) + w * (w - 1) / 2) as f32;
        v.iter().enumerate().filter(|&(i, &x)| x != want(i)).count()
    }

    /// Either side of [`BCUBE_BELOW`], on a world that is not a power of 2
    /// (bcube's direct exchange) and with an odd count (uneven chunks).
    #[test]
    fn all_reduce_sums_on_either_side_of_the_bcube_limit() {
        world(3, |c| {
            let elems = BCUBE_BELOW / 4;
            for n in [elems - 1, elems + 1] {
                assert_eq!(wrong_in_a_summed_ramp(c, n), 0, "{n} elements");
            }
        });
    }

    /// The threads of this process, by id.
    fn thread_ids() -> std::collections::BTreeSet<i32> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// The nice value of thread `tid` (field 19 of its stat), if it still runs.
    fn nice_of(tid: i32) -> Option<i32> {
        crate::testing::proc_stat_field(&format!("/proc/self/task/{tid}/stat"), 19)?
            .parse()
            .ok()
    }

    /// Gloo's event-loop threads ran 5 nicer than the rank until a saturated
    /// 16-core node showed what it cost: a woken loop waited out a busy
    /// program's slice, and small calls took a scheduler tick (the module docs,
    /// "Gloo's threads"). Every thread connecting starts keeps the rank's
    /// priority (threads other tests start meanwhile do too).
    #[test]
    fn gloos_loop_threads_keep_the_ranks_priority() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let mine = nice_of(me).unwrap();
        let before = thread_ids();
        let store = MemStore::new(Duration::from_secs(20));
        let opts = Options::new([0; 16]).unwrap();
        let c = GlooComm::connect(&store, 0, 1, &opts).unwrap();
        let started: Vec<i32> = thread_ids().difference(&before).copied().collect();
        // At least Gloo's event loop and the worker.
        assert!(started.len() >= 2, "connecting started {started:?}");
        for tid in started {
            if let Some(nice) = nice_of(tid) {
                assert_eq!(
                    nice, mine,
                    "thread {tid} runs at nice {nice}, the rank at {mine}"
                );
            }
        }
        drop(c);
    }

    /// The default all_reduce's ring with [`SEGMENT_BYTES`] segments: over
    /// 4 × `SEGMENT_BYTES` at world 2, with a count that leaves the last
    /// segment short.
    #[test]
    fn all_reduce_sums_across_several_of_the_default_segments() {
        assert_eq!(GlooAlgo::Default.segment_bytes(), SEGMENT_BYTES);
        assert_eq!(
            GlooAlgo::Ring.segment_bytes(),
            0,
            "an asked-for ring is PyTorch's"
        );
        // Four whole segments of f32 and two thirds of a fifth, plus one.
        let per_segment = SEGMENT_BYTES as usize / 4;
        let n = 4 * per_segment + 2 * per_segment / 3 + 1;
        world(2, |c| {
            assert_eq!(wrong_in_a_summed_ramp(c, n), 0, "{n} elements")
        });
    }

    #[test]
    fn timeout_when_a_peer_never_calls() {
        let store = MemStore::new(Duration::from_secs(20));
        let mut opts = Options::new([0; 16]).unwrap();
        opts.timeout = Duration::from_millis(500);
        std::thread::scope(|s| {
            let h: Vec<_> = (0..2)
                .map(|r| {
                    let (store, opts) = (&store, &opts);
                    s.spawn(move || {
                        let c = GlooComm::connect(store, r, 2, opts).unwrap();
                        if r == 0 {
                            let mut v = vec![0u8; 10];
                            c.recv(&mut BufferMut::from_slice(&mut v), 1)
                        } else {
                            std::thread::sleep(Duration::from_millis(1500));
                            Ok(())
                        }
                    })
                })
                .collect();
            let r0 = h.into_iter().next().unwrap().join().unwrap();
            assert!(matches!(r0, Err(Error::Timeout { .. })), "{r0:?}");
        });
    }

    #[test]
    fn connect_times_out_through_our_store_when_peers_are_missing() {
        let store = MemStore::new(Duration::from_millis(300));
        let opts = Options::new([0; 16]).unwrap();
        let r = GlooComm::connect(&store, 0, 2, &opts);
        assert!(matches!(r, Err(Error::Timeout { .. })), "{:?}", r.err());
    }
}
