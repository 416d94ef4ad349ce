//! The store's wire format, spoken by [`server`](super::server) and
//! [`client`](super::client) alike.
//!
//! Every message is a frame: a little-endian `u32` body length, then the body.
//! Strings and byte strings inside a body are a `u32` length and the bytes;
//! integers are little-endian `u64`/`i64`.
//!
//! - hello (client → server): `"RSKV"`, version `u8`, client nonce `[u8; 16]`,
//!   rank `u64`, world size `u64`.
//! - challenge (server → client): status `u8`; if OK, the server's nonce
//!   `[u8; 16]` and its proof `[u8; 32]` (see [`proof`](super::proof)), else a
//!   message, and the server closes the connection.
//! - proof (client → server), sent only once the server's proof checked out:
//!   the client's proof `[u8; 32]`.
//! - welcome (server → client): status `u8` and a message; the server closes
//!   the connection unless the status is OK.
//!
//! The token itself never travels (version 1 sent it in the hello).
//! - request: op `u8` (1 set, 2 get, 3 add), key, then the value (set), the
//!   wait in milliseconds `u64` (get) or the delta `i64` (add).
//! - reply: status `u8`, then the value (get), the new counter (add), or a
//!   message (any error status).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sys::{connection_lost, is_timeout};

pub(super) const MAGIC: &[u8; 4] = b"RSKV";
/// 2: the challenge–response; 1 sent the token in clear in the hello.
pub(super) const VERSION: u8 = 2;
/// A hello or a proof is tiny; a stranger cannot make the server allocate
/// more before it has proved it holds the token.
pub(super) const MAX_HELLO: usize = 64;
/// Store values are small (addresses, ids); this bounds memory a buggy
/// client can make the server allocate.
pub(super) const MAX_FRAME: usize = 256 << 20;

pub(super) const OP_SET: u8 = 1;
pub(super) const OP_GET: u8 = 2;
pub(super) const OP_ADD: u8 = 3;

pub(super) const ST_OK: u8 = 0;
pub(super) const ST_AUTH: u8 = 1;
pub(super) const ST_RENDEZVOUS: u8 = 2;
pub(super) const ST_TIMEOUT: u8 = 3;
pub(super) const ST_BAD_REQUEST: u8 = 4;
pub(super) const ST_SHUTDOWN: u8 = 5;

/// Builds a frame body.
#[derive(Default)]
pub(super) struct Body(Vec<u8>);

impl Body {
    pub(super) fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub(super) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    pub(super) fn bytes(mut self, v: &[u8]) -> Self {
        // Lengths above u32 cannot be framed; callers check MAX_FRAME first.
        self.0
            .extend_from_slice(&(v.len().min(u32::MAX as usize) as u32).to_le_bytes());
        self.0.extend_from_slice(v);
        self
    }
    /// The frame: length prefix and body.
    pub(super) fn frame(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.0.len());
        out.extend_from_slice(&(self.0.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.0);
        out
    }
}

/// Reads fields out of a frame body.
pub(super) struct Fields<'a>(pub(super) &'a [u8]);

impl<'a> Fields<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(Error::Protocol("store message is truncated".into()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    pub(super) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    pub(super) fn i64(&mut self) -> Result<i64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(i64::from_le_bytes(b))
    }
    pub(super) fn bytes(&mut self) -> Result<&'a [u8]> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        let n = u32::from_le_bytes(b) as usize;
        self.take(n)
    }
    pub(super) fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec())
            .map_err(|_| Error::Protocol("store key is not valid UTF-8".into()))
    }
}

/// Why a frame could not be read.
pub(super) enum ReadFail {
    /// The peer closed the connection (cleanly or by reset).
    Closed,
    /// Nothing arrived before the deadline.
    TimedOut,
    /// The frame announced more than we accept.
    TooLarge(usize),
    /// Another I/O error.
    Io(std::io::Error),
}

impl From<std::io::Error> for ReadFail {
    fn from(e: std::io::Error) -> Self {
        // Timeouts first: a socket timeout is not a lost connection.
        if is_timeout(&e) {
            ReadFail::TimedOut
        } else if connection_lost(&e) {
            ReadFail::Closed
        } else {
            ReadFail::Io(e)
        }
    }
}

/// Fills `buf`, giving up at `deadline` (`None`: wait as long as it takes,
/// used by server threads, which are unblocked by `shutdown` instead).
pub(super) fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> std::result::Result<(), ReadFail> {
    let mut done = 0;
    while done < buf.len() {
        let wait = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadFail::TimedOut);
                }
                // A zero read timeout means "block forever" to the OS; keep ≥ 1 ms.
                Some(left.max(Duration::from_millis(1)))
            }
            None => None,
        };
        stream.set_read_timeout(wait)?;
        match stream.read(&mut buf[done..]) {
            Ok(0) => return Err(ReadFail::Closed),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

pub(super) fn read_frame(
    stream: &mut TcpStream,
    max: usize,
    deadline: Option<Instant>,
) -> std::result::Result<Vec<u8>, ReadFail> {
    let mut len = [0u8; 4];
    read_full(stream, &mut len, deadline)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(ReadFail::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    read_full(stream, &mut body, deadline)?;
    Ok(body)
}

pub(super) fn write_all_until(
    stream: &mut TcpStream,
    mut buf: &[u8],
    until: Instant,
) -> std::io::Result<()> {
    while !buf.is_empty() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
        match stream.write(buf) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
