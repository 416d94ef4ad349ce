//! A full mesh of TCP connections, one per pair of ranks.
//!
//! # Setting up
//! Every rank listens on `listen_ip` (port 0, so the OS picks a free port) and
//! publishes `"{prefix}tcp/{rank}"` = `"ip:port"` in the store. Rank `i` dials
//! every rank `j < i` and accepts every rank `j > i`, so each pair gets exactly
//! one connection. A rank runs the whole hello with each lower rank in turn,
//! then accepts the higher ranks; a rank accepts once it has finished with its
//! own lower ranks, so the waits form chains down to rank 0, never a cycle.
//!
//! The hello carries a fresh nonce, a hash of the store prefix, the world
//! size, the sender's rank and the rank it meant to reach. The acceptor checks
//! it and answers with its own hello, nonce and proof that it holds the job
//! token; the dialer checks that proof and only then sends its own (the
//! store's challenge–response, `rendezvous/store/proof.rs`): the token never
//! crosses the network, so whatever listens where a rank dials learns nothing
//! it could use. A stranger, another job's rank or a stale address is turned
//! away with a reason the other side prints; the acceptor keeps waiting for the
//! real peer and, if it never comes, says whom it turned away.
//!
//! # Moving bytes
//! After setup every socket is non-blocking, and one whose peer is on this
//! host leaves BBR for cubic where the system chose BBR (`sys::congestion`:
//! BBR paces such a connection at what a busy peer managed to read).
//! [`Transport::exchange`] runs one
//! loop that progresses the send (header and payload in one `sendmsg`) and the
//! receive together and only calls `poll` when both would block, so any pattern
//! of matching sends and receives completes at any message size. Small
//! messages take one `sendmsg` and (usually) one `recvmsg`.
//!
//! Every wait is bounded by the configured timeout, counted from the last time
//! any byte moved: a large transfer that keeps progressing never times out, a
//! stalled one fails with [`Error::Timeout`] naming the peer and the frame.
//!
//! # Placement
//! Where the launcher says where a rank sits on its host
//! (`TransportOptions::local`) and the host's ranks share a scheduling group
//! (`mpirun`'s ranks share its session; `sys::autogroup`), the rank's thread
//! is bound to its share of the CPUs while the transport lives
//! (`sys::affinity`, as the shared-memory transport and the Gloo backend
//! bind; `RINGSIDE_BIND=none` opts out). Unbound there, small calls took
//! ten times as long: on the 2-core AMD EPYC VM of issue 27 (2026-11-28,
//! `mpirun --bind-to none -np 2 ringside bench --transport tcp -b 4 -e 64M -f
//! 16 -n 20 --load 2`, 5 runs each way in turn, in-place medians) 4 B–16 KiB
//! took 129–143 µs unbound in every run against 8–23 bound, while 256 KiB
//! (87–467 µs against 93–141), 4 MiB (3.6–8.0 ms against 6.1–8.2) and
//! 64 MiB (118–205 against 171–207 ms) moved either way from run to run; in
//! `cargo xtask tour --load 2` the reference TCP curve had R² 0.253 with its
//! small sizes at 130 µs, and 0.992 at 9.6–11.5 µs bound. Idle under
//! `mpirun`, one unbound run of two had 4–64 B at 130–144 µs, none of four
//! bound. Small calls of two ranks spinning their 50 µs budget each in turn
//! at 130 µs look like the two sharing one CPU, which `sys::affinity` has
//! seen the scheduler do to two ranks that wake each other (not traced here).
//! A rank that is a scheduling group of its own (ringside's launcher's,
//! torchrun's) stays unbound, as the Gloo backend's do: under the own
//! launcher and `--load 2` binding made small calls faster (7–13 µs against
//! 72–148, 3 runs each) but 64 MiB slower (112–170 ms against 84–130), the
//! bound rank then having only its own core's share.
//!
//! Large calls under `mpirun` beside busy programs are slow for the same
//! reason MPI's are: the job's ranks share one scheduling group, which the
//! kernel weighs as one program. Beside two busy loops the two ranks got
//! 0.26–0.27 of a core each and the loops 0.73–0.74 (2026-11-29, every
//! thread's `schedstat` over 15 s of 64 MiB calls, `mpirun --bind-to none -np
//! 2 ringside bench --transport tcp -b 64M -e 64M -n 100 --load 2`: 176 ms
//! in-place median, against 56–68 or 106–155 under the own launcher, where
//! each rank is a group, in sweeps of that day).
//!
//! Tried on 2026-11-28 for those unbound ranks and not kept: a spin budget
//! that learns (halved when a call's spin ran out, doubled when it paid).
//! Four variants of the rule, judged on whole calls, on a call's first stall
//! (bytes moved or not), and with only calls of up to 256 or 16 KiB
//! learning, against the fixed 50 µs in turn. Beside two busy loops, 9 runs
//! each: 4 B–1 KiB 28–63 µs against 72–137, 64 MiB 74–116 ms against 80–183,
//! but 256 KiB 207–391 µs against 87–392. Idle, 4 MiB took 2.5–2.9 ms against
//! 2.0–2.2 in 7 of 8 pairs of runs (`peers --impl gloo-ring,ringside-tcp -b 1M
//! -e 16M --repeat 3`), even when larger calls spun the full budget. A spin
//! that moves no byte still made those calls faster idle, so what a spin
//! catches does not tell what it is worth here. Scratch runs with no spin at
//! all read 21–54 µs and 65–71 ms under load.
//!
//! Tried on 2026-11-29 and not kept either: no spin while the rank's thread
//! had lately waited for a CPU (its `/proc/thread-self/schedstat`, sampled
//! every 2 ms; idle a rank waited 0.4–1.4 % of the time, beside two busy
//! loops 44 %), messages of 32 KiB and more excepted. Under the own launcher
//! and `--load 2` (`bench --transport tcp`, in-place medians, 3 rounds each in
//! turn with spinning always) it won only where a sweep starts: 4–256 B
//! 21–33 µs against 72–131 in `-b 4 -e 1M -f 4 -n 30`, but 1–16 KiB of the
//! same sweeps 22–87 against 7–11, 256 KiB 87–277 against 86–91 and 1 MiB
//! 254–619 against 250–274, and in longer runs (`-n 300`, 2 rounds) 4 B
//! 22–30 against 10. Spinning ranks fall into step after a while, both
//! running at once on their two cores, and then a call takes 7–10 µs beside
//! the busy loops; ranks that sleep whenever the machine is busy rarely get
//! there. Idle, 4–64 MiB measured alike (`peers --impl gloo-ring,ringside-tcp
//! -b 4M -e 64M -f 4 --repeat 3`, 2 runs each).
//!
//! # Where things are
//! - `handshake.rs`: listening, dialling, and the hello that
//!   keeps strangers and other jobs out of the mesh.
//! - `progress.rs`: one frame out and one frame in, driven
//!   together by one non-blocking loop.
//! - `abort.rs`: telling peers we give up, and noticing when they do.
//! - The raw `sendmsg`/`recvmsg` calls are in `collectives/src/sys/socket.rs`.

