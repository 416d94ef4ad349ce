//! The TCP key-value store rank 0 hosts, and the job token that guards it.
//!
//! Rank 0 runs a [`StoreServer`]; every rank (rank 0 too) talks to it through a
//! [`TcpStore`], which implements [`Store`]. The server keeps everything in
//! memory and serves each connection on its own thread, so a `get` that waits
//! for a key blocks only its own connection.
//!
//! # Wire protocol
//! Every message is a frame: a little-endian `u32` body length, then the body.
//! Strings and byte strings inside a body are a `u32` length and the bytes;
//! integers are little-endian `u64`/`i64`.
//!
//! - hello (client → server): `"RSKV"`, version `u8`, token `[u8; 16]`,
//!   rank `u64`, world size `u64`. The server answers with a status byte and a
//!   message, and closes the connection unless the status is OK.
//! - request: op `u8` (1 set, 2 get, 3 add), key, then the value (set), the
//!   wait in milliseconds `u64` (get) or the delta `i64` (add).
//! - reply: status `u8`, then the value (get), the new counter (add), or a
//!   message (any error status).
//!
//! The token travels in clear text: it keeps other jobs and stray connections
//! out of the store, not an attacker who can read the network.

use std::collections::HashMap;
use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::rendezvous::{Store, parse_i64};

/// The environment variable that carries the job token to every rank.
pub const TOKEN_VAR: &str = "RINGSIDE_JOB_TOKEN";

/// A 16-byte secret shared by the ranks of one job; the store refuses
/// connections that do not present it.
///
/// `Display` writes it as 32 lowercase hex digits (that is how it travels in
/// `RINGSIDE_JOB_TOKEN`); `Debug` hides it so it does not end up in logs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; 16]);

/// Launcher variables that identify one job (or job step); hashed, in this
/// order, into a derived token. Missing ones are skipped.
const JOB_ID_VARS: &[&str] = &[
    "TORCHELASTIC_RUN_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
];

