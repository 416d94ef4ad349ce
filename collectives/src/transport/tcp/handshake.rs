//! Setting up the mesh: every rank listens and publishes its address, dials
//! the lower ranks and accepts the higher ones, and each pair of ranks swaps a
//! hello that proves both belong to the same job and communicator (see the
//! [module docs](super) for the order of steps).
//!
//! The proof is the store's challenge–response
//! ([`crate::rendezvous::store::proof`]): the dialer sends a fresh nonce, the
//! acceptor answers with its own nonce and its proof of the job token over
//! both, and only if that checks out does the dialer send its proof. The
//! token itself never crosses the network, so whatever listens where a rank
//! dials (a squatter on a reused port, a stale address) learns nothing it
//! could use.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::Peer;
use super::TransportOptions;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::rendezvous::store::Token;
use crate::rendezvous::store::proof::{self, PROOF, Transcript};
use crate::sys::dial::{self, DialError, Redial};
use crate::sys::{is_timeout, wait_readable};

/// SO_SNDBUF/SO_RCVBUF we ask for (Linux doubles it for bookkeeping; `None`
/// would leave autotuning on). Measured with `bench_loopback` (tests.rs) on a 2-core VM:
/// 1 MiB streamed as fast as autotuning or faster (up to ~1.4x at 16-64 MiB),
/// while 4 MiB was no better than autotuning, likely because a smaller window
/// keeps the bytes in flight in cache. 2 MiB effective still covers the
/// bandwidth-delay product of a 10 Gb/s link with 1.6 ms round trips, and fixed
/// buffers let messages of up to ~2 MiB leave without waiting for the
/// receiver from the first exchange on (autotuning starts small).
const SOCKET_BUFFER: Option<usize> = Some(1 << 20);
/// How a failed dial to a lower rank is retried: quickly at first (the peer
/// is usually about to listen), backing off to at most 100 ms.
const REDIAL: Redial = Redial {
    first_pause: Duration::from_millis(5),
    max_pause: Duration::from_millis(100),
    attempt: Duration::MAX,
    retry: dial::not_there_yet,
};

const HELLO_MAGIC: u32 = 0x5254_4350; // "RTCP"
/// Version 2: nonces and proofs instead of the token itself.
const HELLO_VERSION: u32 = 2;
const HELLO_LEN: usize = 48;

/// Hello reply status codes.
const ST_OK: u32 = 0;
const ST_BAD_VERSION: u32 = 1;
const ST_BAD_TOKEN: u32 = 2;
const ST_BAD_PREFIX: u32 = 3;
pub(super) const ST_BAD_WORLD: u32 = 4;
const ST_BAD_TARGET: u32 = 5;
const ST_BAD_RANK: u32 = 6;
const ST_DUPLICATE: u32 = 7;

/// Builds this rank's side of the mesh: one connected, non-blocking stream
/// per peer, indexed by rank (`None` at our own).
pub(super) fn connect_mesh(
    store: &dyn Store,
    rank: usize,
    world_size: usize,
    opts: &TransportOptions,
) -> Result<Vec<Option<Peer>>> {
    let deadline = Deadline::after(opts.timeout);
    let me = HelloCtx {
        rank,
        world_size,
        token: Token::from_bytes(opts.token),
        prefix_hash: fnv1a(opts.prefix.as_bytes()),
    };

    let listener = listen(opts.listen_ip, world_size)?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("reading the listening socket's address", e))?;
    store.set(&addr_key(&opts.prefix, rank), local.to_string().as_bytes())?;

    let mut peers: Vec<Option<Peer>> = (0..world_size).map(|_| None).collect();

    // 1. Dial every lower rank and run the whole hello with it. A lower rank
    //    accepts once it has dialled its own lower ranks, so the waits form a
    //    chain down to rank 0, which dials no one: never a cycle.
    for (j, slot) in peers.iter_mut().enumerate().take(rank) {
        let raw = store.get(&addr_key(&opts.prefix, j))?;
        let addr = parse_addr(j, &raw)?;
        let stream = dial(addr, j, &deadline)?;
        *slot = Some(Peer {
            stream: hello_as_dialer(&me, j, addr, stream, &deadline)?,
            out_partial: 0,
        });
    }

    // 2. Accept every higher rank.
    accept_all(&listener, local, &me, &mut peers, &deadline)?;
    drop(listener);

    for peer in peers.iter().flatten() {
        peer.stream
            .set_nonblocking(true)
            .map_err(|e| Error::io("making a peer socket non-blocking", e))?;
        // Best effort: a socket the kernel keeps on its algorithm still works.
        let _ = crate::sys::congestion::mend(peer.stream.as_fd());
    }
    Ok(peers)
}

