//! Noticing that a peer's process is gone. Each rank records its pid, its
//! process start time (so a reused pid is not mistaken for the peer) and its
//! pid namespace (so a pid from another container is not looked up here) in
//! its slot; a sleeping waiter checks `/proc` for the peer it waits on.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::ShmTransport;
use super::ring::{Rx, Stage, Tx};
use super::segment::{Layout, R_PID, R_PIDNS, R_START, Segment};
use crate::error::{Error, Result};
use crate::sys::cvt;
use crate::transport::Tag;

/// How often a sleeping waiter looks at `/proc` for its peer.
pub(super) const LIVENESS_EVERY: Duration = Duration::from_millis(40);

/// What we know about a peer's process, for noticing its death.
#[derive(Clone, Copy, Debug)]
pub(super) struct PeerProc {
    pub(super) pid: u32,
    pub(super) start: u64,
    /// False for ranks that are threads of this process, and for processes in
    /// another pid namespace (their pid means nothing here).
    pub(super) watch: bool,
}

/// Identity of a rank's process as recorded in its slot.
#[derive(Clone, Copy, Debug)]
struct ProcIds {
    pid: u32,
    start: u64,
    pidns: u64,
}

fn read_proc_ids(seg: &Segment, layout: &Layout, r: usize) -> ProcIds {
    let base = layout.rank(r);
    ProcIds {
        pid: seg.u32_at(base + R_PID).load(Ordering::Acquire),
        start: seg.u64_at(base + R_START).load(Ordering::Acquire),
        pidns: seg.u64_at(base + R_PIDNS).load(Ordering::Acquire),
    }
}

/// Writes our pid (and what makes it unambiguous) into our rank's slot.
pub(super) fn claim_rank(seg: &Segment, layout: &Layout, rank: usize) -> Result<()> {
    let base = layout.rank(rank);
    let pid = std::process::id();
    // The start time tells a live process from a later one that reuses the
    // pid; the pid namespace tells whether the pid means anything here.
    let start = proc_start_time("self").unwrap_or(0);
    let pidns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            let digits: String = s.chars().filter(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0);
    if let Err(other) =
        seg.u32_at(base + R_PID)
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
    {
        return Err(Error::Rendezvous(format!(
            "rank {rank} is already attached to the shared-memory segment (pid {other}): two processes were given the same rank"
        )));
    }
    // Claimed (so a second process given our rank fails instead of
    // overwriting us); peers read the rest only after the barrier.
    seg.u64_at(base + R_START).store(start, Ordering::Release);
    seg.u64_at(base + R_PIDNS).store(pidns, Ordering::Release);
    Ok(())
}

/// Fields of `/proc/<who>/stat` after the command name: (state, start time).
fn proc_stat(who: &str) -> io::Result<(char, u64)> {
    let raw = std::fs::read(format!("/proc/{who}/stat"))?;
    let text = String::from_utf8_lossy(&raw);
    // The command name may contain spaces and parentheses; it ends at the last ')'.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let mut fields = rest.split_whitespace();
    let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
    // Field 22 (starttime) is the 20th after the name (state is field 3).
    let start = fields.nth(18).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((state, start))
}

fn proc_start_time(who: &str) -> Option<u64> {
    proc_stat(who).ok().map(|(_, s)| s)
}

/// `Some(how we know)` if process `pid` (started at `start`, 0 = unknown) is gone.
fn process_gone(pid: u32, start: u64) -> Option<String> {
    match proc_stat(&pid.to_string()) {
        Ok((state, now_start)) => {
            if state == 'Z' || state == 'X' {
                Some(format!("process {pid} has exited (it is a zombie)"))
            } else if start != 0 && now_start != 0 && now_start != start {
                Some(format!(
                    "process {pid} has exited (its pid now belongs to another process)"
                ))
            } else {
                None
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(format!("process {pid} has exited")),
        Err(_) => {
            // No usable /proc: fall back to signal 0, which only tells
            // whether the pid exists.
            // SAFETY: kill with signal 0 sends nothing.
            let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
            let gone = cvt(rc as isize).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH));
            gone.then(|| format!("process {pid} has exited"))
        }
    }
}

/// What each rank's slot says about its process, seen from `rank`: peers
/// that are threads of this process, or live in another pid namespace, are
/// not watched (their pid means nothing to `/proc` here).
pub(super) fn peer_procs(seg: &Segment, layout: &Layout, rank: usize) -> Vec<PeerProc> {
    let me = read_proc_ids(seg, layout, rank);
    (0..layout.world)
        .map(|r| {
            let p = read_proc_ids(seg, layout, r);
            PeerProc {
                pid: p.pid,
                start: p.start,
                watch: r != rank && p.pid != me.pid && p.pidns == me.pidns,
            }
        })
        .collect()
}

impl ShmTransport {
    /// Fails with [`Error::PeerLost`] if a peer this exchange still waits on
    /// has exited and the wait can therefore never end.
    pub(super) fn check_peers_alive(
        &self,
        tag: &Tag,
        tx: Option<&Tx<'_>>,
        rx: Option<&Rx<'_>>,
    ) -> Result<()> {
        let peers = [
            tx.filter(|t| !t.done()).map(|t| t.peer),
            rx.filter(|r| r.stage != Stage::Done).map(|r| r.peer),
        ];
        for p in peers.into_iter().flatten() {
            let peer = self.peers[p];
            if !peer.watch {
                continue;
            }
            // What a peer published before it exited is still ours to
            // read: only a wait that can no longer end is an error.
            if let Some(detail) =
                process_gone(peer.pid, peer.start).filter(|_| !self.can_progress(tx, rx))
            {
                return Err(Error::PeerLost {
                    rank: p,
                    detail: format!(
                        "{detail} (shared-memory transport, noticed while waiting for {})",
                        self.waiting_for(tag, tx, rx)
                    ),
                });
            }
        }
        Ok(())
    }
}
