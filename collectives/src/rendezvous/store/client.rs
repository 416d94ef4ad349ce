//! Every rank's connection to the store: [`TcpStore`], which implements
//! [`Store`] over the [wire format](super::wire).

use std::fmt;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::token::Token;
use super::wire::{
    Body, Fields, MAGIC, MAX_FRAME, OP_ADD, OP_GET, OP_SET, ReadFail, ST_AUTH, ST_BAD_REQUEST,
    ST_OK, ST_RENDEZVOUS, ST_SHUTDOWN, ST_TIMEOUT, VERSION, read_frame, write_all_until,
};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::sys::dial::{self, DialError, Redial};

/// Extra time a client allows for the network on top of a `get`'s wait,
/// which the server measures.
const GET_SLACK: Duration = Duration::from_secs(5);
/// How the client retries a master that is not listening yet: every 50 ms,
/// each attempt bounded by 2 s, whatever the error (rank 0 may still be
/// starting, or its name may not resolve yet).
const REDIAL: Redial = Redial {
    first_pause: Duration::from_millis(50),
    max_pause: Duration::from_millis(50),
    attempt: Duration::from_secs(2),
    retry: |_| true,
};

struct Conn {
    stream: TcpStream,
    /// Set when a request failed half-way: the byte stream is out of step and
    /// must not be used again.
    broken: Option<String>,
}

/// A connection to the store; implements [`Store`]. Methods take `&self`
/// (a mutex serialises requests), so one client can be shared by threads.
pub struct TcpStore {
    conn: Mutex<Conn>,
    endpoint: String,
    timeout: Duration,
}

