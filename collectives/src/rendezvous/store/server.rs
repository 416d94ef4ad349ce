//! The store server rank 0 hosts: everything in memory, one thread per
//! connection, so a `get` that waits for a key blocks only its own client.

use std::collections::HashMap;
use std::fmt;
use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::token::Token;
use super::wire::{
    Body, Fields, MAGIC, MAX_FRAME, MAX_HELLO, OP_ADD, OP_GET, OP_SET, ReadFail, ST_AUTH,
    ST_BAD_REQUEST, ST_OK, ST_RENDEZVOUS, ST_SHUTDOWN, ST_TIMEOUT, VERSION, read_frame,
};
use crate::error::{Error, Result};
use crate::rendezvous::parse_i64;
use crate::sys::wait_readable;

/// How long a new connection may take to say hello before the server drops it.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds a server write to a client that stopped reading.
const SERVER_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(100);
/// Connections that have not yet presented the token get at most this many
/// threads (beyond twice the world size, for a whole job connecting at once):
/// 3,000 idle connections once made ~2,930 threads. Past it, a new connection is
/// closed at once; a real rank's client dials again until its deadline.
pub(super) const MAX_UNAUTHENTICATED: usize = 64;

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
    /// Connections still before their hello (see [`MAX_UNAUTHENTICATED`]).
    unauthenticated: AtomicUsize,
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
            unauthenticated: AtomicUsize::new(0),
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

fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    // Poll with a timeout rather than block in accept, so drop can stop us
    // without having to connect to ourselves.
    while !shared.stop.load(Ordering::SeqCst) {
        if !wait_readable(listener.as_raw_fd(), ACCEPT_POLL) {
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
        let limit = MAX_UNAUTHENTICATED + 2 * shared.world_size;
        if shared.unauthenticated.load(Ordering::SeqCst) >= limit {
            let _ = stream.shutdown(Shutdown::Both);
            continue;
        }
        shared.unauthenticated.fetch_add(1, Ordering::SeqCst);
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
                shared.unauthenticated.fetch_sub(1, Ordering::SeqCst);
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
    let hello = read_frame(&mut stream, MAX_HELLO, Some(Instant::now() + HELLO_TIMEOUT));
    // `None`: the client went away (or never spoke) before its hello.
    let checked = hello.ok().map(|h| check_hello(&h, shared));
    // Authenticated, refused or gone: no longer waiting for a hello either way.
    shared.unauthenticated.fetch_sub(1, Ordering::SeqCst);
    match checked {
        None => return,
        Some(Ok(())) => {
            if !reply(&mut stream, Body::default().u8(ST_OK).bytes(b"")) {
                return;
            }
        }
        Some(Err((status, msg))) => {
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
