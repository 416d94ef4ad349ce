//! The flight recorder: what each rank's communicator is doing, so that a
//! hang is named instead of waited out (as PyTorch's NCCL flight recorder and
//! `TORCH_DISTRIBUTED_DEBUG` do).
//!
//! # What it keeps
//! Every reference-backend call records its fingerprint (the [`Tag`]:
//! sequence number, kind, count, dtype, op, root) in a [`History`] of the last
//! [`HISTORY_LEN`] calls, with coarse start and end times. The call in
//! progress and the last one completed are also kept in atomics that other
//! threads may read. On the fast path this is a few plain stores and one
//! relaxed load of a clock that the recorder's responder thread keeps
//! ([`call_clock_ms`]): no lock, no system call, no clock read.
//!
//! # Waits that last
//! Transports tell the recorder (through [`WaitWatch`]) about waits that make
//! no progress, from their slow path only. After the notice time
//! (`RINGSIDE_NOTICE` seconds, 5 by default) the rank prints one line to
//! stderr: "rank 1 has waited 5 s for rank 0 in all_reduce#1 (…) (receive
//! from rank 0)". When the communicator knows the job's store
//! ([`crate::backends::Options::flight_store`]), it also asks every rank
//! where it is (see [`board`]) and adds the picture to the line; a cycle of
//! ranks that wait on each other, seen twice a second apart, or a wait on a
//! rank that has closed its communicator, fails the call at once with
//! [`Error::Hang`] instead of waiting out the timeout.
//!
//! `RINGSIDE_FLIGHT_RECORDER=0` turns all of it off (for measuring its cost).

pub mod board;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::Collective;
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::transport::{Tag, WaitWatch, Waiting};
use board::{Board, Picture, RankState, Where};

/// Calls kept in a rank's [`History`].
pub const HISTORY_LEN: usize = 32;
/// The notice time when `RINGSIDE_NOTICE` is unset.
pub const DEFAULT_NOTICE: Duration = Duration::from_secs(5);

/// The idle limit when neither `RINGSIDE_IDLE_LIMIT` nor a job's timeout says
/// otherwise: the shared flags' default timeout.
pub const DEFAULT_IDLE_LIMIT: Duration = Duration::from_secs(120);
/// How long after a first look at the other ranks a second look may confirm
/// a deadlock: a wait that was still the same wait a second later is stuck.
const CONFIRM_AFTER: Duration = Duration::from_secs(1);

/// Whether the recorder runs, and when a wait is worth a notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlightSettings {
    /// `RINGSIDE_FLIGHT_RECORDER=0` (or `off`, `false`) turns the recorder off.
    pub enabled: bool,
    /// A wait without progress this long prints a notice and looks for a
    /// deadlock (`RINGSIDE_NOTICE` seconds; 5 by default).
    pub notice: Duration,
    /// A rank we wait on that has been in no collective this long, while our
    /// wait has lasted the notice time, fails the wait at once: the ranks
    /// disagree on the calls (`RINGSIDE_IDLE_LIMIT` seconds). By default as
    /// long as the job's timeout ([`DEFAULT_IDLE_LIMIT`] before a job sets
    /// it): a training job's rank 0 may save a checkpoint or evaluate alone for
    /// minutes while the others wait, as under PyTorch, and that is not a bug.
    /// The labs set 4 s, so a learner's collective on one rank is named within
    /// the notice.
    pub idle_limit: Duration,
    /// A failed call prints this rank's [`LINE_MARK`] line to stderr, for the
    /// launcher's hang table ([`crate::job::communicator`] sets it: the rank
    /// was launched).
    pub report_to_launcher: bool,
}

/// What starts the line a failed call prints for the launcher:
/// `ringside flight | rank 0 | last completed all_reduce#8 | in all_reduce#9
/// (1280 × float, avg) | waits to receive from rank 1`.
pub const LINE_MARK: &str = "ringside flight | ";

impl FlightSettings {
    /// Reads `RINGSIDE_FLIGHT_RECORDER`, `RINGSIDE_NOTICE` and
    /// `RINGSIDE_IDLE_LIMIT`.
    pub fn from_env() -> Result<FlightSettings> {
        let enabled = !crate::job::switched_off("RINGSIDE_FLIGHT_RECORDER");
        let notice = seconds_var("RINGSIDE_NOTICE")?.unwrap_or(DEFAULT_NOTICE);
        let idle_limit = seconds_var("RINGSIDE_IDLE_LIMIT")?.unwrap_or(DEFAULT_IDLE_LIMIT);
        Ok(FlightSettings {
            enabled,
            notice,
            idle_limit,
            report_to_launcher: false,
        })
    }
}