/// Our side of the hello with lower rank `j` at `addr`: our nonce out, its
/// reply and proof in, our proof out, its verdict in.
fn hello_as_dialer(
    me: &HelloCtx,
    j: usize,
    addr: SocketAddr,
    mut stream: TcpStream,
    deadline: &Deadline,
) -> Result<TcpStream> {
    set_io_timeouts(&stream, deadline)?;
    let client_nonce = proof::nonce()?;
    let hello = Hello {
        rank: me.rank as u32,
        world: me.world_size as u32,
        target: j as u32,
        status: ST_OK,
        nonce: client_nonce,
        prefix_hash: me.prefix_hash,
    };
    stream.write_all(&hello.encode()).map_err(|e| {
        handshake_error(e, deadline, || {
            format!("sending our hello to rank {j} at {addr}")
        })
    })?;
    let mut buf = [0u8; HELLO_LEN + PROOF];
    stream.read_exact(&mut buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Error::Rendezvous(format!(
                "rank {j} at {addr} closed the connection without answering our hello \
                 (the process there is not a ringside rank of this job)"
            ))
        } else {
            handshake_error(e, deadline, || {
                format!("rank {j} at {addr} to answer our hello")
            })
        }
    })?;
    let mut head = [0u8; HELLO_LEN];
    head.copy_from_slice(&buf[..HELLO_LEN]);
    let reply = check_reply(me, j, addr, &head)?;
    let t = Transcript {
        client_nonce,
        server_nonce: reply.nonce,
        rank: me.rank as u64,
        world: me.world_size as u64,
    };
    let expected = t.mesh_server_proof(&me.token, me.prefix_hash, j as u64);
    if !proof::same(&expected, &buf[HELLO_LEN..]) {
        return Err(Error::Rendezvous(format!(
            "rank {j} at {addr} did not prove it holds this job's token (a rank of another \
             job, or something else listening there); nothing secret was sent to it"
        )));
    }
    let ours = t.mesh_client_proof(&me.token, me.prefix_hash, j as u64);
    let mut verdict = [0u8; 4];
    stream
        .write_all(&ours)
        .and_then(|()| stream.read_exact(&mut verdict))
        .map_err(|e| {
            handshake_error(e, deadline, || {
                format!("rank {j} at {addr} to take our proof of the job token")
            })
        })?;
    match u32::from_le_bytes(verdict) {
        ST_OK => Ok(stream),
        ST_BAD_TOKEN => Err(Error::Rendezvous(format!(
            "rank {j} at {addr} rejected rank {}'s proof of the job token: the two ranks \
             were started with different job tokens",
            me.rank
        ))),
        s => Err(Error::Rendezvous(format!(
            "rank {j} at {addr} answered our proof with unknown status {s}"
        ))),
    }
}

fn addr_key(prefix: &str, rank: usize) -> String {
    format!("{prefix}tcp/{rank}")
}

pub(super) fn parse_addr(rank: usize, raw: &[u8]) -> Result<SocketAddr> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::Rendezvous(format!(
                "the store's address for rank {rank} is not ip:port: {:?}",
                String::from_utf8_lossy(raw)
            ))
        })
}

/// FNV-1a: a stable hash of the store prefix, so communicators that share a
/// job token cannot connect into each other.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Options every peer socket gets. Set before listen/connect, because the
/// TCP window scale is fixed during the handshake.
fn tune(s: &Socket) -> Result<()> {
    s.set_tcp_nodelay(true)
        .map_err(|e| Error::io("setting TCP_NODELAY", e))?;
    if let Some(size) = SOCKET_BUFFER {
        // Best effort: the kernel clamps to net.core.{r,w}mem_max anyway.
        let _ = s.set_send_buffer_size(size);
        let _ = s.set_recv_buffer_size(size);
    }
    Ok(())
}

