//! A full mesh of TCP connections, one per pair of ranks.
//!
//! # Setting up
//! Every rank listens on `listen_ip` (port 0, so the OS picks a free port) and
//! publishes `"{prefix}tcp/{rank}"` = `"ip:port"` in the store. Rank `i` dials
//! every rank `j < i` and accepts every rank `j > i`, so each pair gets exactly
//! one connection. Each dial is pipelined: we send our hello to all lower ranks
//! first, then accept the higher ranks, then read the lower ranks' replies, so
//! no rank waits on a chain of other ranks' handshakes.
//!
//! The hello carries the job token, a hash of the store prefix, the world size,
//! the sender's rank and the rank it meant to reach. The acceptor checks it and
//! answers with its own hello (token included only once the dialer has proven
//! it knows it). A stranger, another job's rank or a stale address is turned
//! away with a reason the other side prints; the acceptor keeps waiting for the
//! real peer and, if it never comes, says whom it turned away.
//!
//! # Moving bytes
//! After setup every socket is non-blocking. [`Transport::exchange`] runs one
//! loop that progresses the send (header and payload in one `sendmsg`) and the
//! receive together and only calls `poll` when both would block, so any pattern
//! of matching sends and receives completes at any message size. Small
//! messages take one `sendmsg` and (usually) one `recvmsg`.
//!
//! Every wait is bounded by the configured timeout, counted from the last time
//! any byte moved: a large transfer that keeps progressing never times out, a
//! stalled one fails with [`Error::Timeout`] naming the peer and the frame.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{FLAG_ABORT, Frame, HEADER_LEN, Sink, SinkWriter, Tag, Transport, TransportOptions};
use crate::Collective;
use crate::deadline::Deadline;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::rendezvous::Store;

/// Staging buffer for reductions: small enough to stay in L2 while the
/// reduction reads it back, large enough that syscalls stay a small cost.
const STAGING_LEN: usize = 256 * 1024;
/// Payloads up to this size are received together with their header (one
/// syscall) into the staging buffer, then copied: the copy costs less than a
/// second syscall, and a mismatched frame never scribbles over the caller's
/// buffer.
const SMALL_PAYLOAD: usize = 64 * 1024;
/// SO_SNDBUF/SO_RCVBUF we ask for (Linux doubles it for bookkeeping; `None`
/// would leave autotuning on). Measured with `bench_loopback` on a 2-core VM:
/// 1 MiB streamed as fast as autotuning or faster (up to ~1.4x at 16-64 MiB),
/// while 4 MiB was no better than autotuning, likely because a smaller window
/// keeps the bytes in flight in cache. 2 MiB effective still covers the
/// bandwidth-delay product of a 10 Gb/s link with 1.6 ms round trips, and fixed
/// buffers let messages of up to ~2 MiB leave without waiting for the
/// receiver from the first exchange on (autotuning starts small).
const SOCKET_BUFFER: Option<usize> = Some(1 << 20);
/// The longest abort reason we send or accept.
const MAX_ABORT_REASON: usize = 16 * 1024;
/// How long a failed dial waits before the next try, at most.
const MAX_DIAL_BACKOFF: Duration = Duration::from_millis(100);

const HELLO_MAGIC: u32 = 0x5254_4350; // "RTCP"
const HELLO_VERSION: u32 = 1;
const HELLO_LEN: usize = 48;

/// Hello reply status codes.
const ST_OK: u32 = 0;
const ST_BAD_VERSION: u32 = 1;
const ST_BAD_TOKEN: u32 = 2;
const ST_BAD_PREFIX: u32 = 3;
const ST_BAD_WORLD: u32 = 4;
const ST_BAD_TARGET: u32 = 5;
const ST_BAD_RANK: u32 = 6;
const ST_DUPLICATE: u32 = 7;

/// A TCP full mesh implementing [`Transport`].
#[derive(Debug)]
pub struct TcpTransport {
    rank: usize,
    world_size: usize,
    /// Indexed by rank; `None` at our own rank.
    peers: Vec<Option<Peer>>,
    timeout: Duration,
    /// How long to busy-poll before sleeping in `poll` (zero when ranks
    /// outnumber cores, where spinning would steal the peer's CPU).
    spin: Duration,
    /// Reused receive buffer for reductions and small messages.
    staging: Vec<u8>,
    /// Why the transport can no longer be used: an exchange failed part-way
    /// (the byte streams may be mid-frame) or we aborted.
    broken: Option<String>,
    aborted: bool,
}

#[derive(Debug)]
struct Peer {
    stream: TcpStream,
    /// Bytes of an outgoing frame that a failed exchange left unsent; the
    /// stream to this peer is at a frame boundary only when this is 0.
    out_partial: u64,
}

