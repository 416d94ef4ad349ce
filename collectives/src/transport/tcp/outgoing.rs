//! One outgoing frame in flight, and how a socket error becomes a
//! [`Error`]: what both the progress loop ([`super::progress`]) and the abort
//! protocol ([`super::abort`]) work with, so neither needs the other's types.

use std::io;
use std::os::fd::RawFd;

use crate::error::Error;
use crate::sys::connection_lost;
use crate::sys::socket::send2;
use crate::transport::HEADER_LEN;

/// One outgoing frame in flight.
pub(super) struct Outgoing<'a> {
    pub(super) peer: usize,
    pub(super) fd: RawFd,
    pub(super) header: [u8; HEADER_LEN],
    pub(super) payload: &'a [u8],
    /// Bytes of header + payload sent so far.
    pub(super) sent: usize,
    /// Whether to watch the peer's incoming bytes for an abort frame while our
    /// send is blocked (a peer that gave up stops reading from us).
    pub(super) watch: bool,
}

impl Outgoing<'_> {
    pub(super) fn total(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    pub(super) fn done(&self) -> bool {
        self.sent == self.total()
    }

    /// Sends as much as the socket takes now; `Ok(())` when done or when the
    /// socket would block.
    pub(super) fn progress(&mut self) -> io::Result<()> {
        while !self.done() {
            let (h, p) = if self.sent < HEADER_LEN {
                (&self.header[self.sent..], self.payload)
            } else {
                (&[][..], &self.payload[self.sent - HEADER_LEN..])
            };
            match send2(self.fd, h, p) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Maps a socket error to [`Error::PeerLost`] when it means the connection
/// is gone, to [`Error::Io`] otherwise.
pub(super) fn lost_or_io(peer: usize, e: io::Error, doing: String) -> Error {
    if connection_lost(&e) {
        Error::PeerLost {
            rank: peer,
            detail: format!("{e} while {doing}"),
        }
    } else {
        Error::io(format!("{doing} (rank {peer})"), e)
    }
}