impl Token {
    /// A fresh random token from the operating system's generator.
    pub fn generate() -> Result<Token> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::Rendezvous(format!("cannot draw a random job token: {e}")))?;
        Ok(Token(bytes))
    }

    /// A token with these bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Token {
        Token(bytes)
    }

    /// The raw bytes (what [`crate::transport::TransportOptions::token`] takes).
    pub const fn bytes(&self) -> [u8; 16] {
        self.0
    }

    /// Parses 32 hex digits (surrounding whitespace ignored). The error never
    /// repeats the input, which may be a real token with a typo.
    pub fn parse(s: &str) -> Result<Token> {
        let s = s.trim();
        if s.len() != 32 {
            return Err(Error::InvalidArgument(format!(
                "a job token is 32 hex digits (16 bytes); got {} characters",
                s.chars().count()
            )));
        }
        let mut bytes = [0u8; 16];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let hi = hex_digit(pair[0]);
            let lo = hex_digit(pair[1]);
            match (hi, lo) {
                (Some(hi), Some(lo)) => bytes[i] = hi << 4 | lo,
                _ => {
                    return Err(Error::InvalidArgument(
                        "a job token is 32 hex digits (0-9, a-f); this one has other characters"
                            .into(),
                    ));
                }
            }
        }
        Ok(Token(bytes))
    }

    /// The job token from the process environment; see [`Token::from_vars`].
    pub fn from_env() -> Result<Option<Token>> {
        Token::from_vars(&env_var)
    }

    /// The job token from a set of environment variables (`get` returns a
    /// variable's value):
    ///
    /// 1. `RINGSIDE_JOB_TOKEN` (32 hex digits) if set — an error if malformed;
    /// 2. else, if an external launcher names the job (`TORCHELASTIC_RUN_ID`,
    ///    `PMIX_NAMESPACE` / `OMPI_MCA_ess_base_jobid`,
    ///    `SLURM_JOB_ID` + `SLURM_STEP_ID`), a token derived from those ids and
    ///    `MASTER_ADDR`/`MASTER_PORT` (see [`Token::derive`]);
    /// 3. else `None`.
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Token>> {
        if let Some(v) = get(TOKEN_VAR) {
            return Token::parse(&v)
                .map(Some)
                .map_err(|e| Error::Rendezvous(format!("{TOKEN_VAR} is not a valid token: {e}")));
        }
        if JOB_ID_VARS.iter().any(|k| get(k).is_some()) {
            return Ok(Some(Token::derive(get)));
        }
        Ok(None)
    }

    /// A token every rank of a job computes alike without being told: a hash
    /// of the launcher's job ids (those of `TORCHELASTIC_RUN_ID`,
    /// `PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`, `SLURM_JOB_ID`,
    /// `SLURM_STEP_ID` that are set) and `MASTER_ADDR`/`MASTER_PORT`.
    ///
    /// **Weaker than a random token**: anyone who can read the job's
    /// environment (or guess its job id) can compute it. It keeps *other jobs*
    /// out of the store — a stale rank of yesterday's run, a second job that
    /// picked the same port — not a determined attacker. Set
    /// `RINGSIDE_JOB_TOKEN` to a random value on every rank for that.
    pub fn derive(get: &dyn Fn(&str) -> Option<String>) -> Token {
        // FNV-1a 128: stable across Rust versions and machines (std's
        // DefaultHasher is not), which matters because every node computes it.
        const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
        const PRIME: u128 = 0x0000000001000000000000000000013B;
        let mut h = OFFSET;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u128::from(b);
                h = h.wrapping_mul(PRIME);
            }
        };
        eat(b"ringside derived job token v1\0");
        for name in JOB_ID_VARS.iter().chain(&["MASTER_ADDR", "MASTER_PORT"]) {
            if let Some(v) = get(name) {
                eat(name.as_bytes());
                eat(b"=");
                eat(v.as_bytes());
                eat(b"\0");
            }
        }
        Token(h.to_le_bytes())
    }

    /// Compares without stopping at the first differing byte, so response
    /// timing does not reveal how much of a guessed token was right.
    fn matches(&self, other: &[u8; 16]) -> bool {
        self.0
            .iter()
            .zip(other)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// Reads a process environment variable; non-UTF-8 values are converted lossily.
pub(crate) fn env_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl FromStr for Token {
    type Err = Error;
    fn from_str(s: &str) -> Result<Token> {
        Token::parse(s)
    }
}

// ---------------------------------------------------------------------------
// Wire format

const MAGIC: &[u8; 4] = b"RSKV";
const VERSION: u8 = 1;
/// A hello is tiny; a stranger cannot make the server allocate more before
/// it has shown the token.
const MAX_HELLO: usize = 64;
/// Store values are small (addresses, ids); this bounds memory a buggy
/// client can make the server allocate.
const MAX_FRAME: usize = 256 << 20;

const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;

const ST_OK: u8 = 0;
const ST_AUTH: u8 = 1;
const ST_RENDEZVOUS: u8 = 2;
const ST_TIMEOUT: u8 = 3;
const ST_BAD_REQUEST: u8 = 4;
const ST_SHUTDOWN: u8 = 5;

/// Builds a frame body.
#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    fn bytes(mut self, v: &[u8]) -> Self {
        // Lengths above u32 cannot be framed; callers check MAX_FRAME first.
        self.0
            .extend_from_slice(&(v.len().min(u32::MAX as usize) as u32).to_le_bytes());
        self.0.extend_from_slice(v);
        self
    }
    /// The frame: length prefix and body.
    fn frame(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.0.len());
        out.extend_from_slice(&(self.0.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.0);
        out
    }
}

/// Reads fields out of a frame body.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(Error::Protocol("store message is truncated".into()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn i64(&mut self) -> Result<i64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(i64::from_le_bytes(b))
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        let n = u32::from_le_bytes(b) as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec())
            .map_err(|_| Error::Protocol("store key is not valid UTF-8".into()))
    }
}