mod abort;
mod handshake;
mod outgoing;
mod progress;
#[cfg(test)]
mod tests;

use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use self::outgoing::Outgoing;
use self::progress::{Dest, Incoming, progress_loop, spin_budget};
use super::{Frame, HEADER_LEN, Sink, SinkWriter, Tag, Transport, TransportOptions, WaitWatch};
use crate::error::{Error, Result};
use crate::rendezvous::Store;

/// Staging buffer for reductions: small enough to stay in L2 while the
/// reduction reads it back, large enough that syscalls stay a small cost.
const STAGING_LEN: usize = 256 * 1024;

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
    /// Hears of stalled waits (the flight recorder).
    watch: Option<Arc<dyn WaitWatch>>,
    /// This rank's share of the host's CPUs, held until the transport goes
    /// (see "Placement" in the module docs).
    _binding: Option<crate::sys::affinity::Binding>,
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
        let peers = handshake::connect_mesh(store, rank, world_size, opts)?;
        let binding = crate::sys::affinity::bind_in_shared_group(opts.local);
        Ok(TcpTransport {
            rank,
            world_size,
            peers,
            timeout: opts.timeout,
            spin: spin_budget(world_size),
            staging: vec![0; STAGING_LEN],
            broken: None,
            aborted: false,
            watch: None,
            _binding: binding,
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
                    me: self.rank,
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
            self.watch.as_deref(),
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
        let reason = abort::announce(self.rank, self.peers.iter_mut().flatten(), reason);
        self.broken = Some(format!("this rank aborted: {reason}"));
    }

    fn set_watch(&mut self, watch: Option<Arc<dyn WaitWatch>>) {
        self.watch = watch;
    }
}
