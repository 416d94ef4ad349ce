//! The abort protocol: a rank that gives up sends every peer an abort frame
//! (the 32-byte header with [`FLAG_ABORT`], then a UTF-8 reason) and shuts its
//! sockets, and a peer blocked on it reports [`Error::PeerAborted`] with that
//! reason instead of a timeout or a bare connection reset.

use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use super::Peer;
use super::outgoing::{Outgoing, lost_or_io};
use crate::Collective;
use crate::deadline::Deadline;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::sys::socket::{recv_flags, recv1, send2};
use crate::sys::{wait_readable, wait_writable};
use crate::transport::{FLAG_ABORT, Frame, HEADER_LEN, Tag};

/// The longest abort reason we send or accept.
const MAX_ABORT_REASON: usize = 16 * 1024;

/// How long announcing an abort may wait, over all peers, for sockets to take
/// the rest of a half-sent frame and the abort frame. A live peer is usually
/// reading (it is blocked on us), so megabytes drain in milliseconds; without
/// the wait a full socket buffer dropped the announcement and the peer saw a
/// bare "connection closed" naming us instead of the rank that really failed.
const ANNOUNCE_GRACE: Duration = Duration::from_secs(1);

/// Sends every peer an abort frame carrying `reason` (cut to
/// [`MAX_ABORT_REASON`] bytes), without blocking, and shuts every socket.
/// Returns the reason as sent.
pub(super) fn announce<'r, 'p>(
    rank: usize,
    peers: impl Iterator<Item = &'p mut Peer>,
    reason: &'r str,
) -> &'r str {
    let reason = truncate_utf8(reason, MAX_ABORT_REASON);
    let frame = Frame {
        tag: Tag {
            collective: Collective::Barrier,
            seq: 0,
            dtype: DType::U8,
            op: 0,
            root: rank as u32,
            count: 0,
        },
        len: reason.len() as u64,
        flags: FLAG_ABORT,
    };
    let header = frame.encode();
    let deadline = Deadline::after(ANNOUNCE_GRACE);
    for peer in peers {
        let fd = peer.stream.as_raw_fd();
        // A frame we left half-sent must be finished first, or the peer
        // would read our abort header as payload bytes.
        if pad_partial(fd, &mut peer.out_partial, &deadline) {
            send_until(fd, &header, reason.as_bytes(), &deadline);
        }
        // Errors only mean the connection is already gone.
        let _ = peer.stream.shutdown(Shutdown::Both);
    }
    reason
}