/// A duration in seconds from the environment variable `name`, if set.
fn seconds_var(name: &str) -> Result<Option<Duration>> {
    match std::env::var(name) {
        Ok(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(|x| Duration::try_from_secs_f64(x).ok())
            .map(Some)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{name}={s:?} is not a number of seconds"))
            }),
        Err(_) => Ok(None),
    }
}

/// The job's store, shared with the flight recorder so ranks can publish
/// where they are when a wait lasts (see [`board`]).
#[derive(Clone)]
pub struct SharedStore(pub Arc<dyn Store>);

impl fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedStore(..)")
    }
}

/// The coarse clock as a responder thread last read it (ms; see
/// [`call_clock_ms`]).
static TICKED_MS: AtomicU64 = AtomicU64::new(0);
/// Responder threads running: while one runs, [`TICKED_MS`] is at most
/// about [`board::RESPOND_EVERY`] old.
static TICKERS: AtomicUsize = AtomicUsize::new(0);

/// A call's start time (ms on the coarse monotonic clock), read from
/// `TICKED_MS` while a responder thread keeps it, else from the clock.
///
/// Why not the clock itself: even the coarse clock's vDSO read cost about
/// 9 ns on the Xeon VM, +2.7 % of a 4-byte all_reduce between thread ranks
/// (0.33 µs) in both rounds of `flight_recorder_cost`, where the target is
/// 2 %. A start time a quarter of a second early is nothing to a hang report
/// that speaks in seconds.
pub fn call_clock_ms() -> u64 {
    if TICKERS.load(Ordering::Relaxed) > 0 {
        let t = TICKED_MS.load(Ordering::Relaxed);
        if t != 0 {
            return t;
        }
    }
    now_ms()
}

/// Keeps [`TICKED_MS`] current while it lives: a responder thread holds one.
#[derive(Debug)]
pub(crate) struct Ticker(());

impl Ticker {
    /// Starts keeping the clock (reads it once now).
    pub(crate) fn start() -> Ticker {
        TICKED_MS.fetch_max(now_ms(), Ordering::Relaxed);
        TICKERS.fetch_add(1, Ordering::Relaxed);
        Ticker(())
    }

    /// Reads the clock again; several tickers only ever move it forward.
    pub(crate) fn tick(&self) {
        TICKED_MS.fetch_max(now_ms(), Ordering::Relaxed);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        TICKERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Milliseconds on the coarse monotonic clock: a vDSO read without a fence,
/// precise to a few milliseconds, which is plenty for naming hangs.
pub fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// One recorded call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its fingerprint.
    pub tag: Tag,
    /// When it started ([`call_clock_ms`]). The end is not read from the clock: a
    /// second read per call cost about 1 % of a small all_reduce, and a hang
    /// report needs seconds, not the call's microseconds.
    pub started_ms: u64,
    /// Whether it succeeded.
    pub ok: bool,
}

/// The last [`HISTORY_LEN`] calls of one communicator, oldest first.
#[derive(Clone, Debug, Default)]
pub struct History {
    ring: Vec<Entry>,
    next: usize,
}

impl History {
    /// Records a finished call, dropping the oldest when full.
    pub fn push(&mut self, e: Entry) {
        if self.ring.len() < HISTORY_LEN {
            self.ring.push(e);
        } else {
            self.ring[self.next] = e;
        }
        self.next = (self.next + 1) % HISTORY_LEN;
    }
    /// The calls, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        if self.ring.len() < HISTORY_LEN {
            return self.ring.clone();
        }
        let (new, old) = self.ring.split_at(self.next);
        old.iter().chain(new).copied().collect()
    }
}

/// Packs a call's kind and number into one word (0: none).
fn pack(c: Collective, seq: u32) -> u64 {
    (u64::from(c.code()) + 1) << 32 | u64::from(seq)
}

/// The kind and number [`pack`] packed.
fn unpack(w: u64) -> Option<(Collective, u32)> {
    let code = (w >> 32).checked_sub(1)?;
    Some((Collective::from_code(code as u8)?, w as u32))
}

/// What the slow path knows about the current wait.
#[derive(Debug, Default)]
struct Slow {
    /// The fingerprint and peers of the stalled wait, and how long it has
    /// stalled, as last heard from the transport.
    waiting: Option<(Tag, Waiting, Duration)>,
    /// The notice for the current call has been printed.
    noticed: bool,
    /// The picture of the last look at the other ranks, and when it was taken.
    looked: Option<(Picture, u64)>,
    /// This rank's state was published on the board and must be kept current.
    published: bool,
}