impl fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStore")
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TcpStore {
    /// Connects to the store at `host:port` as `rank` of `world_size`.
    ///
    /// Refused connections are retried until `timeout` has passed, since
    /// rank 0 may start after us; then it fails with [`Error::Timeout`]. A
    /// wrong token fails with [`Error::Auth`], a world-size disagreement or a
    /// rank out of range with [`Error::Rendezvous`]. `timeout` also bounds
    /// every later request (and is how long `get` waits for a key).
    pub fn connect(
        host: &str,
        port: u16,
        token: &Token,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> Result<TcpStore> {
        if rank >= world_size {
            return Err(Error::Rendezvous(format!(
                "rank {rank} is out of range for a world of {world_size} ranks (0..{world_size})"
            )));
        }
        let endpoint = format!("{host}:{port}");
        let deadline = Deadline::after(timeout);
        let mut stream = dial(host, port, &endpoint, &deadline)?;
        let _ = stream.set_nodelay(true);
        let hello = Body::default()
            .raw(MAGIC)
            .u8(VERSION)
            .raw(&token.bytes())
            .u64(rank as u64)
            .u64(world_size as u64);
        // The server answers a hello at once; if the dial used up the
        // deadline, still give it a moment.
        let until = Instant::now() + deadline.remaining().max(Duration::from_secs(1));
        write_all_until(&mut stream, &hello.frame(), until)
            .map_err(|e| Error::io(format!("sending hello to the store at {endpoint}"), e))?;
        let answer = read_frame(&mut stream, MAX_FRAME, Some(until)).map_err(|e| match e {
            ReadFail::Closed => Error::Rendezvous(format!(
                "the store at {endpoint} closed the connection during the hello \
                 (is something other than a ringside store listening there?)"
            )),
            ReadFail::TimedOut => deadline.error(format!(
                "a hello reply from the store at {endpoint} \
                 (is something other than a ringside store listening there?)"
            )),
            ReadFail::TooLarge(_) => Error::Protocol(format!(
                "the service at {endpoint} does not speak the ringside store protocol"
            )),
            ReadFail::Io(e) => Error::io(format!("reading the hello reply from {endpoint}"), e),
        })?;
        let mut f = Fields(&answer);
        let status = f.u8()?;
        let msg = String::from_utf8_lossy(f.bytes().unwrap_or_default()).into_owned();
        match status {
            ST_OK => {}
            ST_AUTH => {
                return Err(Error::Auth(format!(
                    "the store at {endpoint} rejected our job token; every rank of a job must \
                     use the same RINGSIDE_JOB_TOKEN (or --token)"
                )));
            }
            ST_RENDEZVOUS => {
                return Err(Error::Rendezvous(format!("the store at {endpoint}: {msg}")));
            }
            other => {
                return Err(Error::Protocol(format!(
                    "the store at {endpoint} answered the hello with status {other}: {msg}"
                )));
            }
        }
        Ok(TcpStore {
            conn: Mutex::new(Conn {
                stream,
                broken: None,
            }),
            endpoint,
            timeout,
        })
    }

    /// `host:port` of the store.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bound on every request; `get` waits this long for a key.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Like [`Store::get`] but waiting at most `wait` for the key.
    pub fn get_timeout(&self, key: &str, wait: Duration) -> Result<Vec<u8>> {
        let body = Body::default()
            .u8(OP_GET)
            .bytes(key.as_bytes())
            .u64(wait.as_millis().min(u64::MAX as u128) as u64);
        let answer = self.request(body, wait + GET_SLACK, || format!("store key {key:?}"))?;
        let mut f = Fields(&answer);
        match f.u8()? {
            ST_OK => Ok(f.bytes()?.to_vec()),
            ST_TIMEOUT => Err(Error::Timeout {
                what: format!("store key {key:?} (from {})", self.endpoint),
                after: wait,
            }),
            st => Err(self.status_error(st, &mut f)),
        }
    }

    fn check_key(key: &str) -> Result<()> {
        if key.len() > MAX_FRAME / 2 {
            return Err(Error::InvalidArgument(format!(
                "store key of {} bytes is too long",
                key.len()
            )));
        }
        Ok(())
    }

    fn status_error(&self, status: u8, f: &mut Fields<'_>) -> Error {
        let msg = f
            .bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        match status {
            ST_SHUTDOWN => Error::PeerLost {
                rank: 0,
                detail: format!("the store at {} is shutting down", self.endpoint),
            },
            ST_BAD_REQUEST => Error::Rendezvous(msg),
            st => Error::Protocol(format!(
                "the store at {} answered with status {st}: {msg}",
                self.endpoint
            )),
        }
    }

    /// Sends one request and reads its reply, within `limit`.
    fn request(&self, body: Body, limit: Duration, what: impl Fn() -> String) -> Result<Vec<u8>> {
        let frame = body.frame();
        if frame.len() > MAX_FRAME {
            return Err(Error::InvalidArgument(format!(
                "store request of {} bytes exceeds the limit of {MAX_FRAME}",
                frame.len()
            )));
        }
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| Error::Rendezvous("store client poisoned by a panicking thread".into()))?;
        if let Some(why) = &conn.broken {
            return Err(Error::Rendezvous(format!(
                "the connection to the store at {} is unusable after an earlier failure: {why}",
                self.endpoint
            )));
        }
        let until = Instant::now() + limit;
        let result = match write_all_until(&mut conn.stream, &frame, until) {
            Ok(()) => read_frame(&mut conn.stream, MAX_FRAME, Some(until)),
            Err(e) => Err(ReadFail::from(e)),
        };
        match result {
            Ok(answer) => Ok(answer),
            Err(fail) => {
                let err = match fail {
                    ReadFail::Closed => Error::PeerLost {
                        rank: 0,
                        detail: format!(
                            "the store at {} closed the connection (did rank 0 exit?)",
                            self.endpoint
                        ),
                    },
                    ReadFail::TimedOut => Error::Timeout {
                        what: format!("{} (no reply from the store at {})", what(), self.endpoint),
                        after: limit,
                    },
                    ReadFail::TooLarge(n) => Error::Protocol(format!(
                        "the store at {} sent a reply of {n} bytes",
                        self.endpoint
                    )),
                    ReadFail::Io(e) => {
                        Error::io(format!("talking to the store at {}", self.endpoint), e)
                    }
                };
                conn.broken = Some(err.to_string());
                let _ = conn.stream.shutdown(Shutdown::Both);
                Err(err)
            }
        }
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        TcpStore::check_key(key)?;
        let body = Body::default()
            .u8(OP_SET)
            .bytes(key.as_bytes())
            .bytes(value);
        let answer = self.request(body, self.timeout, || format!("setting store key {key:?}"))?;
        let mut f = Fields(&answer);
        match f.u8()? {
            ST_OK => Ok(()),
            st => Err(self.status_error(st, &mut f)),
        }
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        TcpStore::check_key(key)?;
        self.get_timeout(key, self.timeout)
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        TcpStore::check_key(key)?;
        let body = Body::default().u8(OP_ADD).bytes(key.as_bytes()).i64(delta);
        let answer = self.request(body, self.timeout, || {
            format!("adding to store key {key:?}")
        })?;
        let mut f = Fields(&answer);
        match f.u8()? {
            ST_OK => f.i64(),
            st => Err(self.status_error(st, &mut f)),
        }
    }
}

/// Connects to `host:port`, retrying until the deadline while nobody listens.
fn dial(host: &str, port: u16, endpoint: &str, deadline: &Deadline) -> Result<TcpStream> {
    let resolve = || {
        (host, port)
            .to_socket_addrs()
            .map(Iterator::collect)
            // Name lookups can fail transiently while a cluster boots; keep
            // trying until the deadline, but say so if it never resolves.
            .map_err(|e| format!("cannot resolve {host:?}: {e}"))
    };
    let connect = |addr, wait| TcpStream::connect_timeout(&addr, wait);
    dial::dial(deadline, &REDIAL, resolve, connect).map_err(|e| {
        let last = match e {
            DialError::Expired { last } => last,
            // REDIAL retries every error, so this is only for completeness.
            DialError::Failed { error, .. } => Some(error.to_string()),
        };
        let last = last.unwrap_or_else(|| "no attempt finished in time".into());
        deadline.error(format!(
            "the store at {endpoint}, which stayed unreachable (last error: {last}); \
             is rank 0 running, and are MASTER_ADDR/MASTER_PORT right?"
        ))
    })
}