/// Looks at what the peer we are blocked sending to has sent us: an abort
/// frame or a closed connection means it will never read our bytes.
pub(super) fn check_send_peer(o: &mut Outgoing<'_>, tag: &Tag, timeout: Duration) -> Result<()> {
    let mut h = [0u8; HEADER_LEN];
    match recv_flags(o.fd, &mut h, libc::MSG_PEEK) {
        Ok(0) => Err(Error::PeerLost {
            rank: o.peer,
            detail: format!(
                "it closed the connection while this rank was still sending it {} \
                 ({} of {} bytes sent)",
                tag.describe(),
                o.sent,
                o.total()
            ),
        }),
        Ok(n) if n == HEADER_LEN => {
            match Frame::decode(&h) {
                Ok(f) if f.flags & FLAG_ABORT != 0 => {
                    if let Some(err) = take_abort(o.fd, o.peer, timeout) {
                        return Err(err);
                    }
                }
                // Its next data frame, sent early: it is alive and will read us.
                _ => o.watch = false,
            }
            Ok(())
        }
        // Part of a frame: not an abort announcement we can act on yet, and
        // polling for more would spin; the send itself still reports errors.
        Ok(_) => {
            o.watch = false;
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(lost_or_io(
            o.peer,
            e,
            format!("sending {} to rank {}", tag.describe(), o.peer),
        )),
    }
}

/// The error for a failed send; if the peer left an abort frame behind, that
/// is the better explanation.
pub(super) fn send_failed(
    o: &Outgoing<'_>,
    e: io::Error,
    tag: &Tag,
    at_boundary: bool,
    timeout: Duration,
) -> Error {
    let err = lost_or_io(
        o.peer,
        e,
        format!(
            "sending {} ({} of {} bytes sent)",
            tag.describe(),
            o.sent,
            o.total()
        ),
    );
    if matches!(err, Error::PeerLost { .. }) && at_boundary {
        if let Some(abort) = peek_abort(o.fd, o.peer, timeout) {
            return abort;
        }
    }
    err
}

/// If the next bytes from `fd` are an abort frame, consumes it and returns
/// the `PeerAborted` error.
fn peek_abort(fd: RawFd, peer: usize, timeout: Duration) -> Option<Error> {
    let mut h = [0u8; HEADER_LEN];
    match recv_flags(fd, &mut h, libc::MSG_PEEK) {
        Ok(HEADER_LEN) => match Frame::decode(&h) {
            Ok(f) if f.flags & FLAG_ABORT != 0 => take_abort(fd, peer, timeout),
            _ => None,
        },
        _ => None,
    }
}

/// Consumes an abort header that `recv(MSG_PEEK)` showed us, then its reason.
fn take_abort(fd: RawFd, peer: usize, timeout: Duration) -> Option<Error> {
    let mut h = [0u8; HEADER_LEN];
    match recv_flags(fd, &mut h, 0) {
        Ok(HEADER_LEN) => match Frame::decode(&h) {
            Ok(f) => Some(read_abort(fd, peer, f.len, &[], timeout)),
            Err(e) => Some(e),
        },
        _ => None,
    }
}

/// Reads an abort frame's reason (`have` holds its first bytes) and returns
/// the [`Error::PeerAborted`] to report.
pub(super) fn read_abort(
    fd: RawFd,
    peer: usize,
    len: u64,
    have: &[u8],
    timeout: Duration,
) -> Error {
    if len > MAX_ABORT_REASON as u64 {
        return Error::Protocol(format!(
            "rank {peer} sent an abort frame with a {len}-byte reason (at most \
             {MAX_ABORT_REASON} allowed)"
        ));
    }
    let len = len as usize;
    let mut reason = vec![0u8; len];
    let mut got = have.len().min(len);
    reason[..got].copy_from_slice(&have[..got]);
    // The reason left in the same write as the header; it is normally here.
    let deadline = Deadline::after(timeout.min(Duration::from_secs(1)));
    while got < len {
        match recv1(fd, &mut reason[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if deadline.expired() {
                    break;
                }
                wait_readable(fd, deadline.remaining());
            }
            Err(_) => break,
        }
    }
    let mut reason = String::from_utf8_lossy(&reason[..got]).into_owned();
    if got < len {
        reason.push_str(" [reason cut short]");
    }
    Error::PeerAborted { rank: peer, reason }
}

/// Finishes a half-sent frame with zeros, waiting for the socket until
/// `deadline`. Returns whether the stream is now at a frame boundary.
fn pad_partial(fd: RawFd, left: &mut u64, deadline: &Deadline) -> bool {
    const ZEROS: [u8; 4096] = [0; 4096];
    while *left > 0 {
        let k = (*left).min(ZEROS.len() as u64) as usize;
        match send2(fd, &ZEROS[..k], &[]) {
            Ok(n) => *left -= n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !deadline.expired() => {
                wait_writable(fd, deadline.remaining());
            }
            Err(_) => return false,
        }
    }
    true
}

/// Sends `a` then `b`, waiting for the socket until `deadline`.
fn send_until(fd: RawFd, a: &[u8], b: &[u8], deadline: &Deadline) {
    let total = a.len() + b.len();
    let mut sent = 0;
    while sent < total {
        let r = if sent < a.len() {
            send2(fd, &a[sent..], b)
        } else {
            send2(fd, &[], &b[sent - a.len()..])
        };
        match r {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !deadline.expired() => {
                wait_writable(fd, deadline.remaining());
            }
            Err(_) => return,
        }
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