/// One rank's recorder, shared by its communicator and its transport's watch.
#[derive(Debug)]
pub struct Flight {
    rank: usize,
    world: usize,
    notice: Duration,
    idle_limit: Duration,
    report_to_launcher: bool,
    /// The call in progress ([`pack`]ed; 0 when none).
    current: AtomicU64,
    current_since: AtomicU64,
    /// The last call completed ([`pack`]ed; 0 when none).
    completed: AtomicU64,
    completed_at: AtomicU64,
    closed: AtomicBool,
    /// The error that broke the communicator, for peers that wait on it.
    failed: Mutex<Option<String>>,
    /// This rank's hang-table row as it stood when the call failed (before
    /// `end` forgets the wait), for reports made after the ranks return.
    failed_line: Mutex<Option<String>>,
    /// Set once the slow path has run for the current call, so that the
    /// fast path checks one relaxed flag rather than a lock.
    slow_used: AtomicBool,
    slow: Mutex<Slow>,
    board: Option<Board>,
}

impl Flight {
    /// A recorder for `rank` of `world`; with a store, it publishes this
    /// rank's state there under `prefix` (see [`board`]).
    pub fn new(
        rank: usize,
        world: usize,
        settings: FlightSettings,
        store: Option<SharedStore>,
        prefix: &str,
    ) -> Result<Arc<Flight>> {
        let board = match store {
            Some(s) => Some(Board::new(s.0, prefix, rank, world)?),
            None => None,
        };
        let flight = Arc::new(Flight {
            rank,
            world,
            notice: settings.notice,
            idle_limit: settings.idle_limit,
            report_to_launcher: settings.report_to_launcher,
            current: AtomicU64::new(0),
            current_since: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            completed_at: AtomicU64::new(now_ms()),
            closed: AtomicBool::new(false),
            failed: Mutex::new(None),
            failed_line: Mutex::new(None),
            slow_used: AtomicBool::new(false),
            slow: Mutex::new(Slow::default()),
            board,
        });
        if let Some(b) = &flight.board {
            b.start_responder(Arc::downgrade(&flight))?;
        }
        Ok(flight)
    }

    /// A call starts (the fast path: plain stores).
    pub fn begin(&self, c: Collective, seq: u32) -> u64 {
        let now = call_clock_ms();
        self.current_since.store(now, Ordering::Relaxed);
        self.current.store(pack(c, seq), Ordering::Relaxed);
        now
    }

    /// The call that [`Flight::begin`] started at `started_ms` is over.
    /// "Idle since" then counts from that start (see [`Entry::started_ms`]).
    pub fn end(&self, c: Collective, seq: u32, ok: bool, started_ms: u64) {
        self.current.store(0, Ordering::Relaxed);
        if ok {
            self.completed_at.store(started_ms, Ordering::Relaxed);
            self.completed.store(pack(c, seq), Ordering::Relaxed);
        }
        // Only a call that waited long has anything in the slow state.
        if self.slow_used.load(Ordering::Relaxed) {
            self.slow_used.store(false, Ordering::Relaxed);
            self.after_wait();
        }
    }

    /// Clears the slow state after a call that waited long, and corrects the
    /// published state if the board shows us waiting.
    #[cold]
    fn after_wait(&self) {
        let republish = match self.slow.lock() {
            Ok(mut s) => {
                let was = s.published;
                *s = Slow::default();
                was
            }
            Err(_) => false,
        };
        if republish {
            if let Some(b) = &self.board {
                let _ = b.publish(&self.state(0));
            }
        }
    }

    /// The communicator broke with `error` in the call `current` (kept for
    /// peers that wait on it; for the launcher, one [`LINE_MARK`] line).
    /// Call before [`Flight::end`], which forgets the wait.
    pub fn failed(&self, error: &str, current: Option<Tag>) {
        if let Ok(mut f) = self.failed.lock() {
            f.get_or_insert_with(|| error.to_owned());
        }
        let line = self.line(current);
        if self.report_to_launcher {
            eprintln!("{line}");
        }
        if let Ok(mut l) = self.failed_line.lock() {
            l.get_or_insert(line);
        }
    }

    /// This rank's hang-table row from its first failed call, if one failed.
    pub fn failed_line(&self) -> Option<String> {
        self.failed_line.lock().ok().and_then(|l| l.clone())
    }