impl TcpTransport {
    /// Builds the full mesh for `rank` of `world_size` (see the module docs).
    ///
    /// Fails with [`Error::Rendezvous`] if a peer turns us away (wrong job
    /// token, another communicator, different world size), with
    /// [`Error::Timeout`] if peers do not show up within `opts.timeout`.
    pub fn connect(
        store: &dyn Store,
        rank: usize,
        world_size: usize,
        opts: &TransportOptions,
    ) -> Result<Self> {
        if world_size == 0 || rank >= world_size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is outside a world of {world_size} ranks"
            )));
        }
        if world_size > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "world size {world_size} does not fit the TCP hello"
            )));
        }
        if opts.listen_ip.is_unspecified() {
            return Err(Error::InvalidArgument(format!(
                "listen_ip {} cannot be advertised to peers; pass an address of this host \
                 that they can reach (127.0.0.1 for a single host)",
                opts.listen_ip
            )));
        }
        let deadline = Deadline::after(opts.timeout);
        let me = HelloCtx {
            rank,
            world_size,
            token: opts.token,
            prefix_hash: fnv1a(opts.prefix.as_bytes()),
        };

        let listener = listen(opts.listen_ip, world_size)?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("reading the listening socket's address", e))?;
        store.set(&addr_key(&opts.prefix, rank), local.to_string().as_bytes())?;

        let mut peers: Vec<Option<Peer>> = (0..world_size).map(|_| None).collect();

        // 1. Dial every lower rank and send our hello; their replies come last,
        //    so we never wait on a lower rank's own dialling.
        let mut dialled = Vec::with_capacity(rank);
        for j in 0..rank {
            let raw = store.get(&addr_key(&opts.prefix, j))?;
            let addr = parse_addr(j, &raw)?;
            let mut stream = dial(addr, j, &deadline)?;
            let hello = Hello {
                rank: rank as u32,
                world: world_size as u32,
                target: j as u32,
                status: ST_OK,
                token: me.token,
                prefix_hash: me.prefix_hash,
            };
            set_io_timeouts(&stream, &deadline)?;
            stream.write_all(&hello.encode()).map_err(|e| {
                handshake_error(e, &deadline, || {
                    format!("sending our hello to rank {j} at {addr}")
                })
            })?;
            dialled.push((j, addr, stream));
        }

        // 2. Accept every higher rank.
        accept_all(&listener, local, &me, &mut peers, &deadline)?;
        drop(listener);

        // 3. Read the lower ranks' answers.
        for (j, addr, mut stream) in dialled {
            set_io_timeouts(&stream, &deadline)?;
            let mut buf = [0u8; HELLO_LEN];
            stream.read_exact(&mut buf).map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    Error::Rendezvous(format!(
                        "rank {j} at {addr} closed the connection without answering our hello \
                         (the process there is not a ringside rank of this job)"
                    ))
                } else {
                    handshake_error(e, &deadline, || {
                        format!("rank {j} at {addr} to answer our hello")
                    })
                }
            })?;
            check_reply(&me, j, addr, &buf)?;
            peers[j] = Some(Peer {
                stream,
                out_partial: 0,
            });
        }

        for peer in peers.iter().flatten() {
            peer.stream
                .set_nonblocking(true)
                .map_err(|e| Error::io("making a peer socket non-blocking", e))?;
        }
        Ok(TcpTransport {
            rank,
            world_size,
            peers,
            timeout: opts.timeout,
            spin: spin_budget(world_size),
            staging: vec![0; STAGING_LEN],
            broken: None,
            aborted: false,
        })
    }

    fn peer_fd(&self, peer: usize, role: &str) -> Result<RawFd> {
        if peer == self.rank {
            return Err(Error::InvalidArgument(format!(
                "rank {} cannot {role} itself over TCP",
                self.rank
            )));
        }
        match self.peers.get(peer) {
            Some(Some(p)) => Ok(p.stream.as_raw_fd()),
            _ => Err(Error::InvalidArgument(format!(
                "cannot {role} rank {peer}: the world has {} ranks",
                self.world_size
            ))),
        }
    }
}

impl Transport for TcpTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn exchange(
        &mut self,
        tag: &Tag,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, Sink<'_>)>,
    ) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(Error::Protocol(format!(
                "rank {}'s TCP transport can no longer be used: {why}",
                self.rank
            )));
        }
        let mut out = match send {
            Some((peer, payload)) => {
                let fd = self.peer_fd(peer, "send to")?;
                let frame = Frame {
                    tag: *tag,
                    len: payload.len() as u64,
                    flags: 0,
                };
                Some(Outgoing {
                    peer,
                    fd,
                    header: frame.encode(),
                    payload,
                    sent: 0,
                    watch: true,
                })
            }
            None => None,
        };
        let mut inc = match recv {
            Some((peer, sink)) => {
                let fd = self.peer_fd(peer, "receive from")?;
                if let Sink::Reduce { dst, dtype, .. } = &sink {
                    if dst.len() % dtype.size() != 0 {
                        return Err(Error::InvalidArgument(format!(
                            "a {} reduction needs a multiple of {} bytes, got {}",
                            dtype,
                            dtype.size(),
                            dst.len()
                        )));
                    }
                }
                let want = sink.len();
                let dest = match sink {
                    Sink::Copy(d) => Dest::Copy(d),
                    s @ Sink::Reduce { .. } => Dest::Reduce(SinkWriter::new(s)),
                };
                Some(Incoming {
                    peer,
                    fd,
                    header: [0; HEADER_LEN],
                    hgot: 0,
                    want,
                    got: 0,
                    dest,
                    done: false,
                })
            }
            None => None,
        };

        let result = progress_loop(
            tag,
            out.as_mut(),
            inc.as_mut(),
            &mut self.staging,
            self.timeout,
            self.spin,
        );
        if let Err(e) = &result {
            if let Some(o) = out.as_ref().filter(|o| o.sent > 0 && !o.done()) {
                if let Some(Some(p)) = self.peers.get_mut(o.peer) {
                    p.out_partial = (o.total() - o.sent) as u64;
                }
            }
            self.broken = Some(format!("an earlier exchange failed: {e}"));
        }
        result
    }

    fn abort(&mut self, reason: &str) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        let reason = truncate_utf8(reason, MAX_ABORT_REASON);
        let frame = Frame {
            tag: Tag {
                collective: Collective::Barrier,
                seq: 0,
                dtype: DType::U8,
                op: 0,
                root: self.rank as u32,
                count: 0,
            },
            len: reason.len() as u64,
            flags: FLAG_ABORT,
        };
        let header = frame.encode();
        for peer in self.peers.iter_mut().flatten() {
            let fd = peer.stream.as_raw_fd();
            // A frame we left half-sent must be finished first, or the peer
            // would read our abort header as payload bytes.
            if pad_partial(fd, &mut peer.out_partial) {
                send_nowait(fd, &header, reason.as_bytes());
            }
            // Errors only mean the connection is already gone.
            let _ = peer.stream.shutdown(Shutdown::Both);
        }
        self.broken = Some(format!("this rank aborted: {reason}"));
    }
}

