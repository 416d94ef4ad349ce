//! Waiting without progress: spin briefly (cheap while the peer runs on
//! another core), yield a few times, then sleep on this rank's doorbell futex
//! in short slices, re-checking the deadline, the abort word and the peer's
//! liveness between them. Whoever publishes for a sleeping rank rings its bell.

use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};

use super::ShmTransport;
use super::liveness::LIVENESS_EVERY;
use super::ring::{Rx, Stage, Tx};
use super::segment::{R_BELL, R_CPU, R_SLEEPING};
use crate::deadline::Deadline;
use crate::error::Result;
use crate::sys::futex;
use crate::transport::{HEADER_LEN, Tag, WATCH_AFTER, WATCH_EVERY, Waiting};

/// How long a waiter spins before it yields its core, when every rank can
/// have a core of its own. A running peer answers within a microsecond, so
/// this only has to outlast scheduling noise; it bounds wasted CPU per wait.
pub(super) const SPIN_TIME: Duration = Duration::from_micros(50);
/// `sched_yield` calls between spinning and sleeping (same condition).
pub(super) const YIELDS: u32 = 8;
/// With more ranks than cores the peer we wait for is often not running, and
/// spinning only delays it: no spinning. (4 thread ranks on 2 cores, 2000 ring
/// steps: ~0.5 s with the 50 us spin, ~25 s spinning without sleeping.)
pub(super) const OVERSUBSCRIBED_SPIN_TIME: Duration = Duration::ZERO;
/// Instead, yield the core up to this many times before sleeping, as OpenMPI
/// does when oversubscribed (`mpi_yield_when_idle`): the peer we wait for is
/// usually runnable on our core, and `sched_yield` hands it the core at the
/// cost of a context switch, where a futex sleep costs a wake-up through the
/// kernel on every message. When nothing else is runnable a yield returns at
/// once, so an idle rank burns well under a millisecond before it sleeps.
/// (`peers --world 4`, f32 all_reduce on 2 cores: 8 B 70-97 us with 2 yields,
/// 7.5 us with 1000; OpenMPI 3.9 us.)
pub(super) const OVERSUBSCRIBED_YIELDS: u32 = 1000;
/// Longest futex sleep before re-checking deadline, abort word and peer.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

/// Escalation state of one stretch of waiting without progress.
pub(super) struct Wait {
    polls: u32,
    yields: u32,
    since: Option<Instant>,
    /// A peer we wait for last ran on our CPU: spinning would only delay it.
    colocated: bool,
    /// When the transport's watch last heard of this wait.
    watched: Option<Instant>,
}

impl Wait {
    pub(super) fn new() -> Wait {
        Wait {
            polls: 0,
            yields: 0,
            since: None,
            colocated: false,
            watched: None,
        }
    }
}

impl ShmTransport {
    pub(super) fn bell(&self, r: usize) -> &AtomicU32 {
        self.seg.u32_at(self.layout.rank(r) + R_BELL)
    }

    fn sleeping(&self, r: usize) -> &AtomicU32 {
        self.seg.u32_at(self.layout.rank(r) + R_SLEEPING)
    }

    /// Wakes rank `r` if it sleeps. Called after publishing a position: the
    /// fence orders that store before reading r's flag, pairing with the fence
    /// r executes between raising its flag and re-reading our position
    /// (Dekker), so either r sees our update or we see r's flag.
    pub(super) fn notify(&self, r: usize) {
        fence(Ordering::SeqCst);
        if self.sleeping(r).load(Ordering::Relaxed) != 0 {
            let bell = self.bell(r);
            bell.fetch_add(1, Ordering::Release);
            futex::wake_all(bell);
        }
    }