fn listen(ip: IpAddr, world_size: usize) -> Result<TcpListener> {
    let addr = SocketAddr::new(ip, 0);
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| Error::io("creating the listening socket", e))?;
    tune(&s)?;
    s.bind(&SockAddr::from(addr))
        .map_err(|e| Error::io(format!("binding a TCP listener to {ip}"), e))?;
    // Every higher rank may dial before we accept; the backlog must hold them.
    let backlog = world_size.clamp(128, 65_535) as i32;
    s.listen(backlog)
        .map_err(|e| Error::io("listening for peers", e))?;
    s.set_nonblocking(true)
        .map_err(|e| Error::io("making the listener non-blocking", e))?;
    Ok(s.into())
}

/// Connects to rank `j` at `addr`, retrying while it is not there yet.
fn dial(addr: SocketAddr, j: usize, deadline: &Deadline) -> Result<TcpStream> {
    let connect = |addr: SocketAddr, wait: Duration| -> io::Result<TcpStream> {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        tune(&s).map_err(io::Error::other)?;
        s.connect_timeout(&SockAddr::from(addr), wait)?;
        Ok(s.into())
    };
    dial::dial(deadline, &REDIAL, || Ok(vec![addr]), connect).map_err(|e| match e {
        DialError::Failed { addr, error } => {
            Error::io(format!("connecting to rank {j} at {addr}"), error)
        }
        DialError::Expired { last } => deadline.error(format!(
            "rank {j} at {addr} to accept our connection (last error: {})",
            last.unwrap_or_default()
        )),
    })
}

fn set_io_timeouts(stream: &TcpStream, deadline: &Deadline) -> Result<()> {
    // A zero timeout would mean "block forever" to the OS.
    let t = Some(deadline.remaining().max(Duration::from_millis(1)));
    stream
        .set_read_timeout(t)
        .and_then(|()| stream.set_write_timeout(t))
        .map_err(|e| Error::io("setting socket timeouts", e))
}

/// A handshake I/O error: timeouts become [`Error::Timeout`].
fn handshake_error(e: io::Error, deadline: &Deadline, what: impl FnOnce() -> String) -> Error {
    if is_timeout(&e) {
        deadline.error(what())
    } else {
        Error::Rendezvous(format!("{}: {e}", what()))
    }
}

/// Who we are, as the hello states it.
struct HelloCtx {
    rank: usize,
    world_size: usize,
    token: Token,
    prefix_hash: u64,
}

/// The 48-byte hello, used both ways: the dialer's request (`status` 0) and the
/// acceptor's reply (followed by its proof, [`PROOF`] bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) rank: u32,
    pub(super) world: u32,
    /// The rank the sender meant to reach.
    pub(super) target: u32,
    pub(super) status: u32,
    /// The sender's fresh nonce (zero in a refusal).
    pub(super) nonce: [u8; 16],
    pub(super) prefix_hash: u64,
}

impl Hello {
    pub(super) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[8..24].copy_from_slice(&self.nonce);
        b[24..28].copy_from_slice(&self.rank.to_le_bytes());
        b[28..32].copy_from_slice(&self.world.to_le_bytes());
        b[32..36].copy_from_slice(&self.target.to_le_bytes());
        b[36..40].copy_from_slice(&self.status.to_le_bytes());
        b[40..48].copy_from_slice(&self.prefix_hash.to_le_bytes());
        b
    }

    /// Decodes a hello; `Err` names what was wrong (not ours, or another version).
    pub(super) fn decode(b: &[u8; HELLO_LEN]) -> std::result::Result<Hello, String> {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if word(0) != HELLO_MAGIC {
            return Err("it did not send a ringside TCP hello".into());
        }
        if word(4) != HELLO_VERSION {
            return Err(format!(
                "it speaks ringside TCP hello version {}, this rank speaks {HELLO_VERSION}",
                word(4)
            ));
        }
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(&b[8..24]);
        let mut hash = [0u8; 8];
        hash.copy_from_slice(&b[40..48]);
        Ok(Hello {
            nonce,
            rank: word(24),
            world: word(28),
            target: word(32),
            status: word(36),
            prefix_hash: u64::from_le_bytes(hash),
        })
    }
}

