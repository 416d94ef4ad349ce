//! Moving one frame each way: [`Outgoing`] and [`Incoming`] make as much
//! progress as their sockets allow without blocking, and [`progress_loop`]
//! alternates them, spinning briefly and then sleeping in `poll` only when
//! both would block.

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::abort::{check_send_peer, read_abort, send_failed};
use super::outgoing::{Outgoing, lost_or_io};
use crate::copy::copy;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::sys::poll_ms;
use crate::sys::socket::{recv1, recv2};
use crate::transport::{
    FLAG_ABORT, Frame, HEADER_LEN, SinkWriter, Tag, WATCH_AFTER, WATCH_EVERY, WaitWatch, Waiting,
};

/// Payloads up to this size are received together with their header (one
/// syscall) into the staging buffer, then copied: the copy costs less than a
/// second syscall, and a mismatched frame never scribbles over the caller's
/// buffer.
const SMALL_PAYLOAD: usize = 64 * 1024;

pub(super) enum Dest<'a> {
    /// Received bytes go straight into the caller's buffer.
    Copy(&'a mut [u8]),
    /// Received bytes go through the staging buffer into a reduction.
    Reduce(SinkWriter<'a>),
}

/// One incoming frame in flight.
pub(super) struct Incoming<'a> {
    /// This rank, for naming both sides of a mismatch.
    pub(super) me: usize,
    pub(super) peer: usize,
    pub(super) fd: RawFd,
    pub(super) header: [u8; HEADER_LEN],
    pub(super) hgot: usize,
    pub(super) want: usize,
    pub(super) got: usize,
    pub(super) dest: Dest<'a>,
    pub(super) done: bool,
}

impl Incoming<'_> {
    /// Whether the stream from this peer sits between frames.
    fn at_boundary(&self) -> bool {
        self.hgot == 0 || self.done
    }

    fn feed(&mut self, bytes: &[u8]) {
        match &mut self.dest {
            Dest::Copy(d) => copy(&mut d[self.got..self.got + bytes.len()], bytes),
            Dest::Reduce(w) => w.push(bytes),
        }
        self.got += bytes.len();
    }

    /// Receives as much as has arrived; `Ok(())` when done or when the socket
    /// would block.
    fn progress(&mut self, tag: &Tag, staging: &mut [u8], timeout: Duration) -> Result<()> {
        while self.hgot < HEADER_LEN {
            // Read the payload (or its first staging-full) with the header.
            let extra_cap = match &self.dest {
                Dest::Copy(_) if self.want <= SMALL_PAYLOAD => self.want,
                Dest::Copy(_) => 0,
                Dest::Reduce(_) => self.want.min(staging.len()),
            };
            let n = match recv2(
                self.fd,
                &mut self.header[self.hgot..],
                &mut staging[..extra_cap],
            ) {
                Ok(0) => return Err(self.closed(tag)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(self.failed(e, tag)),
            };
            let h = n.min(HEADER_LEN - self.hgot);
            self.hgot += h;
            let extra = n - h;
            if self.hgot == HEADER_LEN {
                let frame = Frame::decode(&self.header)?;
                if frame.flags & FLAG_ABORT != 0 {
                    return Err(read_abort(
                        self.fd,
                        self.peer,
                        frame.len,
                        &staging[..extra],
                        timeout,
                    ));
                }
                frame.expect(self.me, self.peer, tag, self.want)?;
                if extra > 0 {
                    self.feed(&staging[..extra]);
                }
            }
        }
        while self.got < self.want {
            let r = match &mut self.dest {
                Dest::Copy(d) => recv1(self.fd, &mut d[self.got..]),
                Dest::Reduce(w) => {
                    let k = (self.want - self.got).min(staging.len());
                    let r = recv1(self.fd, &mut staging[..k]);
                    if let Ok(n) = r {
                        w.push(&staging[..n]);
                    }
                    r
                }
            };
            match r {
                Ok(0) => return Err(self.closed(tag)),
                Ok(n) => self.got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(self.failed(e, tag)),
            }
        }
        self.done = true;
        Ok(())
    }

    fn what(&self, tag: &Tag) -> String {
        if self.hgot < HEADER_LEN {
            format!("rank {} to send {} header", self.peer, tag.describe())
        } else {
            format!(
                "rank {} to send {} payload ({} of {} bytes arrived)",
                self.peer,
                tag.describe(),
                self.got,
                self.want
            )
        }
    }

    fn closed(&self, tag: &Tag) -> Error {
        Error::PeerLost {
            rank: self.peer,
            detail: format!(
                "connection closed while this rank waited for {}",
                self.what(tag)
            ),
        }
    }

    fn failed(&self, e: io::Error, tag: &Tag) -> Error {
        lost_or_io(self.peer, e, format!("waiting for {}", self.what(tag)))
    }
}

