//! The store server rank 0 hosts: everything in memory.
//!
//! One thread, the front door, accepts connections and walks each through its
//! hello (the challenge–response of [`proof`](super::proof)) without a thread of
//! its own, so a stranger costs a socket and a few bytes, and at most
//! [`MAX_UNAUTHENTICATED`] of them are kept: past that the longest-silent one is
//! closed, never the newcomer, so a flood of idle connections cannot lock the
//! ranks out. A connection that has proved it holds the token gets its own
//! thread, so a `get` that waits for a key blocks only its own client.

use std::collections::HashMap;
use std::fmt;
use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::proof::{self, NONCE, Transcript};
use super::token::Token;
use super::wire::{
    Body, Fields, MAGIC, MAX_FRAME, MAX_HELLO, OP_ADD, OP_GET, OP_SET, ReadFail, ST_AUTH,
    ST_BAD_REQUEST, ST_OK, ST_RENDEZVOUS, ST_SHUTDOWN, ST_TIMEOUT, VERSION, read_frame,
};
use crate::error::{Error, Result};
use crate::rendezvous::parse_i64;
use crate::sys::poll_ms;

/// How long a new connection may take over its whole hello before the server
/// drops it.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds a server write to a client that stopped reading.
const SERVER_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the front door looks at the stop flag and the hello deadlines.
const ACCEPT_POLL: Duration = Duration::from_millis(100);
/// Connections still in their hello that the front door keeps, beyond twice
/// the world size (a whole job connecting at once). 3,000 idle connections once
/// made ~2,930 threads; a later cap of 64 that closed every newcomer past it let
/// 68 idle connections lock the ranks out. Now a newcomer past the cap closes
/// the oldest connection that has not sent a hello (else the oldest of all);
/// a rank's hello arrives right after its connection and is read at once, and
/// a rank's client dials again if it is closed anyway.
pub(super) const MAX_UNAUTHENTICATED: usize = 256;
/// New connections the front door accepts before it reads those it holds
/// again, so a burst of newcomers cannot starve a hello that has arrived.
const ACCEPT_BATCH: usize = 64;

/// State shared by the server's threads.
struct Shared {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    stop: AtomicBool,
    token: Token,
    world_size: usize,
    /// Open connections past their hello, so `drop` can unblock their threads.
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
                .name("ringside-store-door".into())
                .spawn(move || front_door(listener, shared, workers))
                .map_err(|e| Error::io("store: starting the front-door thread", e))?
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

/// A connection still in its hello.
struct Pending {
    stream: TcpStream,
    accepted: Instant,
    /// Accept order (the front door's count): the eviction order among
    /// connections equally silent.
    seq: u64,
    /// The frame being read: its length prefix, then its body.
    buf: Vec<u8>,
    /// Set once a well-formed hello was answered: what the client's proof
    /// must match.
    challenge: Option<Transcript>,
}

/// What became of a pending connection after it was read.
enum Step {
    /// Nothing more to read yet.
    Wait,
    /// Refused, gone or misbehaving: drop it.
    Close,
    /// Proved the token and was welcomed: serve its requests.
    Welcome,
}

/// Accepts connections and serves their hellos until the server stops; see
/// the [module docs](self).
fn front_door(
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    // Without a non-blocking listener one stray wakeup would park the front
    // door in accept and stall every hello behind it.
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let limit = MAX_UNAUTHENTICATED + 2 * shared.world_size;
    let mut pending: Vec<Pending> = Vec::new();
    let mut accepted = 0u64;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let pollfd = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // Poll with a timeout rather than block, so drop can stop us without
    // having to connect to ourselves.
    while !shared.stop.load(Ordering::SeqCst) {
        fds.clear();
        fds.push(pollfd(listener.as_raw_fd()));
        fds.extend(pending.iter().map(|p| pollfd(p.stream.as_raw_fd())));
        // SAFETY: `fds` is a live, initialised array of exactly `fds.len()` pollfds.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                poll_ms(ACCEPT_POLL),
            )
        };
        if n < 0 {
            // A signal (retry at once) or no memory for the poll set (wait a little).
            if std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        // Backwards, so swap_remove only moves entries already looked at.
        for i in (0..pending.len()).rev() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            match advance(&mut pending[i], &shared) {
                Step::Wait => {}
                Step::Close => drop(pending.swap_remove(i)),
                Step::Welcome => hand_off(pending.swap_remove(i).stream, &shared, &workers),
            }
        }
        if fds[0].revents != 0 {
            accept_some(
                &listener,
                &shared,
                &workers,
                &mut pending,
                limit,
                &mut accepted,
            );
        }
        let now = Instant::now();
        pending.retain(|p| now.duration_since(p.accepted) < HELLO_TIMEOUT);
    }
}