    /// This rank's row of the launcher's hang table (see [`LINE_MARK`]).
    pub fn line(&self, current: Option<Tag>) -> String {
        let last = unpack(self.completed.load(Ordering::Relaxed))
            .map_or("none".into(), |(c, seq)| format!("{c}#{seq}"));
        let waiting = self.slow.lock().ok().and_then(|s| s.waiting);
        let call = current
            .map(|t| t.describe())
            .or_else(|| {
                unpack(self.current.load(Ordering::Relaxed)).map(|(c, seq)| format!("{c}#{seq}"))
            })
            .unwrap_or_else(|| "-".into());
        let waits = match waiting {
            Some((t, w, stalled)) if current.is_none_or(|c| c.seq == t.seq) => format!(
                "waits {} ({:.1} s)",
                board::describe_wait(w.send_to, w.recv_from),
                stalled.as_secs_f64()
            ),
            _ => "-".into(),
        };
        format!(
            "{LINE_MARK}rank {} | last completed {last} | in {call} | {waits}",
            self.rank
        )
    }

    /// The communicator is gone: peers waiting for us learn it.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        if let Some(b) = &self.board {
            let _ = b.publish(&self.state(0));
            b.stop();
        }
    }

    /// This rank's state now, answering ask number `answer`.
    pub fn state(&self, answer: i64) -> RankState {
        let now = now_ms();
        let completed = unpack(self.completed.load(Ordering::Relaxed));
        let current = unpack(self.current.load(Ordering::Relaxed));
        let waiting = self
            .slow
            .lock()
            .ok()
            .and_then(|s| s.waiting)
            .filter(|(t, _, _)| current.is_some_and(|(_, seq)| seq == t.seq));
        let place = if self.closed.load(Ordering::Relaxed) {
            Where::Closed {
                failed: self.failed.lock().ok().and_then(|f| f.clone()),
            }
        } else if let Some((tag, w, stalled)) = waiting {
            Where::Waiting {
                call: tag.describe(),
                seq: tag.seq,
                send_to: w.send_to,
                recv_from: w.recv_from,
                stalled_ms: stalled.as_millis() as u64,
            }
        } else if let Some((c, seq)) = current {
            Where::Running {
                call: format!("{c}#{seq}"),
                for_ms: now.saturating_sub(self.current_since.load(Ordering::Relaxed)),
            }
        } else {
            Where::Idle {
                for_ms: now.saturating_sub(self.completed_at.load(Ordering::Relaxed)),
            }
        };
        RankState {
            rank: self.rank,
            answer,
            last: completed.map(|(c, seq)| format!("{c}#{seq}")),
            place,
        }
    }

    /// The line printed once a wait passes the notice time.
    fn notice_line(&self, tag: &Tag, w: Waiting, stalled: Duration) -> String {
        let peers: Vec<String> = w
            .recv_from
            .iter()
            .chain(w.send_to.iter().filter(|p| Some(**p) != w.recv_from))
            .map(|p| format!("rank {p}"))
            .collect();
        format!(
            "rank {} has waited {} s for {} in {} ({})",
            self.rank,
            stalled.as_secs(),
            peers.join(" and "),
            tag.describe(),
            board::describe_wait(w.send_to, w.recv_from),
        )
    }
}

impl WaitWatch for Flight {
    fn stalled(&self, tag: &Tag, waiting: Waiting, stalled: Duration) -> Result<()> {
        self.slow_used.store(true, Ordering::Relaxed);
        let Ok(mut s) = self.slow.lock() else {
            return Ok(());
        };
        s.waiting = Some((*tag, waiting, stalled));
        if stalled < self.notice {
            return Ok(());
        }
        let Some(board) = &self.board else {
            if !s.noticed {
                s.noticed = true;
                eprintln!("{}", self.notice_line(tag, waiting, stalled));
            }
            return Ok(());
        };
        let now = now_ms();
        let due = match &s.looked {
            None => true,
            Some((_, at)) => now.saturating_sub(*at) >= CONFIRM_AFTER.as_millis() as u64,
        };
        if !due {
            return Ok(());
        }
        s.published = true;
        // Looking takes up to a second of store traffic: not under the lock
        // the responder needs.
        let before = s.looked.take();
        let first = !s.noticed;
        s.noticed = true;
        drop(s);
        let picture = board.look(&self.state(0), self.world);
        let verdict = picture
            .verdict(self.rank, before.as_ref().map(|(p, _)| p))
            .or_else(|| picture.disagreement(self.rank, self.idle_limit.as_millis() as u64));
        if first {
            eprintln!(
                "{}; {}",
                self.notice_line(tag, waiting, stalled),
                picture.describe()
            );
        }
        if let Some(why) = verdict {
            return Err(Error::Hang(why));
        }
        if let Ok(mut s) = self.slow.lock() {
            s.looked = Some((picture, now));
        }
        Ok(())
    }
}