/// Accepts ranks `me.rank+1..world`, turning away everything else.
fn accept_all(
    listener: &TcpListener,
    local: SocketAddr,
    me: &HelloCtx,
    peers: &mut [Option<Peer>],
    deadline: &Deadline,
) -> Result<()> {
    let mut missing = me.world_size - me.rank - 1;
    let mut turned_away: Vec<String> = Vec::new();
    while missing > 0 {
        let (mut stream, from) = match listener.accept() {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionAborted
                ) =>
            {
                if deadline.expired() {
                    return Err(accept_timeout(me, peers, local, &turned_away, deadline));
                }
                wait_readable(listener.as_raw_fd(), deadline.remaining());
                continue;
            }
            Err(e) => return Err(Error::io("accepting a peer connection", e)),
        };
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_nodelay(true));
        if let Err(e) = setup {
            turned_away.push(format!("{from} (socket setup failed: {e})"));
            continue;
        }
        set_io_timeouts(&stream, deadline)?;
        let mut buf = [0u8; HELLO_LEN];
        if let Err(e) = stream.read_exact(&mut buf) {
            turned_away.push(format!("{from} (no hello: {e})"));
            continue;
        }
        let hello = match Hello::decode(&buf) {
            Ok(h) => h,
            Err(why) => {
                if why.contains("version") {
                    refuse(&mut stream, me, 0, ST_BAD_VERSION);
                }
                turned_away.push(format!("{from} ({why})"));
                continue;
            }
        };
        let r = hello.rank as usize;
        let (status, fatal, why) = if hello.prefix_hash != me.prefix_hash {
            (
                ST_BAD_PREFIX,
                false,
                format!(
                    "{from} (rank {r}) belongs to another communicator: its store prefix differs"
                ),
            )
        } else if hello.world as usize != me.world_size {
            (
                ST_BAD_WORLD,
                true,
                format!(
                    "rank {r} at {from} says the world has {} ranks, this rank says {}",
                    hello.world, me.world_size
                ),
            )
        } else if hello.target as usize != me.rank {
            (
                ST_BAD_TARGET,
                false,
                format!(
                    "{from} (rank {r}) was looking for rank {}, but this is rank {} \
                     (a stale address in the store?)",
                    hello.target, me.rank
                ),
            )
        } else if r <= me.rank || r >= me.world_size {
            (
                ST_BAD_RANK,
                true,
                format!(
                    "{from} claims rank {r}, but rank {} only accepts ranks {}..{}",
                    me.rank,
                    me.rank + 1,
                    me.world_size
                ),
            )
        } else if peers[r].is_some() {
            (
                ST_DUPLICATE,
                true,
                format!(
                    "rank {r} connected twice (second time from {from}): two processes share a rank"
                ),
            )
        } else {
            (ST_OK, false, String::new())
        };
        let status = if status == ST_OK {
            match prove_to_dialer(&mut stream, me, &hello) {
                Ok(()) => ST_OK,
                Err(e) => {
                    turned_away.push(format!(
                        "{from} claimed to be rank {r} but did not prove it holds the job \
                         token (a rank of another job?): {e}"
                    ));
                    continue;
                }
            }
        } else {
            refuse(&mut stream, me, hello.rank, status);
            status
        };
        if status == ST_OK {
            peers[r] = Some(Peer {
                stream,
                out_partial: 0,
            });
            missing -= 1;
        } else if fatal {
            return Err(Error::Rendezvous(format!(
                "rank {} turned away a peer of its own job: {why}",
                me.rank
            )));
        } else {
            turned_away.push(why);
        }
    }
    Ok(())
}

/// Best-effort refusal: a hello with `status`, no nonce and no proof.
fn refuse(stream: &mut TcpStream, me: &HelloCtx, target: u32, status: u32) {
    let hello = Hello {
        rank: me.rank as u32,
        world: me.world_size as u32,
        target,
        status,
        nonce: [0; 16],
        prefix_hash: 0,
    };
    let mut b = [0u8; HELLO_LEN + PROOF];
    b[..HELLO_LEN].copy_from_slice(&hello.encode());
    // A failure shows up on the dialer's side, which reads this reply.
    let _ = stream.write_all(&b);
}