/// Accepts up to [`ACCEPT_BATCH`] waiting connections, reading each one's
/// hello at once if it is already there.
fn accept_some(
    listener: &TcpListener,
    shared: &Arc<Shared>,
    workers: &Mutex<Vec<JoinHandle<()>>>,
    pending: &mut Vec<Pending>,
    limit: usize,
    accepted: &mut u64,
) {
    for _ in 0..ACCEPT_BATCH {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            // A client that gave up before we accepted it: take the next.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                ) =>
            {
                continue;
            }
            // Out of descriptors: the connection stays queued; free one by
            // closing a stranger, or wait for one to be freed.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                if !evict_one(pending) {
                    std::thread::sleep(Duration::from_millis(10));
                    return;
                }
                continue;
            }
            // Anything else may well repeat: do not spin on it.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                return;
            }
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let _ = stream.set_nodelay(true);
        *accepted += 1;
        let mut p = Pending {
            stream,
            accepted: Instant::now(),
            seq: *accepted,
            buf: Vec::new(),
            challenge: None,
        };
        match advance(&mut p, shared) {
            Step::Wait => {
                if pending.len() >= limit {
                    evict_one(pending);
                }
                pending.push(p);
            }
            Step::Close => {}
            Step::Welcome => hand_off(p.stream, shared, workers),
        }
    }
}

/// Closes the pending connection that has been silent longest: those that
/// have not sent a hello first, the oldest first. `false` if none is pending.
fn evict_one(pending: &mut Vec<Pending>) -> bool {
    let oldest = pending
        .iter()
        .enumerate()
        .min_by_key(|(_, p)| (p.challenge.is_some(), p.seq))
        .map(|(i, _)| i);
    match oldest {
        Some(i) => {
            let p = pending.swap_remove(i);
            let _ = p.stream.shutdown(Shutdown::Both);
            true
        }
        None => false,
    }
}

/// Reads what has arrived on a pending connection, and answers the hello or
/// the proof once one is complete.
fn advance(p: &mut Pending, shared: &Shared) -> Step {
    let mut chunk = [0u8; 4 + MAX_HELLO];
    loop {
        let want = match p.buf.get(..4) {
            None => 4,
            Some(len) => {
                let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
                if len > MAX_HELLO {
                    return Step::Close;
                }
                4 + len
            }
        };
        if p.buf.len() >= 4 && p.buf.len() == want {
            let frame = std::mem::take(&mut p.buf);
            return answer(p, &frame[4..], shared);
        }
        // Only up to the end of this frame: a client sends nothing more
        // before it has our answer.
        let room = want - p.buf.len();
        match std::io::Read::read(&mut p.stream, &mut chunk[..room]) {
            Ok(0) => return Step::Close,
            Ok(n) => p.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Step::Close,
        }
    }
}

