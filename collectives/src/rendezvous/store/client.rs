//! Every rank's connection to the store: [`TcpStore`], which implements
//! [`Store`] over the [wire format](super::wire).

use std::fmt;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::proof::{self, NONCE, PROOF, Transcript};
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
/// The first pause before dialling again after the store closed a hello; it
/// doubles up to [`HELLO_MAX_PAUSE`].
const HELLO_FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between hellos.
const HELLO_MAX_PAUSE: Duration = Duration::from_secs(1);

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
    /// hello the store closes before answering (it drops the oldest silent
    /// connections when strangers flood it) is retried too, with a growing
    /// pause, until `timeout`; then the error says what kept happening. The
    /// token itself is never sent (see `proof` in the store module): a store that
    /// cannot prove it holds `token` (ranks with different tokens, or another
    /// program on the port) fails with [`Error::Auth`] before the client proves
    /// anything. A world-size disagreement or a rank out of range fails with
    /// [`Error::Rendezvous`]. `timeout` also bounds every later request (and
    /// is how long `get` waits for a key).
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
        let started = Instant::now();
        let mut pause = HELLO_FIRST_PAUSE;
        let mut tries = 0u32;
        let stream = loop {
            let mut stream = dial(host, port, &endpoint, &deadline)?;
            tries += 1;
            let me = Hello {
                endpoint: &endpoint,
                token,
                rank: rank as u64,
                world: world_size as u64,
                deadline: &deadline,
            };
            match me.handshake(&mut stream) {
                Ok(()) => break stream,
                Err(HelloFail::Fatal(e)) => return Err(e),
                Err(HelloFail::Closed { proven }) => {
                    let left = deadline.remaining();
                    if left < pause {
                        return Err(closed_during_hello(&endpoint, proven, tries, started));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(HELLO_MAX_PAUSE);
                }
            }
        };
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

/// Why one hello failed.
enum HelloFail {
    /// The store closed the connection before welcoming us (`proven`: after
    /// it had proved it holds the token): worth dialling again.
    Closed { proven: bool },
    /// Anything else: retrying would give the same answer.
    Fatal(Error),
}

/// One hello: the challenge–response of [`proof`](super::proof) on a fresh
/// connection.
struct Hello<'a> {
    endpoint: &'a str,
    token: &'a Token,
    rank: u64,
    world: u64,
    deadline: &'a Deadline,
}

impl Hello<'_> {
    fn handshake(&self, stream: &mut TcpStream) -> std::result::Result<(), HelloFail> {
        let endpoint = self.endpoint;
        let _ = stream.set_nodelay(true);
        let client_nonce = proof::nonce().map_err(HelloFail::Fatal)?;
        let hello = Body::default()
            .raw(MAGIC)
            .u8(VERSION)
            .raw(&client_nonce)
            .u64(self.rank)
            .u64(self.world);
        // The server answers a hello at once; if the dial used up the
        // deadline, still give it a moment.
        let until = Instant::now() + self.deadline.remaining().max(Duration::from_secs(1));
        self.send(stream, hello, until, false)?;
        let challenge = self.receive(stream, until, false)?;
        let mut f = Fields(&challenge);
        let not_a_store = |_| {
            HelloFail::Fatal(Error::Protocol(format!(
                "the service at {endpoint} does not speak the ringside store protocol"
            )))
        };
        match f.u8().map_err(not_a_store)? {
            ST_OK => {}
            st => return Err(HelloFail::Fatal(status_error(endpoint, st, &mut f))),
        }
        let mut server_nonce = [0u8; NONCE];
        server_nonce.copy_from_slice(f.take(NONCE).map_err(not_a_store)?);
        let server_proof = f.take(PROOF).map_err(not_a_store)?;
        let transcript = Transcript {
            client_nonce,
            server_nonce,
            rank: self.rank,
            world: self.world,
        };
        if !proof::same(&transcript.server_proof(self.token), server_proof) {
            // Our proof is not sent to a service that could not show the token.
            return Err(HelloFail::Fatal(Error::Auth(format!(
                "the store at {endpoint} could not prove it holds this job's token, so we \
                 did not prove ours: either the ranks were given different tokens (every \
                 rank must use the same RINGSIDE_JOB_TOKEN or --token), or what listens \
                 there is not this job's store (another job's, or another program on \
                 MASTER_PORT)"
            ))));
        }
        let answer = Body::default().raw(&transcript.client_proof(self.token));
        self.send(stream, answer, until, true)?;
        let welcome = self.receive(stream, until, true)?;
        let mut f = Fields(&welcome);
        match f.u8().map_err(not_a_store)? {
            ST_OK => Ok(()),
            ST_AUTH => Err(HelloFail::Fatal(Error::Auth(format!(
                "the store at {endpoint} proved it holds our job token but refused our proof \
                 of it (a ringside bug: please report it)"
            )))),
            st => Err(HelloFail::Fatal(status_error(endpoint, st, &mut f))),
        }
    }

    fn send(
        &self,
        stream: &mut TcpStream,
        body: Body,
        until: Instant,
        proven: bool,
    ) -> std::result::Result<(), HelloFail> {
        write_all_until(stream, &body.frame(), until)
            .map_err(|e| self.read_fail(ReadFail::from(e), proven))
    }

    fn receive(
        &self,
        stream: &mut TcpStream,
        until: Instant,
        proven: bool,
    ) -> std::result::Result<Vec<u8>, HelloFail> {
        read_frame(stream, MAX_FRAME, Some(until)).map_err(|e| self.read_fail(e, proven))
    }

    fn read_fail(&self, fail: ReadFail, proven: bool) -> HelloFail {
        let endpoint = self.endpoint;
        HelloFail::Fatal(match fail {
            ReadFail::Closed => return HelloFail::Closed { proven },
            ReadFail::TimedOut if proven => self
                .deadline
                .error(format!("the store at {endpoint} to finish our hello")),
            ReadFail::TimedOut => self.deadline.error(format!(
                "a hello reply from {endpoint}: something accepts connections there but does \
                 not answer like a ringside store (another program on MASTER_PORT?)"
            )),
            ReadFail::TooLarge(_) => Error::Protocol(format!(
                "the service at {endpoint} does not speak the ringside store protocol"
            )),
            ReadFail::Io(e) => Error::io(format!("saying hello to the store at {endpoint}"), e),
        })
    }
}

/// A hello's status other than OK, with the store's message.
fn status_error(endpoint: &str, status: u8, f: &mut Fields<'_>) -> Error {
    let msg = String::from_utf8_lossy(f.bytes().unwrap_or_default()).into_owned();
    match status {
        ST_RENDEZVOUS => Error::Rendezvous(format!("the store at {endpoint}: {msg}")),
        other => Error::Protocol(format!(
            "the store at {endpoint} answered the hello with status {other}: {msg}"
        )),
    }
}

/// The error once every hello until the deadline was closed unanswered.
fn closed_during_hello(endpoint: &str, proven: bool, tries: u32, started: Instant) -> Error {
    let over = format!("{tries} tries in {:.1} s", started.elapsed().as_secs_f64());
    Error::Rendezvous(if proven {
        format!(
            "the store at {endpoint} proved it holds the job token but kept closing the \
             connection before welcoming us ({over}): it is flooded with connections that \
             do not finish their hello, and drops the oldest"
        )
    } else {
        format!(
            "the store at {endpoint} kept closing the connection before answering the hello \
             ({over}): either it is flooded with connections that never say hello and drops \
             the oldest, or what listens there is not a ringside store (another program on \
             MASTER_PORT?)"
        )
    })
}