/// The acceptor's side of an acceptable hello: our nonce and proof out
/// first, the dialer's proof in, our verdict out. `Err` says why the dialer
/// failed (it is then turned away, and told so when it is still there).
fn prove_to_dialer(
    stream: &mut TcpStream,
    me: &HelloCtx,
    hello: &Hello,
) -> std::result::Result<(), String> {
    let server_nonce = proof::nonce().map_err(|e| e.to_string())?;
    let t = Transcript {
        client_nonce: hello.nonce,
        server_nonce,
        rank: u64::from(hello.rank),
        world: u64::from(hello.world),
    };
    let answer = Hello {
        rank: me.rank as u32,
        world: me.world_size as u32,
        target: hello.rank,
        status: ST_OK,
        nonce: server_nonce,
        prefix_hash: me.prefix_hash,
    };
    let mut b = [0u8; HELLO_LEN + PROOF];
    b[..HELLO_LEN].copy_from_slice(&answer.encode());
    b[HELLO_LEN..].copy_from_slice(&t.mesh_server_proof(&me.token, me.prefix_hash, me.rank as u64));
    stream
        .write_all(&b)
        .map_err(|e| format!("sending our proof: {e}"))?;
    let mut theirs = [0u8; PROOF];
    stream
        .read_exact(&mut theirs)
        .map_err(|e| format!("no proof came back: {e}"))?;
    let ok = proof::same(
        &theirs,
        &t.mesh_client_proof(&me.token, me.prefix_hash, me.rank as u64),
    );
    let verdict = if ok { ST_OK } else { ST_BAD_TOKEN };
    let sent = stream.write_all(&verdict.to_le_bytes());
    if !ok {
        return Err("its proof does not match this job's token".into());
    }
    sent.map_err(|e| format!("sending our verdict: {e}"))
}

fn accept_timeout(
    me: &HelloCtx,
    peers: &[Option<Peer>],
    local: SocketAddr,
    turned_away: &[String],
    deadline: &Deadline,
) -> Error {
    let missing: Vec<String> = (me.rank + 1..me.world_size)
        .filter(|&j| peers[j].is_none())
        .map(|j| j.to_string())
        .collect();
    let what = format!(
        "rank(s) {} to connect to rank {} at {local}",
        missing.join(", "),
        me.rank
    );
    if turned_away.is_empty() {
        deadline.error(what)
    } else {
        Error::Rendezvous(format!(
            "timed out after {:?} waiting for {what}; turned away: {}",
            deadline.timeout(),
            turned_away.join("; ")
        ))
    }
}

/// Checks rank `j`'s answer to our hello (its proof is checked after).
fn check_reply(me: &HelloCtx, j: usize, addr: SocketAddr, buf: &[u8; HELLO_LEN]) -> Result<Hello> {
    let reject = |why: String| Err(Error::Rendezvous(format!("rank {j} at {addr} {why}")));
    let h = match Hello::decode(buf) {
        Ok(h) => h,
        Err(why) => return reject(format!("is not a ringside rank of this job: {why}")),
    };
    match h.status {
        ST_OK => {}
        ST_BAD_TOKEN => {
            return reject(format!(
                "rejected rank {}'s job token: the two ranks were started with different \
                 job tokens (another job's store, or a stale address?)",
                me.rank
            ));
        }
        ST_BAD_PREFIX => {
            return reject("belongs to another communicator (its store prefix differs)".into());
        }
        ST_BAD_WORLD => {
            return reject(format!(
                "has a world of {} ranks, this rank has {}",
                h.world, me.world_size
            ));
        }
        ST_BAD_TARGET => {
            return reject(format!(
                "is rank {}, not rank {j} (a stale address in the store?)",
                h.rank
            ));
        }
        ST_BAD_RANK => {
            return reject(format!(
                "does not accept rank {} from this rank's position",
                me.rank
            ));
        }
        ST_DUPLICATE => {
            return reject(format!(
                "already has a connection from rank {}: two processes share a rank",
                me.rank
            ));
        }
        ST_BAD_VERSION => return reject("speaks another hello version".into()),
        s => return reject(format!("refused us with unknown status {s}")),
    }
    if h.prefix_hash != me.prefix_hash {
        return reject("answered for another communicator (its store prefix differs)".into());
    }
    if h.rank as usize != j || h.world as usize != me.world_size || h.target as usize != me.rank {
        return reject(format!(
            "answered as rank {} of {} (for rank {}), expected rank {j} of {} (for rank {})",
            h.rank, h.world, h.target, me.world_size, me.rank
        ));
    }
    Ok(h)
}