/// Answers a complete hello (with the challenge) or proof (with the welcome).
fn answer(p: &mut Pending, body: &[u8], shared: &Shared) -> Step {
    let Some(transcript) = &p.challenge else {
        let transcript = match check_hello(body) {
            Ok((client_nonce, rank, world)) => match proof::nonce() {
                Ok(server_nonce) => Transcript {
                    client_nonce,
                    server_nonce,
                    rank,
                    world,
                },
                Err(e) => return refuse(&mut p.stream, ST_RENDEZVOUS, &e.to_string()),
            },
            Err((status, msg)) => return refuse(&mut p.stream, status, &msg),
        };
        let challenge = Body::default()
            .u8(ST_OK)
            .raw(&transcript.server_nonce)
            .raw(&transcript.server_proof(&shared.token));
        if !send_now(&mut p.stream, challenge) {
            return Step::Close;
        }
        p.challenge = Some(transcript);
        return Step::Wait;
    };
    if !proof::same(body, &transcript.client_proof(&shared.token)) {
        return refuse(&mut p.stream, ST_AUTH, "wrong job token");
    }
    if let Err(msg) = check_member(transcript.rank, transcript.world, shared) {
        return refuse(&mut p.stream, ST_RENDEZVOUS, &msg);
    }
    if send_now(&mut p.stream, Body::default().u8(ST_OK).bytes(b"")) {
        Step::Welcome
    } else {
        Step::Close
    }
}

/// Writes a small answer on a non-blocking socket: it fits a fresh socket's
/// send buffer, so a client that does not take it at once is not a rank.
fn send_now(stream: &mut TcpStream, body: Body) -> bool {
    let frame = body.frame();
    matches!(stream.write(&frame), Ok(n) if n == frame.len())
}

/// Tells a client why it is refused, and closes.
fn refuse(stream: &mut TcpStream, status: u8, msg: &str) -> Step {
    send_now(stream, Body::default().u8(status).bytes(msg.as_bytes()));
    let _ = stream.shutdown(Shutdown::Both);
    Step::Close
}

/// Gives a welcomed connection its own thread for its requests.
fn hand_off(stream: TcpStream, shared: &Arc<Shared>, workers: &Mutex<Vec<JoinHandle<()>>>) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_write_timeout(Some(SERVER_WRITE_TIMEOUT));
    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    match stream.try_clone() {
        Ok(clone) => {
            shared.conns().insert(id, clone);
        }
        // Without a clone drop could not unblock this connection's thread.
        Err(_) => return,
    }
    let s = Arc::clone(shared);
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

fn reply(stream: &mut TcpStream, body: Body) -> bool {
    stream.write_all(&body.frame()).is_ok()
}

fn reply_error(stream: &mut TcpStream, status: u8, msg: &str) -> bool {
    reply(stream, Body::default().u8(status).bytes(msg.as_bytes()))
}

/// Serves a welcomed connection's requests until it closes.
fn serve(mut stream: TcpStream, shared: &Shared) {
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

/// The client's nonce, rank and world size from a hello, or why it is refused.
fn check_hello(body: &[u8]) -> std::result::Result<([u8; NONCE], u64, u64), (u8, String)> {
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
            format!(
                "store protocol version {version} is not supported (server speaks {VERSION}): \
                 every rank must run the same ringside build"
            ),
        ));
    }
    let mut nonce = [0u8; NONCE];
    nonce.copy_from_slice(f.take(NONCE).map_err(bad)?);
    let rank = f.u64().map_err(bad)?;
    let world = f.u64().map_err(bad)?;
    Ok((nonce, rank, world))
}

/// Whether an authenticated client's rank and world size fit this job.
fn check_member(rank: u64, world: u64, shared: &Shared) -> std::result::Result<(), String> {
    let expected = shared.world_size as u64;
    if world != expected {
        return Err(format!(
            "rank {rank} says the world has {world} ranks, but the store on rank 0 was \
             started for {expected} (do all ranks agree on WORLD_SIZE?)"
        ));
    }
    if rank >= expected {
        return Err(format!(
            "rank {rank} is out of range for a world of {expected} ranks (0..{expected})"
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