/// One outgoing frame in flight.
struct Outgoing<'a> {
    peer: usize,
    fd: RawFd,
    header: [u8; HEADER_LEN],
    payload: &'a [u8],
    /// Bytes of header + payload sent so far.
    sent: usize,
    /// Whether to watch the peer's incoming bytes for an abort frame while our
    /// send is blocked (a peer that gave up stops reading from us).
    watch: bool,
}

impl Outgoing<'_> {
    fn total(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    fn done(&self) -> bool {
        self.sent == self.total()
    }

    /// Sends as much as the socket takes now; `Ok(())` when done or when the
    /// socket would block.
    fn progress(&mut self) -> io::Result<()> {
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

enum Dest<'a> {
    /// Received bytes go straight into the caller's buffer.
    Copy(&'a mut [u8]),
    /// Received bytes go through the staging buffer into a reduction.
    Reduce(SinkWriter<'a>),
}

/// One incoming frame in flight.
struct Incoming<'a> {
    peer: usize,
    fd: RawFd,
    header: [u8; HEADER_LEN],
    hgot: usize,
    want: usize,
    got: usize,
    dest: Dest<'a>,
    done: bool,
}

impl Incoming<'_> {
    /// Whether the stream from this peer sits between frames.
    fn at_boundary(&self) -> bool {
        self.hgot == 0 || self.done
    }

    fn feed(&mut self, bytes: &[u8]) {
        match &mut self.dest {
            Dest::Copy(d) => d[self.got..self.got + bytes.len()].copy_from_slice(bytes),
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
                frame.expect(self.peer, tag, self.want)?;
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

/// Runs both halves of an exchange to completion (see the module docs).
fn progress_loop(
    tag: &Tag,
    mut out: Option<&mut Outgoing<'_>>,
    mut inc: Option<&mut Incoming<'_>>,
    staging: &mut [u8],
    timeout: Duration,
    spin: Duration,
) -> Result<()> {
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
        let ms = poll_ms(dl.remaining());
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

/// Looks at what the peer we are blocked sending to has sent us: an abort
/// frame or a closed connection means it will never read our bytes.
fn check_send_peer(o: &mut Outgoing<'_>, tag: &Tag, timeout: Duration) -> Result<()> {
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
fn send_failed(
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
fn read_abort(fd: RawFd, peer: usize, len: u64, have: &[u8], timeout: Duration) -> Error {
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
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one live, initialised pollfd.
                unsafe { libc::poll(&mut p, 1, poll_ms(deadline.remaining())) };
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

/// Finishes a half-sent frame with zeros, without blocking. Returns whether
/// the stream is now at a frame boundary.
fn pad_partial(fd: RawFd, left: &mut u64) -> bool {
    const ZEROS: [u8; 4096] = [0; 4096];
    while *left > 0 {
        let k = (*left).min(ZEROS.len() as u64) as usize;
        match send2(fd, &ZEROS[..k], &[]) {
            Ok(n) => *left -= n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// Sends `a` then `b` as far as the socket takes them without blocking.
fn send_nowait(fd: RawFd, a: &[u8], b: &[u8]) {
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
            Err(_) => return,
        }
    }
}

/// Maps a socket error to [`Error::PeerLost`] when it means the connection
/// is gone, to [`Error::Io`] otherwise.
fn lost_or_io(peer: usize, e: io::Error, doing: String) -> Error {
    let gone = matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNRESET
                | libc::EPIPE
                | libc::ECONNABORTED
                | libc::ETIMEDOUT
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::ENETDOWN
                | libc::EHOSTDOWN
                | libc::ENOTCONN
        )
    );
    if gone {
        Error::PeerLost {
            rank: peer,
            detail: format!("{e} while {doing}"),
        }
    } else {
        Error::io(format!("{doing} (rank {peer})"), e)
    }
}

/// Busy-poll budget: 50 µs while every rank can have a core of its own
/// (judged by the world size against this host's cores), none otherwise.
fn spin_budget(world_size: usize) -> Duration {
    let cores = super::host_cpus();
    if world_size <= cores {
        Duration::from_micros(50)
    } else {
        Duration::ZERO
    }
}

/// Milliseconds for `poll`, rounded up so we never spin on a 0 ms timeout.
fn poll_ms(d: Duration) -> libc::c_int {
    let ms = d.as_micros().div_ceil(1000);
    ms.min(libc::c_int::MAX as u128) as libc::c_int
}

fn iov(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    }
}

/// One non-blocking `sendmsg` of `a` followed by `b` (either may be empty).
/// MSG_NOSIGNAL: a dead peer gives EPIPE, never SIGPIPE.
fn send2(fd: RawFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let v = [iov(a), iov(b)];
    let (ptr, cnt) = match (a.is_empty(), b.is_empty()) {
        (true, _) => (v[1..].as_ptr(), 1),
        (false, true) => (v.as_ptr(), 1),
        (false, false) => (v.as_ptr(), 2),
    };
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = ptr as *mut libc::iovec;
    msg.msg_iovlen = cnt as _;
    // SAFETY: the iovecs point into `a` and `b`, which outlive the call, and
    // the kernel only reads from them.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One non-blocking `recvmsg` filling `a`, then `b` (which may be empty).
fn recv2(fd: RawFd, a: &mut [u8], b: &mut [u8]) -> io::Result<usize> {
    if b.is_empty() {
        return recv1(fd, a);
    }
    let v = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = v.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = 2;
    // SAFETY: the iovecs point into the exclusively borrowed `a` and `b`,
    // which outlive the call; the kernel writes at most their lengths.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn recv1(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    recv_flags(fd, buf, 0)
}

/// One non-blocking `recv` into `buf` with extra `flags`.
fn recv_flags(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `buf` is exclusively borrowed for the call; the kernel writes at
    // most `buf.len()` bytes.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
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

// ---------------------------------------------------------------------------
// Connection setup

fn addr_key(prefix: &str, rank: usize) -> String {
    format!("{prefix}tcp/{rank}")
}

fn parse_addr(rank: usize, raw: &[u8]) -> Result<SocketAddr> {
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
fn fnv1a(bytes: &[u8]) -> u64 {
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
    let mut backoff = Duration::from_millis(5);
    loop {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| Error::io("creating a TCP socket", e))?;
        tune(&s)?;
        let wait = deadline.remaining().max(Duration::from_millis(1));
        let e = match s.connect_timeout(&SockAddr::from(addr), wait) {
            Ok(()) => return Ok(s.into()),
            Err(e) => e,
        };
        let transient = matches!(
            e.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::TimedOut
                | io::ErrorKind::WouldBlock
                | io::ErrorKind::Interrupted
                | io::ErrorKind::HostUnreachable
                | io::ErrorKind::NetworkUnreachable
        );
        if !transient {
            return Err(Error::io(format!("connecting to rank {j} at {addr}"), e));
        }
        if deadline.expired() {
            return Err(deadline.error(format!(
                "rank {j} at {addr} to accept our connection (last error: {e})"
            )));
        }
        std::thread::sleep(backoff.min(deadline.remaining()));
        backoff = (backoff * 2).min(MAX_DIAL_BACKOFF);
    }
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
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        deadline.error(what())
    } else {
        Error::Rendezvous(format!("{}: {e}", what()))
    }
}

/// Who we are, as the hello states it.
struct HelloCtx {
    rank: usize,
    world_size: usize,
    token: [u8; 16],
    prefix_hash: u64,
}

/// The 48-byte hello, used both ways: the dialer's request (`status` 0) and the
/// acceptor's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hello {
    rank: u32,
    world: u32,
    /// The rank the sender meant to reach.
    target: u32,
    status: u32,
    token: [u8; 16],
    prefix_hash: u64,
}

impl Hello {
    fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[8..24].copy_from_slice(&self.token);
        b[24..28].copy_from_slice(&self.rank.to_le_bytes());
        b[28..32].copy_from_slice(&self.world.to_le_bytes());
        b[32..36].copy_from_slice(&self.target.to_le_bytes());
        b[36..40].copy_from_slice(&self.status.to_le_bytes());
        b[40..48].copy_from_slice(&self.prefix_hash.to_le_bytes());
        b
    }

    /// Decodes a hello; `Err` names what was wrong (not ours, or another version).
    fn decode(b: &[u8; HELLO_LEN]) -> std::result::Result<Hello, String> {
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
        let mut token = [0u8; 16];
        token.copy_from_slice(&b[8..24]);
        let mut hash = [0u8; 8];
        hash.copy_from_slice(&b[40..48]);
        Ok(Hello {
            token,
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
                let mut p = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one live, initialised pollfd.
                unsafe { libc::poll(&mut p, 1, poll_ms(deadline.remaining())) };
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
                // A stranger (or another version): it does not get our token.
                if why.contains("version") {
                    reply(&mut stream, me, 0, ST_BAD_VERSION);
                }
                turned_away.push(format!("{from} ({why})"));
                continue;
            }
        };
        let r = hello.rank as usize;
        let (status, fatal, why) = if hello.token != me.token {
            (
                ST_BAD_TOKEN,
                false,
                format!(
                    "{from} claimed to be rank {r} but presented a different job token \
                     (a rank of another job?)"
                ),
            )
        } else if hello.prefix_hash != me.prefix_hash {
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
        reply(&mut stream, me, hello.rank, status);
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

/// Best-effort hello reply; the token goes out only on success, so a stranger
/// never learns it.
fn reply(stream: &mut TcpStream, me: &HelloCtx, target: u32, status: u32) {
    let hello = Hello {
        rank: me.rank as u32,
        world: me.world_size as u32,
        target,
        status,
        token: if status == ST_OK { me.token } else { [0; 16] },
        prefix_hash: if status == ST_OK { me.prefix_hash } else { 0 },
    };
    // A failure shows up on the dialer's side, which reads this reply.
    let _ = stream.write_all(&hello.encode());
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

/// Checks rank `j`'s answer to our hello.
fn check_reply(me: &HelloCtx, j: usize, addr: SocketAddr, buf: &[u8; HELLO_LEN]) -> Result<()> {
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
    // The acceptor proves it belongs to the job too.
    if h.token != me.token || h.prefix_hash != me.prefix_hash {
        return reject("answered with a different job token or store prefix".into());
    }
    if h.rank as usize != j || h.world as usize != me.world_size || h.target as usize != me.rank {
        return reject(format!(
            "answered as rank {} of {} (for rank {}), expected rank {j} of {} (for rank {})",
            h.rank, h.world, h.target, me.world_size, me.rank
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::{Arc, Barrier, mpsc};
    use std::time::Instant;

    use super::*;
    use crate::ReduceOp;
    use crate::rendezvous::MemStore;

    const TOKEN: [u8; 16] = *b"ringside-test-tk";

    fn opts(timeout: Duration) -> TransportOptions {
        TransportOptions {
            timeout,
            prefix: "test/".into(),
            token: TOKEN,
            listen_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// Connects `world` ranks (threads) through one in-memory store.
    fn mesh_with(world: usize, per_rank: impl Fn(usize) -> TransportOptions) -> Vec<TcpTransport> {
        let store = MemStore::new(Duration::from_secs(10));
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .map(|r| {
                    let (store, o) = (&store, per_rank(r));
                    s.spawn(move || TcpTransport::connect(store, r, world, &o).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn mesh(world: usize) -> Vec<TcpTransport> {
        mesh_with(world, |_| opts(Duration::from_secs(10)))
    }

    /// Runs `f` on every rank at once; results in rank order.
    fn on_all<R: Send>(
        ts: &mut [TcpTransport],
        f: impl Fn(&mut TcpTransport) -> R + Sync,
    ) -> Vec<R> {
        std::thread::scope(|s| {
            let hs: Vec<_> = ts.iter_mut().map(|t| s.spawn(|| f(t))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn tag(seq: u32, dtype: DType, count: u64) -> Tag {
        Tag {
            collective: Collective::SendRecv,
            seq,
            dtype,
            op: 0,
            root: 0,
            count,
        }
    }

    /// Bytes that differ per rank and per position, cheap to build even in
    /// debug builds: a 4093-byte block (prime, so it never lines up with
    /// buffer sizes), each copy stamped with its index.
    fn pattern(rank: usize, len: usize) -> Vec<u8> {
        let block: Vec<u8> = (0..4093)
            .map(|i: usize| (i.wrapping_mul(31) ^ rank.wrapping_mul(97)) as u8)
            .collect();
        let mut v = Vec::with_capacity(len);
        let mut n = 0u64;
        while v.len() < len {
            let at = v.len();
            let k = (len - at).min(block.len());
            v.extend_from_slice(&block[..k]);
            let stamp = n.to_le_bytes();
            let s = k.min(stamp.len());
            v[at..at + s].copy_from_slice(&stamp[..s]);
            n += 1;
        }
        v
    }

    #[test]
    fn ring_copy_delivers_every_size() {
        for world in [2, 3, 5] {
            let mut ts = mesh(world);
            for (seq, len) in [0usize, 1, 7, 1000, (4 << 20) + 3].into_iter().enumerate() {
                let t = tag(seq as u32, DType::U8, len as u64);
                on_all(&mut ts, |tr| {
                    let (r, n) = (tr.rank(), tr.world_size());
                    let data = pattern(r, len);
                    let mut got = vec![0xAAu8; len];
                    tr.exchange(
                        &t,
                        Some(((r + 1) % n, &data)),
                        Some(((r + n - 1) % n, Sink::Copy(&mut got))),
                    )
                    .unwrap();
                    assert!(
                        got == pattern((r + n - 1) % n, len),
                        "world {n} rank {r} len {len}: wrong bytes"
                    );
                });
            }
        }
    }

    #[test]
    fn ring_reduce_sums_f32() {
        for world in [2, 3, 5] {
            let mut ts = mesh(world);
            for (seq, count) in [0usize, 1, 7, 1000, (1 << 20) + 3].into_iter().enumerate() {
                let t = tag(seq as u32, DType::F32, count as u64);
                let value = |rank: usize, i: usize| (rank * 1000 + i % 4096) as f32;
                on_all(&mut ts, |tr| {
                    let (r, n) = (tr.rank(), tr.world_size());
                    let left = (r + n - 1) % n;
                    let mine: Vec<f32> = (0..count).map(|i| value(r, i)).collect();
                    let mut acc = mine.clone();
                    tr.exchange(
                        &t,
                        Some(((r + 1) % n, bytemuck::cast_slice(&mine))),
                        Some((
                            left,
                            Sink::Reduce {
                                dst: bytemuck::cast_slice_mut(&mut acc),
                                dtype: DType::F32,
                                op: ReduceOp::Sum,
                            },
                        )),
                    )
                    .unwrap();
                    for (i, v) in acc.iter().enumerate() {
                        assert_eq!(*v, value(r, i) + value(left, i), "rank {r} element {i}");
                    }
                });
            }
        }
    }

    #[test]
    fn large_simultaneous_exchanges_do_not_deadlock() {
        const LEN: usize = 64 << 20;
        // Both directions at once between two ranks.
        let mut ts = mesh(2);
        let t = tag(0, DType::U8, LEN as u64);
        on_all(&mut ts, |tr| {
            let r = tr.rank();
            let data = pattern(r, LEN);
            let mut got = vec![0u8; LEN];
            tr.exchange(
                &t,
                Some((1 - r, &data)),
                Some((1 - r, Sink::Copy(&mut got))),
            )
            .unwrap();
            assert!(got == pattern(1 - r, LEN));
        });
        // A ring: everyone sends right while receiving from the left.
        let mut ts = mesh(3);
        on_all(&mut ts, |tr| {
            let (r, n) = (tr.rank(), tr.world_size());
            let data = pattern(r, LEN);
            let mut got = vec![0u8; LEN];
            tr.exchange(
                &t,
                Some(((r + 1) % n, &data)),
                Some(((r + n - 1) % n, Sink::Copy(&mut got))),
            )
            .unwrap();
            assert!(got == pattern((r + n - 1) % n, LEN));
        });
    }

    #[test]
    fn zero_length_frames_still_carry_the_tag() {
        let mut ts = mesh(2);
        let errs = on_all(&mut ts, |tr| {
            let r = tr.rank();
            // Same (empty) length, different sequence numbers.
            let t = tag(r as u32, DType::U8, 0);
            tr.exchange(&t, Some((1 - r, &[])), Some((1 - r, Sink::Copy(&mut []))))
                .unwrap_err()
        });
        for e in errs {
            assert!(matches!(e, Error::Mismatch(_)), "{e}");
        }
    }

    #[test]
    fn mismatched_tags_fail_on_both_sides() {
        let mut ts = mesh(2);
        let errs = on_all(&mut ts, |tr| {
            let r = tr.rank();
            let t = Tag {
                collective: if r == 0 {
                    Collective::AllReduce
                } else {
                    Collective::Broadcast
                },
                ..tag(3, DType::F32, 25)
            };
            let data = [0u8; 100];
            let mut got = [0u8; 100];
            tr.exchange(
                &t,
                Some((1 - r, &data)),
                Some((1 - r, Sink::Copy(&mut got))),
            )
            .unwrap_err()
        });
        for (r, e) in errs.iter().enumerate() {
            let Error::Mismatch(msg) = e else {
                panic!("rank {r}: expected a mismatch, got {e}")
            };
            assert!(msg.contains(&format!("rank {} sent", 1 - r)), "{msg}");
        }
        // The transport refuses further use instead of reading mid-frame.
        let t = tag(4, DType::U8, 0);
        let e = ts[0].exchange(&t, Some((1, &[])), None).unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e}");
    }

    #[test]
    fn mismatched_lengths_fail_on_both_sides_even_when_large() {
        for (a, b) in [(100usize, 200usize), (5 << 20, 6 << 20)] {
            let mut ts = mesh(2);
            let t = tag(0, DType::U8, 0);
            let start = Instant::now();
            let errs = on_all(&mut ts, |tr| {
                let r = tr.rank();
                let len = if r == 0 { a } else { b };
                let data = vec![1u8; len];
                let mut got = vec![0u8; len];
                tr.exchange(
                    &t,
                    Some((1 - r, &data)),
                    Some((1 - r, Sink::Copy(&mut got))),
                )
                .unwrap_err()
            });
            assert!(start.elapsed() < Duration::from_secs(5));
            for (r, e) in errs.iter().enumerate() {
                let Error::Mismatch(msg) = e else {
                    panic!("rank {r}: expected a mismatch, got {e}")
                };
                assert!(msg.contains(&format!("rank {}", 1 - r)), "{msg}");
            }
        }
    }

    #[test]
    fn dropped_peer_is_lost_promptly_not_timed_out() {
        // Rank 1 waits on rank 0, which goes away.
        let mut ts = mesh(2);
        let mut t1 = ts.pop().unwrap();
        let t0 = ts.pop().unwrap();
        let t = tag(0, DType::U8, 1000);
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(t0);
            Instant::now()
        });
        let mut got = vec![0u8; 1000];
        let e = t1
            .exchange(&t, None, Some((0, Sink::Copy(&mut got))))
            .unwrap_err();
        let dropped_at = dropper.join().unwrap();
        assert!(dropped_at.elapsed() < Duration::from_secs(1));
        assert!(matches!(e, Error::PeerLost { rank: 0, .. }), "{e}");
    }

    #[test]
    fn peer_dropped_mid_payload_is_lost_promptly() {
        const LEN: usize = 64 << 20;
        // Rank 0 gives up sending after a short timeout and drops; rank 1 then
        // receives part of the payload and must notice the loss, then fail to
        // send to the dead rank as well.
        let mut ts = mesh_with(2, |r| {
            opts(Duration::from_millis(if r == 0 { 300 } else { 10_000 }))
        });
        let mut t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        let t = tag(0, DType::U8, LEN as u64);
        let (gone_tx, gone_rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            let data = vec![7u8; LEN];
            let e = t0.exchange(&t, Some((1, &data)), None).unwrap_err();
            assert!(matches!(e, Error::Timeout { .. }), "{e}");
            assert!(e.to_string().contains("rank 1 to take"), "{e}");
            drop(t0);
            gone_tx.send(()).unwrap();
        });
        gone_rx.recv().unwrap();
        let start = Instant::now();
        let mut got = vec![0u8; LEN];
        let e = t1
            .exchange(&t, None, Some((0, Sink::Copy(&mut got))))
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(matches!(e, Error::PeerLost { rank: 0, .. }), "{e}");
        sender.join().unwrap();
    }

    #[test]
    fn sending_to_a_dead_peer_is_lost_not_sigpipe() {
        const LEN: usize = 64 << 20;
        let mut ts = mesh(2);
        let mut t1 = ts.pop().unwrap();
        drop(ts);
        let start = Instant::now();
        let data = vec![1u8; LEN];
        let e = t1
            .exchange(&tag(0, DType::U8, 0), Some((0, &data)), None)
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(matches!(e, Error::PeerLost { rank: 0, .. }), "{e}");
    }

    #[test]
    fn abort_reaches_a_waiting_receiver() {
        let mut ts = mesh(2);
        let mut t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        let aborter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            t0.abort("rank 0 ran out of memory");
            // Unusable afterwards.
            let e = t0
                .exchange(&tag(1, DType::U8, 0), Some((1, &[])), None)
                .unwrap_err();
            assert!(e.to_string().contains("aborted"), "{e}");
        });
        let start = Instant::now();
        let mut got = vec![0u8; 64];
        let e = t1
            .exchange(
                &tag(0, DType::U8, 64),
                None,
                Some((0, Sink::Copy(&mut got))),
            )
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        match e {
            Error::PeerAborted { rank: 0, reason } => {
                assert_eq!(reason, "rank 0 ran out of memory")
            }
            e => panic!("expected PeerAborted, got {e}"),
        }
        aborter.join().unwrap();
    }

    #[test]
    fn abort_reaches_a_blocked_sender() {
        const LEN: usize = 64 << 20;
        let mut ts = mesh(2);
        let mut t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        let aborter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            t0.abort("gave up");
            // Keep the socket open: the sender must notice the abort frame
            // itself, not wait for the connection reset a close would cause.
            std::thread::sleep(Duration::from_millis(1500));
            drop(t0);
        });
        let start = Instant::now();
        let data = vec![3u8; LEN];
        let e = t1
            .exchange(&tag(0, DType::U8, LEN as u64), Some((0, &data)), None)
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_millis(1200));
        assert!(
            matches!(&e, Error::PeerAborted { rank: 0, reason } if reason == "gave up"),
            "{e}"
        );
        aborter.join().unwrap();
    }

    #[test]
    fn abort_after_a_half_sent_frame_still_arrives() {
        // Rank 0 left a frame half-sent (as a failed exchange does); its abort
        // must finish that frame so rank 1 reads the abort, not garbage.
        let mut ts = mesh(2);
        let mut t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        let t = tag(0, DType::U8, 1000);
        let header = Frame {
            tag: t,
            len: 1000,
            flags: 0,
        }
        .encode();
        let fd = t0.peer_fd(1, "send to").unwrap();
        assert_eq!(send2(fd, &header, &[9u8; 10]).unwrap(), HEADER_LEN + 10);
        t0.peers[1].as_mut().unwrap().out_partial = 990;
        t0.broken = Some("a test left a frame half-sent".into());
        t0.abort("send timed out");

        let mut got = vec![0u8; 1000];
        t1.exchange(&t, None, Some((0, Sink::Copy(&mut got))))
            .unwrap();
        assert_eq!(&got[..10], &[9u8; 10]);
        assert!(got[10..].iter().all(|&b| b == 0));
        let mut more = [0u8; 1];
        let e = t1
            .exchange(
                &tag(1, DType::U8, 1),
                None,
                Some((0, Sink::Copy(&mut more))),
            )
            .unwrap_err();
        assert!(
            matches!(&e, Error::PeerAborted { rank: 0, reason } if reason == "send timed out"),
            "{e}"
        );
    }

    #[test]
    fn silent_peer_times_out_naming_it() {
        let mut ts = mesh_with(2, |_| opts(Duration::from_millis(200)));
        let start = Instant::now();
        let mut got = [0u8; 8];
        let e = ts[1]
            .exchange(&tag(7, DType::U8, 8), None, Some((0, Sink::Copy(&mut got))))
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        let msg = e.to_string();
        assert!(matches!(e, Error::Timeout { .. }), "{msg}");
        assert!(msg.contains("rank 0 to send sendrecv#7"), "{msg}");
    }

    #[test]
    fn wrong_token_is_rejected_on_both_sides() {
        let store = MemStore::new(Duration::from_secs(5));
        let timeout = Duration::from_millis(800);
        let start = Instant::now();
        let errs: Vec<Error> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|r| {
                    let store = &store;
                    s.spawn(move || {
                        let mut o = opts(timeout);
                        if r == 1 {
                            o.token = *b"some-other-job!!";
                        }
                        TcpTransport::connect(store, r, 2, &o).unwrap_err()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(start.elapsed() < timeout + Duration::from_secs(1));
        for (r, e) in errs.iter().enumerate() {
            let msg = e.to_string();
            assert!(matches!(e, Error::Rendezvous(_)), "rank {r}: {msg}");
            assert!(msg.contains("token"), "rank {r}: {msg}");
        }
    }

    #[test]
    fn strangers_are_turned_away_and_the_mesh_still_forms() {
        let store = Arc::new(MemStore::new(Duration::from_secs(5)));
        let o = opts(Duration::from_secs(5));
        let ready = Barrier::new(2);
        std::thread::scope(|s| {
            let r0 = s.spawn(|| TcpTransport::connect(&*store, 0, 2, &o).unwrap());
            s.spawn(|| {
                let addr = parse_addr(0, &store.get("test/tcp/0").unwrap()).unwrap();
                // One stranger speaks HTTP, one hangs up at once.
                let mut c = TcpStream::connect(addr).unwrap();
                c.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n..................")
                    .unwrap();
                drop(TcpStream::connect(addr).unwrap());
                ready.wait();
            });
            ready.wait();
            let r1 = s.spawn(|| TcpTransport::connect(&*store, 1, 2, &o).unwrap());
            let mut ts = vec![r0.join().unwrap(), r1.join().unwrap()];
            on_all(&mut ts, |tr| {
                let r = tr.rank();
                let mut got = [0u8; 3];
                tr.exchange(
                    &tag(0, DType::U8, 3),
                    Some((1 - r, &[r as u8; 3])),
                    Some((1 - r, Sink::Copy(&mut got))),
                )
                .unwrap();
                assert_eq!(got, [(1 - r) as u8; 3]);
            });
        });
    }

    #[test]
    fn bad_arguments_are_errors() {
        let mut ts = mesh(2);
        let t = tag(0, DType::U8, 0);
        let e = ts[0].exchange(&t, Some((0, &[])), None).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        let e = ts[0].exchange(&t, Some((5, &[])), None).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        let mut odd = [0u8; 6];
        let sink = Sink::Reduce {
            dst: &mut odd,
            dtype: DType::F32,
            op: ReduceOp::Sum,
        };
        let e = ts[0].exchange(&t, None, Some((1, sink))).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        // Bad arguments do not poison the transport.
        on_all(&mut ts, |tr| {
            let r = tr.rank();
            tr.exchange(&t, Some((1 - r, &[])), Some((1 - r, Sink::Copy(&mut []))))
                .unwrap();
        });
        let store = MemStore::new(Duration::from_secs(1));
        let mut o = opts(Duration::from_secs(1));
        assert!(TcpTransport::connect(&store, 2, 2, &o).is_err());
        o.listen_ip = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        assert!(TcpTransport::connect(&store, 0, 1, &o).is_err());
    }

    #[test]
    fn transport_can_move_to_another_thread() {
        fn is_send<T: Send>() {}
        is_send::<TcpTransport>();
    }

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            rank: 3,
            world: 8,
            target: 1,
            status: ST_BAD_WORLD,
            token: TOKEN,
            prefix_hash: fnv1a(b"x/"),
        };
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        let mut b = h.encode();
        b[0] ^= 1;
        assert!(Hello::decode(&b).is_err());
    }

    /// `cargo test -p collectives --release bench_loopback -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark: run in release with --ignored --nocapture"]
    fn bench_loopback() {
        let mut ts = mesh(2);
        println!("ping-pong latency (one way = round trip / 2), 2 threads on loopback");
        println!(
            "{:>8} {:>10} {:>10} {:>10}",
            "bytes", "min_us", "med_us", "iters"
        );
        let mut seq = 0u32;
        for len in [8usize, 64, 256, 1024, 4096] {
            let iters = 20_000;
            let times = on_all(&mut ts, |tr| {
                let r = tr.rank();
                let data = vec![1u8; len];
                let mut got = vec![0u8; len];
                let t = tag(seq, DType::U8, len as u64);
                let mut rtts = Vec::with_capacity(iters);
                for _ in 0..iters {
                    let start = Instant::now();
                    if r == 0 {
                        tr.exchange(&t, Some((1, &data)), None).unwrap();
                        tr.exchange(&t, None, Some((1, Sink::Copy(&mut got))))
                            .unwrap();
                    } else {
                        tr.exchange(&t, None, Some((0, Sink::Copy(&mut got))))
                            .unwrap();
                        tr.exchange(&t, Some((0, &data)), None).unwrap();
                    }
                    rtts.push(start.elapsed());
                }
                rtts.sort();
                rtts
            });
            seq += 1;
            let rtts = &times[0];
            println!(
                "{len:>8} {:>10.2} {:>10.2} {iters:>10}",
                rtts[0].as_secs_f64() * 1e6 / 2.0,
                rtts[iters / 2].as_secs_f64() * 1e6 / 2.0
            );
        }
        println!(
            "streaming bandwidth, GB/s (1e9 B/s): rank 0 -> rank 1 into a Copy sink, into an \
             f32-sum Reduce sink, and both ways at once (per direction)"
        );
        println!(
            "{:>8} {:>10} {:>10} {:>10}",
            "MiB", "copy", "reduce", "bidir"
        );
        for mib in [1usize, 4, 16, 64] {
            let len = mib << 20;
            let reps = (1024 / mib).max(16);
            let mut gbps = [0.0f64; 3];
            for (mode, g) in gbps.iter_mut().enumerate() {
                let t = tag(seq, DType::F32, (len / 4) as u64);
                seq += 1;
                let secs = on_all(&mut ts, |tr| {
                    let r = tr.rank();
                    // Non-zero, so every page is really mapped before timing.
                    let data = vec![1u8; len];
                    let mut got = vec![1u8; len];
                    let mut ack = [0u8; 0];
                    let start = Instant::now();
                    for _ in 0..reps {
                        match (mode, r) {
                            (0 | 1, 0) => tr.exchange(&t, Some((1, &data)), None).unwrap(),
                            (0, _) => tr
                                .exchange(&t, None, Some((0, Sink::Copy(&mut got))))
                                .unwrap(),
                            (1, _) => {
                                let sink = Sink::Reduce {
                                    dst: &mut got,
                                    dtype: DType::F32,
                                    op: ReduceOp::Sum,
                                };
                                tr.exchange(&t, None, Some((0, sink))).unwrap()
                            }
                            _ => tr
                                .exchange(
                                    &t,
                                    Some((1 - r, &data)),
                                    Some((1 - r, Sink::Copy(&mut got))),
                                )
                                .unwrap(),
                        }
                    }
                    // Close the timing on the sender once everything arrived.
                    let fin = tag(u32::MAX, DType::U8, 0);
                    if r == 0 {
                        tr.exchange(&fin, None, Some((1, Sink::Copy(&mut ack))))
                            .unwrap();
                    } else {
                        tr.exchange(&fin, Some((0, &[])), None).unwrap();
                    }
                    start.elapsed().as_secs_f64()
                });
                *g = (len * reps) as f64 / secs[0] / 1e9;
            }
            println!(
                "{mib:>8} {:>10.2} {:>10.2} {:>10.2}",
                gbps[0], gbps[1], gbps[2]
            );
        }
    }
}