    /// One step of waiting: spin, then yield, then sleep on the doorbell.
    pub(super) fn wait(
        &mut self,
        tag: &Tag,
        tx: Option<&Tx<'_>>,
        rx: Option<&Rx<'_>>,
        w: &mut Wait,
        deadline: &mut Option<Deadline>,
    ) -> Result<()> {
        w.polls += 1;
        if w.polls & 63 != 1 {
            std::hint::spin_loop();
            return Ok(());
        }
        // Every 64 polls: the slower checks.
        let now = Instant::now();
        if w.since.is_none() {
            w.colocated = self.colocated(tx, rx);
        }
        let since = *w.since.get_or_insert(now);
        let dl = *deadline.get_or_insert_with(|| Deadline::after(self.timeout));
        self.check_abort()?;
        if !w.colocated && now.duration_since(since) < self.spin_time {
            std::hint::spin_loop();
            return Ok(());
        }
        if dl.expired() {
            return Err(dl.error(self.waiting_for(tag, tx, rx)));
        }
        // Unlike spinning, yielding helps a peer on our own CPU: it runs
        // at once.
        if w.yields < self.yields {
            w.yields += 1;
            std::thread::yield_now();
            // Re-enter the slow checks on the next poll.
            w.polls = 0;
            return Ok(());
        }
        w.polls = 0;
        let bell = self.bell(self.rank);
        let sleeping = self.sleeping(self.rank);
        let snap = bell.load(Ordering::Acquire);
        sleeping.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !self.can_progress(tx, rx) && self.check_abort().is_ok() {
            futex::wait(bell, snap, SLEEP_SLICE.min(dl.remaining()));
        }
        sleeping.store(0, Ordering::Relaxed);
        self.check_abort()?;
        if self.last_liveness.elapsed() >= LIVENESS_EVERY {
            self.last_liveness = Instant::now();
            self.check_peers_alive(tag, tx, rx)?;
        }
        if dl.expired() {
            return Err(dl.error(self.waiting_for(tag, tx, rx)));
        }
        if let Some(watch) = &self.watch {
            let stalled = since.elapsed();
            if stalled >= WATCH_AFTER && w.watched.is_none_or(|t| t.elapsed() >= WATCH_EVERY) {
                w.watched = Some(Instant::now());
                let waiting = Waiting {
                    send_to: tx.filter(|t| !t.done()).map(|t| t.peer),
                    recv_from: rx.filter(|r| r.stage != Stage::Done).map(|r| r.peer),
                };
                watch.stalled(tag, waiting, stalled)?;
            }
        }
        Ok(())
    }

    /// Records the CPU we run on, and tells whether a peer we wait for was
    /// last seen waiting on the same one.
    fn colocated(&mut self, tx: Option<&Tx<'_>>, rx: Option<&Rx<'_>>) -> bool {
        // SAFETY: no preconditions; a vDSO/rseq read on Linux.
        let cpu = unsafe { libc::sched_getcpu() };
        let Ok(cpu) = u32::try_from(cpu) else {
            return false;
        };
        let mine = cpu.wrapping_add(1);
        if mine != self.cpu {
            self.cpu = mine;
            self.seg
                .u32_at(self.layout.rank(self.rank) + R_CPU)
                .store(mine, Ordering::Relaxed);
        }
        let peers = [
            tx.filter(|t| !t.done()).map(|t| t.peer),
            rx.filter(|r| r.stage != Stage::Done).map(|r| r.peer),
        ];
        peers.into_iter().flatten().any(|p| {
            self.seg
                .u32_at(self.layout.rank(p) + R_CPU)
                .load(Ordering::Relaxed)
                == mine
        })
    }

    #[cold]
    pub(super) fn waiting_for(
        &self,
        tag: &Tag,
        tx: Option<&Tx<'_>>,
        rx: Option<&Rx<'_>>,
    ) -> String {
        let mut parts = Vec::new();
        if let Some(t) = tx.filter(|t| !t.done()) {
            parts.push(if t.ack.is_some() {
                format!(
                    "rank {} to read {} ({} bytes) from our memory (single copy)",
                    t.peer,
                    tag.describe(),
                    t.len
                )
            } else if t.pos == t.end && !t.answered() {
                format!(
                    "rank {} to answer {} in the ring ({} of {} bytes back)",
                    t.peer,
                    tag.describe(),
                    t.reply.as_ref().map_or(0, |r| r.done),
                    t.len
                )
            } else if t.single {
                format!(
                    "rank {} to make room for {}'s descriptor",
                    t.peer,
                    tag.describe()
                )
            } else {
                format!(
                    "rank {} to take {} off the ring ({} of {} bytes written)",
                    t.peer,
                    tag.describe(),
                    t.pos.saturating_sub(HEADER_LEN).min(t.len),
                    t.len
                )
            });
        }
        if let Some(r) = rx.filter(|r| r.stage != Stage::Done) {
            let got = match r.stage {
                Stage::Payload(d) | Stage::Remote { done: d, .. } => d,
                _ => 0,
            };
            parts.push(format!(
                "rank {} to send {} ({} of {} bytes received)",
                r.peer,
                tag.describe(),
                got,
                r.want
            ));
        }
        format!(
            "{} (rank {} over shared memory)",
            parts.join(" and "),
            self.rank
        )
    }
}