/// Why a frame could not be read.
enum ReadFail {
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
        match e.kind() {
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => ReadFail::Closed,
            ErrorKind::WouldBlock | ErrorKind::TimedOut => ReadFail::TimedOut,
            _ => ReadFail::Io(e),
        }
    }
}

/// Fills `buf`, giving up at `deadline` (`None`: wait as long as it takes,
/// used by server threads, which are unblocked by `shutdown` instead).
fn read_full(
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

fn read_frame(
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

// ---------------------------------------------------------------------------
// Server

/// How long a new connection may take to say hello before the server drops it.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds a server write to a client that stopped reading.
const SERVER_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(100);

/// State shared by the server's threads.
struct Shared {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    stop: AtomicBool,
    token: Token,
    world_size: usize,
    /// Open connections, so `drop` can unblock their threads.
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
}

impl Shared {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Vec<u8>>> {
        // A panicking connection thread cannot leave the map half-updated
        // (every update is one insert), so a poisoned lock is safe to use.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The store server. Serves on background threads until dropped; dropping it
/// closes the listener and every connection and joins all its threads.
pub struct StoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl fmt::Debug for StoreServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreServer")
            .field("addr", &self.addr)
            .field("world_size", &self.shared.world_size)
            .finish_non_exhaustive()
    }
}

impl StoreServer {
    /// Listens on `addr` (port 0 picks a free port; see [`StoreServer::local_addr`])
    /// for the ranks of a job of `world_size` ranks that present `token`.
    pub fn bind(addr: SocketAddr, token: Token, world_size: usize) -> Result<StoreServer> {
        if world_size == 0 {
            return Err(Error::InvalidArgument(
                "a store needs a world size of at least 1".into(),
            ));
        }
        let listener = listen(addr)?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("store: reading the bound address", e))?;
        let shared = Arc::new(Shared {
            map: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            token,
            world_size,
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
        });
        let workers = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let shared = Arc::clone(&shared);
            let workers = Arc::clone(&workers);
            std::thread::Builder::new()
                .name("ringside-store-accept".into())
                .spawn(move || accept_loop(listener, shared, workers))
                .map_err(|e| Error::io("store: starting the accept thread", e))?
        };
        Ok(StoreServer {
            addr: local,
            shared,
            accept: Some(accept),
            workers,
        })
    }

    /// The address the server listens on (with the real port if bound to 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The world size the server admits.
    pub fn world_size(&self) -> usize {
        self.shared.world_size
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            // Taking the lock orders this notify after any waiter's stop check.
            let _map = self.shared.map();
            self.shared.changed.notify_all();
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for stream in self.shared.conns().values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in workers {
            let _ = w.join();
        }
    }
}

/// Binds with SO_REUSEADDR, so a store can restart on its port right after a
/// previous job (TIME_WAIT sockets) — but not while another one listens there.
fn listen(addr: SocketAddr) -> Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let fail = |e: std::io::Error| {
        let hint = match e.kind() {
            ErrorKind::AddrInUse => Some(
                "address already in use (is another job running? pick another --master-port)"
                    .to_string(),
            ),
            ErrorKind::AddrNotAvailable => Some(
                "that address is not on this machine (MASTER_ADDR must name rank 0's host)"
                    .to_string(),
            ),
            ErrorKind::PermissionDenied => Some(format!(
                "permission denied (ports below 1024 need privileges; pick another --master-port): {e}"
            )),
            _ => None,
        };
        match hint {
            Some(h) => Error::Rendezvous(format!("cannot host the store on {addr}: {h}")),
            None => Error::io(format!("cannot host the store on {addr}"), e),
        }
    };
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(fail)?;
    socket.set_reuse_address(true).map_err(fail)?;
    socket.bind(&addr.into()).map_err(fail)?;
    socket.listen(1024).map_err(fail)?;
    Ok(socket.into())
}

/// Waits up to `timeout` for a connection to arrive on `listener`.
fn readable(listener: &TcpListener, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is a valid pollfd for the duration of the call and we pass
    // a count of exactly one.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0
}

fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    // Poll with a timeout rather than block in accept, so drop can stop us
    // without having to connect to ourselves.
    while !shared.stop.load(Ordering::SeqCst) {
        if !readable(&listener, ACCEPT_POLL) {
            continue;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            // A client that gave up before we accepted it, or a transient
            // resource shortage: keep serving the others.
            Err(_) => continue,
        };
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        match stream.try_clone() {
            Ok(clone) => {
                shared.conns().insert(id, clone);
            }
            // Without a clone drop could not unblock this connection's thread.
            Err(_) => continue,
        }
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("ringside-store-conn".into())
            .spawn(move || {
                serve(stream, &s);
                s.conns().remove(&id);
            });
        let mut w = workers.lock().unwrap_or_else(|e| e.into_inner());
        w.retain(|h| !h.is_finished());
        match spawned {
            Ok(h) => w.push(h),
            Err(_) => {
                if let Some(s) = shared.conns().remove(&id) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
    }
}

fn reply(stream: &mut TcpStream, body: Body) -> bool {
    stream.write_all(&body.frame()).is_ok()
}

fn reply_error(stream: &mut TcpStream, status: u8, msg: &str) -> bool {
    reply(stream, Body::default().u8(status).bytes(msg.as_bytes()))
}

/// Serves one connection: the hello, then requests until it closes.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(SERVER_WRITE_TIMEOUT));
    let hello = match read_frame(&mut stream, MAX_HELLO, Some(Instant::now() + HELLO_TIMEOUT)) {
        Ok(b) => b,
        Err(_) => return,
    };
    match check_hello(&hello, shared) {
        Ok(()) => {
            if !reply(&mut stream, Body::default().u8(ST_OK).bytes(b"")) {
                return;
            }
        }
        Err((status, msg)) => {
            // Never echo the token: the message only says it did not match.
            reply_error(&mut stream, status, &msg);
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
    loop {
        let body = match read_frame(&mut stream, MAX_FRAME, None) {
            Ok(b) => b,
            Err(ReadFail::TooLarge(n)) => {
                reply_error(
                    &mut stream,
                    ST_BAD_REQUEST,
                    &format!("request of {n} bytes exceeds the store's limit of {MAX_FRAME}"),
                );
                return;
            }
            Err(_) => return,
        };
        let answer = match handle(&body, shared) {
            Ok(b) => b,
            Err((status, msg)) => Body::default().u8(status).bytes(msg.as_bytes()),
        };
        if !reply(&mut stream, answer) {
            return;
        }
    }
}

fn check_hello(body: &[u8], shared: &Shared) -> std::result::Result<(), (u8, String)> {
    let bad = |_| (ST_RENDEZVOUS, "malformed hello".to_string());
    let mut f = Fields(body);
    if f.take(4).map_err(bad)? != MAGIC {
        return Err((
            ST_RENDEZVOUS,
            "this is a ringside store; the client does not speak its protocol".into(),
        ));
    }
    let version = f.u8().map_err(bad)?;
    if version != VERSION {
        return Err((
            ST_RENDEZVOUS,
            format!("store protocol version {version} is not supported (server speaks {VERSION})"),
        ));
    }
    let mut token = [0u8; 16];
    token.copy_from_slice(f.take(16).map_err(bad)?);
    let rank = f.u64().map_err(bad)?;
    let world = f.u64().map_err(bad)?;
    if !shared.token.matches(&token) {
        return Err((ST_AUTH, "wrong job token".into()));
    }
    let expected = shared.world_size as u64;
    if world != expected {
        return Err((
            ST_RENDEZVOUS,
            format!(
                "rank {rank} says the world has {world} ranks, but the store on rank 0 was \
                 started for {expected} (do all ranks agree on WORLD_SIZE?)"
            ),
        ));
    }
    if rank >= expected {
        return Err((
            ST_RENDEZVOUS,
            format!("rank {rank} is out of range for a world of {expected} ranks (0..{expected})"),
        ));
    }
    Ok(())
}

fn handle(body: &[u8], shared: &Shared) -> std::result::Result<Body, (u8, String)> {
    let bad = |e: Error| (ST_BAD_REQUEST, e.to_string());
    let mut f = Fields(body);
    match f.u8().map_err(bad)? {
        OP_SET => {
            let key = f.string().map_err(bad)?;
            let value = f.bytes().map_err(bad)?.to_vec();
            shared.map().insert(key, value);
            shared.changed.notify_all();
            Ok(Body::default().u8(ST_OK))
        }
        OP_GET => {
            let key = f.string().map_err(bad)?;
            let wait = Duration::from_millis(f.u64().map_err(bad)?);
            let until = Instant::now() + wait;
            let mut map = shared.map();
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return Err((ST_SHUTDOWN, "the store is shutting down".into()));
                }
                if let Some(v) = map.get(&key) {
                    return Ok(Body::default().u8(ST_OK).bytes(v));
                }
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err((ST_TIMEOUT, String::new()));
                }
                map = shared
                    .changed
                    .wait_timeout(map, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        OP_ADD => {
            let key = f.string().map_err(bad)?;
            let delta = f.i64().map_err(bad)?;
            let mut map = shared.map();
            let cur = match map.get(&key) {
                Some(v) => parse_i64(&key, v).map_err(bad)?,
                None => 0,
            };
            let new = cur.checked_add(delta).ok_or_else(|| {
                (
                    ST_BAD_REQUEST,
                    format!("store counter {key:?} would overflow ({cur} + {delta})"),
                )
            })?;
            map.insert(key, new.to_string().into_bytes());
            drop(map);
            shared.changed.notify_all();
            Ok(Body::default().u8(ST_OK).i64(new))
        }
        op => Err((ST_BAD_REQUEST, format!("unknown store operation {op}"))),
    }
}

// ---------------------------------------------------------------------------
// Client

/// Extra time a client allows for the network on top of a `get`'s wait,
/// which the server measures.
const GET_SLACK: Duration = Duration::from_secs(5);
/// Pause between attempts to reach a master that is not listening yet.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

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
            .raw(&token.0)
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

fn write_all_until(stream: &mut TcpStream, mut buf: &[u8], until: Instant) -> std::io::Result<()> {
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

/// Connects to `host:port`, retrying until the deadline while nobody listens.
fn dial(host: &str, port: u16, endpoint: &str, deadline: &Deadline) -> Result<TcpStream> {
    let mut last: Option<String> = None;
    loop {
        match (host, port).to_socket_addrs() {
            Ok(addrs) => {
                for addr in addrs {
                    let left = deadline.remaining();
                    if left.is_zero() {
                        break;
                    }
                    match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(2))) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = Some(e.to_string()),
                    }
                }
            }
            // Name lookups can fail transiently while a cluster boots; keep
            // trying until the deadline, but say so if it never resolves.
            Err(e) => last = Some(format!("cannot resolve {host:?}: {e}")),
        }
        if deadline.expired() {
            let last = last.unwrap_or_else(|| "no attempt finished in time".into());
            return Err(deadline.error(format!(
                "the store at {endpoint}, which stayed unreachable (last error: {last}); \
                 is rank 0 running, and are MASTER_ADDR/MASTER_PORT right?"
            )));
        }
        std::thread::sleep(RETRY_PAUSE.min(deadline.remaining()));
    }
}