/// Runs both halves of an exchange to completion (see the module docs);
/// `watch` hears of stretches without progress (from the slow path only).
pub(super) fn progress_loop(
    tag: &Tag,
    mut out: Option<&mut Outgoing<'_>>,
    mut inc: Option<&mut Incoming<'_>>,
    staging: &mut [u8],
    timeout: Duration,
    spin: Duration,
    watch: Option<&dyn WaitWatch>,
) -> Result<()> {
    let mut last_watch: Option<Instant> = None;
    let mut try_send = true;
    let mut try_recv = true;
    // When we first find nothing to do, retry the non-blocking calls for up to
    // `spin` before sleeping in poll: on loopback a reply usually lands within
    // microseconds, while a sleep/wake round trip costs tens of them on a VM.
    let mut spin_until: Option<Instant> = None;
    // Created only when we first have to wait, so the fast path skips the clock.
    let mut deadline: Option<Deadline> = None;
    let mut moved_before = usize::MAX;
    loop {
        if let Some(o) = out.as_deref_mut().filter(|_| try_send) {
            if let Err(e) = o.progress() {
                let at_boundary = inc
                    .as_deref()
                    .is_none_or(|i| i.peer != o.peer || i.at_boundary());
                return Err(send_failed(o, e, tag, at_boundary, timeout));
            }
        }
        if let Some(i) = inc.as_deref_mut().filter(|_| try_recv) {
            i.progress(tag, staging, timeout)?;
        }
        let send_pending = out.as_deref().is_some_and(|o| !o.done());
        let recv_pending = inc.as_deref().is_some_and(|i| !i.done);
        if !send_pending && !recv_pending {
            return Ok(());
        }

        // The timeout counts from the last byte that moved.
        let moved =
            out.as_deref().map_or(0, |o| o.sent) + inc.as_deref().map_or(0, |i| i.hgot + i.got);
        let dl = match deadline {
            Some(d) if moved == moved_before => d,
            _ => {
                moved_before = moved;
                let d = Deadline::after(timeout);
                deadline = Some(d);
                d
            }
        };
        if dl.expired() {
            return Err(dl.error(waiting_for(tag, out.as_deref(), inc.as_deref())));
        }
        if !spin.is_zero()
            && *spin_until.get_or_insert_with(|| Instant::now() + spin) > Instant::now()
        {
            std::hint::spin_loop();
            try_send = send_pending;
            try_recv = recv_pending;
            continue;
        }

        if let Some(w) = watch {
            let stalled = timeout.saturating_sub(dl.remaining());
            if stalled >= WATCH_AFTER && last_watch.is_none_or(|t| t.elapsed() >= WATCH_EVERY) {
                last_watch = Some(Instant::now());
                let waiting = Waiting {
                    send_to: out.as_deref().filter(|_| send_pending).map(|o| o.peer),
                    recv_from: inc.as_deref().filter(|_| recv_pending).map(|i| i.peer),
                };
                w.stalled(tag, waiting, stalled)?;
            }
        }

        let mut fds = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; 2];
        let mut nfds = 0;
        let mut recv_idx = None;
        let mut send_idx = None;
        if let Some(i) = inc.as_deref().filter(|_| recv_pending) {
            fds[0] = libc::pollfd {
                fd: i.fd,
                events: libc::POLLIN,
                revents: 0,
            };
            recv_idx = Some(0);
            nfds = 1;
        }
        let mut watching = false;
        if let Some(o) = out.as_deref().filter(|_| send_pending) {
            if recv_pending && inc.as_deref().is_some_and(|i| i.fd == o.fd) {
                fds[0].events |= libc::POLLOUT;
                send_idx = Some(0);
            } else {
                // Nothing else reads this peer now: look out for its abort.
                watching = o.watch;
                fds[nfds] = libc::pollfd {
                    fd: o.fd,
                    events: libc::POLLOUT | if watching { libc::POLLIN } else { 0 },
                    revents: 0,
                };
                send_idx = Some(nfds);
                nfds += 1;
            }
        }
        // With a watch, wake up now and then to tell it how long we wait.
        let ms = poll_ms(match watch {
            Some(_) => dl.remaining().min(WATCH_EVERY),
            None => dl.remaining(),
        });
        // SAFETY: `fds` is a live array of `nfds` (<= 2) initialised pollfds.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds as libc::nfds_t, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                try_send = false;
                try_recv = false;
                continue;
            }
            return Err(Error::io("poll on peer sockets", e));
        }
        let ready = |idx: Option<usize>, mask: libc::c_short| {
            idx.is_some_and(|k| fds[k].revents & (mask | libc::POLLERR | libc::POLLHUP) != 0)
        };
        try_send = ready(send_idx, libc::POLLOUT);
        try_recv = ready(recv_idx, libc::POLLIN);
        if let Some(o) = out
            .as_deref_mut()
            .filter(|_| watching && ready(send_idx, libc::POLLIN))
        {
            check_send_peer(o, tag, timeout)?;
            // POLLHUP/POLLERR also mean a send attempt will report the error.
            try_send = true;
        }
    }
}

/// Describes what a stalled exchange waits for, for the timeout error.
fn waiting_for(tag: &Tag, out: Option<&Outgoing<'_>>, inc: Option<&Incoming<'_>>) -> String {
    let mut parts = Vec::new();
    if let Some(i) = inc.filter(|i| !i.done) {
        parts.push(i.what(tag));
    }
    if let Some(o) = out.filter(|o| !o.done()) {
        parts.push(format!(
            "rank {} to take {} ({} of {} bytes sent)",
            o.peer,
            tag.describe(),
            o.sent,
            o.total()
        ));
    }
    parts.join(" and ")
}

/// Busy-poll budget: 50 µs while every rank can have a core of its own
/// (judged by the world size against this host's cores), none otherwise.
pub(super) fn spin_budget(world_size: usize) -> Duration {
    let cores = crate::transport::host_cpus();
    if world_size <= cores {
        Duration::from_micros(50)
    } else {
        Duration::ZERO
    }
}