// ---------------------------------------------------------------------------
// Barrier

/// A barrier over a store: returns once all `world_size` ranks have called
/// `join` with the same `prefix`, or fails with [`Error::Timeout`] naming the
/// ranks that never arrived ("waited … for ranks [2, 3] to join").
///
/// Each barrier needs its own `prefix`: the counters under it are never reset.
pub fn join(
    store: &dyn Store,
    prefix: &str,
    rank: usize,
    world_size: usize,
    timeout: Duration,
) -> Result<()> {
    if rank >= world_size {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is out of range for a world of {world_size} ranks"
        )));
    }
    let arrived = arrive(store, prefix, rank)?;
    await_arrivals(store, prefix, arrived, world_size, world_size, timeout)
}

/// Marks `rank` as arrived at barrier `prefix`; returns how many have arrived.
pub(crate) fn arrive(store: &dyn Store, prefix: &str, rank: usize) -> Result<i64> {
    // Per-rank markers let a timed-out barrier say who is missing.
    store.add(&format!("{prefix}/rank/{rank}"), 1)?;
    store.add(&format!("{prefix}/count"), 1)
}

/// Waits until `expected` ranks (of `world_size`) have arrived at `prefix`,
/// naming the missing ones on timeout.
pub(crate) fn await_arrivals(
    store: &dyn Store,
    prefix: &str,
    mut arrived: i64,
    expected: usize,
    world_size: usize,
    timeout: Duration,
) -> Result<()> {
    let deadline = Deadline::after(timeout);
    let count_key = format!("{prefix}/count");
    let mut pause = Duration::from_millis(1);
    while arrived < expected as i64 {
        if deadline.expired() {
            let mut missing = Vec::new();
            for r in 0..world_size {
                // `add` (not `get`) reads markers: `get` would wait for absent keys.
                if store.add(&format!("{prefix}/rank/{r}"), 0)? == 0 {
                    missing.push(r);
                }
            }
            return Err(deadline.error(format!(
                "ranks {missing:?} to join (barrier {prefix:?}: {arrived} of {expected} arrived)"
            )));
        }
        std::thread::sleep(pause.min(deadline.remaining()));
        pause = (pause * 2).min(Duration::from_millis(50));
        arrived = store.add(&count_key, 0)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn token() -> Token {
        Token::from_bytes([7; 16])
    }

    fn server(world: usize) -> StoreServer {
        let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
        StoreServer::bind(addr, token(), world).unwrap()
    }

    fn client(s: &StoreServer, rank: usize, world: usize, timeout: Duration) -> Result<TcpStore> {
        TcpStore::connect(
            "127.0.0.1",
            s.local_addr().port(),
            &token(),
            rank,
            world,
            timeout,
        )
    }

    #[test]
    fn token_hex_round_trip_and_redacted_debug() {
        let t = Token::generate().unwrap();
        let hex = t.to_string();
        assert_eq!(hex.len(), 32);
        assert_eq!(Token::parse(&hex).unwrap(), t);
        assert_eq!(Token::parse(&hex.to_uppercase()).unwrap(), t);
        assert!(!format!("{t:?}").contains(&hex));
        assert_ne!(Token::generate().unwrap(), t);
    }

    #[test]
    fn token_parse_errors_do_not_echo_the_input() {
        let e = Token::parse("abc").unwrap_err().to_string();
        assert!(e.contains("32 hex digits"), "{e}");
        let bad = "zz".repeat(16);
        let e = Token::parse(&bad).unwrap_err().to_string();
        assert!(!e.contains(&bad), "{e}");
    }

    #[test]
    fn token_from_vars_prefers_explicit_then_derives_from_job_ids() {
        let t = Token::generate().unwrap();
        let hex = t.to_string();
        let explicit = |k: &str| match k {
            TOKEN_VAR => Some(hex.clone()),
            "SLURM_JOB_ID" => Some("42".into()),
            _ => None,
        };
        assert_eq!(Token::from_vars(&explicit).unwrap(), Some(t));

        let none = |_: &str| None;
        assert_eq!(Token::from_vars(&none).unwrap(), None);

        let job = |id: &'static str| {
            move |k: &str| match k {
                "SLURM_JOB_ID" => Some(id.to_string()),
                "SLURM_STEP_ID" => Some("0".into()),
                "MASTER_PORT" => Some("29500".into()),
                _ => None,
            }
        };
        let a = Token::from_vars(&job("42")).unwrap().unwrap();
        assert_eq!(Token::from_vars(&job("42")).unwrap().unwrap(), a);
        assert_ne!(Token::from_vars(&job("43")).unwrap().unwrap(), a);

        let broken = |k: &str| (k == TOKEN_VAR).then(|| "nope".to_string());
        let e = Token::from_vars(&broken).unwrap_err().to_string();
        assert!(e.contains(TOKEN_VAR), "{e}");
    }

    #[test]
    fn derived_token_is_stable_across_builds() {
        // Every node computes the derived token itself: a change to the hash
        // would make mixed-version jobs refuse each other.
        let vars = |k: &str| match k {
            "TORCHELASTIC_RUN_ID" => Some("none".to_string()),
            "MASTER_ADDR" => Some("127.0.0.1".into()),
            "MASTER_PORT" => Some("29500".into()),
            _ => None,
        };
        assert_eq!(
            Token::derive(&vars).to_string(),
            Token::derive(&vars).to_string()
        );
        let other = |k: &str| (k == "MASTER_PORT").then(|| "29501".to_string());
        assert_ne!(Token::derive(&vars), Token::derive(&other));
    }

    #[test]
    fn set_get_add_across_connections_and_threads() {
        let s = server(2);
        let t = Duration::from_secs(5);
        let a = client(&s, 0, 2, t).unwrap();
        let b = client(&s, 1, 2, t).unwrap();
        a.set("k", b"hello").unwrap();
        assert_eq!(b.get("k").unwrap(), b"hello");
        a.set("k", b"").unwrap();
        assert_eq!(b.get("k").unwrap(), b"");
        assert_eq!(a.add("n", 5).unwrap(), 5);
        assert_eq!(b.add("n", -2).unwrap(), 3);

        // Many threads sharing one client and one more client each.
        let shared = Arc::new(a);
        std::thread::scope(|sc| {
            for i in 0..4 {
                let shared = Arc::clone(&shared);
                let s = &s;
                sc.spawn(move || {
                    let own = client(s, 1, 2, t).unwrap();
                    for _ in 0..25 {
                        shared.add("c", 1).unwrap();
                        own.add("c", 1).unwrap();
                    }
                    own.set(&format!("t{i}"), &[i as u8]).unwrap();
                });
            }
        });
        assert_eq!(b.add("c", 0).unwrap(), 200);
        for i in 0..4u8 {
            assert_eq!(b.get(&format!("t{i}")).unwrap(), vec![i]);
        }
        let e = b.add("k", 1).unwrap_err().to_string();
        assert!(e.contains("integer"), "{e}");
    }

    #[test]
    fn get_waits_for_a_later_set() {
        let s = server(2);
        let a = client(&s, 0, 2, Duration::from_secs(5)).unwrap();
        let b = client(&s, 1, 2, Duration::from_secs(5)).unwrap();
        let start = Instant::now();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                a.set("late", b"x").unwrap();
            });
            assert_eq!(b.get("late").unwrap(), b"x");
        });
        assert!(start.elapsed() >= Duration::from_millis(150));
    }

    #[test]
    fn get_times_out_and_the_connection_stays_usable() {
        let s = server(1);
        let c = client(&s, 0, 1, Duration::from_millis(300)).unwrap();
        let start = Instant::now();
        let e = c.get("never").unwrap_err();
        let took = start.elapsed();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("never"), "{e}");
        assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(3));
        c.set("after", b"1").unwrap();
        assert_eq!(c.get("after").unwrap(), b"1");
    }

    #[test]
    fn wrong_token_is_refused_promptly() {
        let s = server(2);
        let start = Instant::now();
        let wrong = Token::from_bytes([8; 16]);
        let e = TcpStore::connect(
            "127.0.0.1",
            s.local_addr().port(),
            &wrong,
            1,
            2,
            Duration::from_secs(10),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Auth(_)), "{e}");
        assert!(start.elapsed() < Duration::from_secs(1));
        let msg = e.to_string();
        assert!(!msg.contains(&wrong.to_string()) && !msg.contains(&token().to_string()));
    }

    #[test]
    fn world_size_disagreement_names_both_numbers() {
        let s = server(2);
        let e = client(&s, 1, 3, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, Error::Rendezvous(_)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains('3') && msg.contains('2'), "{msg}");
    }

    #[test]
    fn rank_out_of_range_is_refused() {
        let s = server(2);
        let e = client(&s, 2, 2, Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }

    #[test]
    fn server_rejects_rank_out_of_range_even_if_client_does_not_check() {
        let s = server(2);
        let mut stream = TcpStream::connect(s.local_addr()).unwrap();
        let hello = Body::default()
            .raw(MAGIC)
            .u8(VERSION)
            .raw(&token().0)
            .u64(5)
            .u64(2);
        stream.write_all(&hello.frame()).unwrap();
        let answer = read_frame(
            &mut stream,
            1024,
            Some(Instant::now() + Duration::from_secs(5)),
        )
        .ok()
        .unwrap();
        let mut f = Fields(&answer);
        assert_eq!(f.u8().unwrap(), ST_RENDEZVOUS);
        let msg = String::from_utf8(f.bytes().unwrap().to_vec()).unwrap();
        assert!(msg.contains("rank 5") && msg.contains('2'), "{msg}");
    }

    #[test]
    fn unreachable_master_fails_within_the_timeout() {
        // Bind then drop to find a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let start = Instant::now();
        let e = TcpStore::connect("127.0.0.1", port, &token(), 0, 1, Duration::from_secs(1))
            .unwrap_err();
        let took = start.elapsed();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("unreachable"), "{e}");
        assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(2));
    }

    #[test]
    fn client_connects_to_a_master_that_starts_later() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let s = StoreServer::bind(addr, token(), 1).unwrap();
            std::thread::sleep(Duration::from_secs(1));
            drop(s);
        });
        let c =
            TcpStore::connect("127.0.0.1", port, &token(), 0, 1, Duration::from_secs(5)).unwrap();
        c.set("a", b"b").unwrap();
        late.join().unwrap();
    }

    #[test]
    fn port_in_use_is_a_clear_error() {
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let e = StoreServer::bind(busy.local_addr().unwrap(), token(), 1).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("address already in use"), "{msg}");
        assert!(msg.contains("--master-port"), "{msg}");
        assert!(
            msg.contains(&busy.local_addr().unwrap().to_string()),
            "{msg}"
        );
    }

    #[test]
    fn dropping_the_server_closes_listener_and_connections() {
        let s = server(1);
        let addr = s.local_addr();
        let c = client(&s, 0, 1, Duration::from_secs(10)).unwrap();
        let waiter = std::thread::spawn(move || {
            let start = Instant::now();
            let r = c.get("never");
            (r, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        drop(s);
        assert!(start.elapsed() < Duration::from_secs(2));
        let (r, took) = waiter.join().unwrap();
        assert!(matches!(r, Err(Error::PeerLost { rank: 0, .. })), "{r:?}");
        assert!(took < Duration::from_secs(3));
        assert!(TcpStream::connect(addr).is_err());
        // The port is free again: a new store can take it at once.
        drop(StoreServer::bind(addr, token(), 1).unwrap());
    }

    #[test]
    fn join_waits_for_everyone_and_names_latecomers() {
        let s = server(4);
        let t = Duration::from_secs(5);
        std::thread::scope(|sc| {
            for r in 0..4 {
                let s = &s;
                sc.spawn(move || {
                    let c = client(s, r, 4, t).unwrap();
                    join(&c, "b1", r, 4, t).unwrap();
                });
            }
        });
        let start = Instant::now();
        let e = std::thread::scope(|sc| {
            let h: Vec<_> = (0..2)
                .map(|r| {
                    let s = &s;
                    sc.spawn(move || {
                        let c = client(s, r, 4, t).unwrap();
                        join(&c, "b2", r, 4, Duration::from_millis(300))
                    })
                })
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        assert!(start.elapsed() < Duration::from_secs(2));
        for r in e {
            let msg = r.unwrap_err().to_string();
            assert!(msg.contains("ranks [2, 3] to join"), "{msg}");
        }
    }

    #[test]
    fn join_works_over_memstore() {
        let m = crate::rendezvous::MemStore::new(Duration::from_secs(1));
        join(&m, "solo", 0, 1, Duration::from_secs(1)).unwrap();
        let e = join(&m, "pair", 0, 2, Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("ranks [1] to join"), "{e}");
    }
}
