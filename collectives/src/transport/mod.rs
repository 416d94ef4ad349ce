//! Point-to-point byte transports for the reference backend.
//!
//! - [`tcp`]: a full mesh of TCP connections (TCP_NODELAY), works across hosts.
//! - [`shm`]: shared-memory rings between ranks on one host.
//!
//! Every message is a 32-byte [`Tag`] frame followed by its payload. The tag
//! names the collective, sequence number, dtype, op, root and count, so a rank
//! that receives a message from a peer that called something else fails with
//! [`Error::Mismatch`] at once instead of reducing garbage.

pub mod observed;
#[cfg(test)]
pub(crate) mod send_log;
pub mod shm;
pub mod tcp;

use std::time::Duration;

use crate::Collective;
use crate::copy::copy;
use crate::element::{self, DType, ReduceOp};
use crate::error::{Error, Result};

/// Which transport the reference backend uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// Shared memory when every rank is on this host, TCP otherwise.
    Auto,
    /// TCP full mesh.
    Tcp,
    /// Shared memory (all ranks must share a host).
    Shm,
}

impl TransportKind {
    /// Parses `auto`, `tcp` or `shm`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(TransportKind::Auto),
            "tcp" => Some(TransportKind::Tcp),
            "shm" | "shared-memory" => Some(TransportKind::Shm),
            _ => None,
        }
    }
    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Auto => "auto",
            TransportKind::Tcp => "tcp",
            TransportKind::Shm => "shm",
        }
    }
}

/// What every message carries ahead of its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// Which operation the sender is in.
    pub collective: Collective,
    /// The sender's operation sequence number (collectives count per
    /// communicator; send/recv count per peer pair).
    pub seq: u32,
    /// Element type.
    pub dtype: DType,
    /// Reduction op code ([`ReduceOp::code`]), 0 where none applies.
    pub op: u8,
    /// Root rank, 0 where none applies.
    pub root: u32,
    /// Per-rank element count of the whole operation (not of this message).
    pub count: u64,
}

impl Tag {
    /// Describes the call this tag belongs to, for error messages and the
    /// flight recorder: `all_reduce#9 (1280 × float, avg)`,
    /// `broadcast#9 (1280 × float, root 0)`, `barrier#3`.
    pub fn describe(&self) -> String {
        let mut s = format!("{}#{}", self.collective, self.seq);
        if self.collective == Collective::Barrier {
            return s;
        }
        s.push_str(&format!(" ({} × {}", self.count, self.dtype));
        if matches!(
            self.collective,
            Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
        ) {
            let op = ReduceOp::from_code(self.op).map_or("?", ReduceOp::name);
            s.push_str(&format!(", {op}"));
        }
        if matches!(
            self.collective,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        ) {
            s.push_str(&format!(", root {}", self.root));
        }
        if self.collective == Collective::SendRecv {
            s.push_str(&format!(", from rank {}", self.root));
        }
        s.push(')');
        s
    }
}

/// Size of the frame header in bytes.
pub const HEADER_LEN: usize = 32;
const MAGIC: u32 = 0x5249_4e47; // "RING"
/// Frame flag: the payload is a UTF-8 abort reason, not data.
pub const FLAG_ABORT: u8 = 1;
/// Frame flag (shared memory only): the payload stays in the sender's memory
/// and the frame carries its address and length; see `shm::single_copy`.
pub const FLAG_SINGLE_COPY: u8 = 2;
/// Frame flag (shared memory only): the receiver copies the payload out with
/// non-temporal stores; see `shm::streaming` and `shm::route`.
pub const FLAG_STREAM: u8 = 4;
/// Frame flag (shared memory only): the receiver writes its reduction of the
/// payload back over it in the ring, for the sender to take; see
/// `shm::reply` and [`Transport::reduce_pair`].
pub const FLAG_REPLY: u8 = 8;

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The sender's tag.
    pub tag: Tag,
    /// Payload bytes that follow.
    pub len: u64,
    /// [`FLAG_ABORT`], [`FLAG_SINGLE_COPY`], [`FLAG_STREAM`], [`FLAG_REPLY`] or 0.
    pub flags: u8,
}

impl Frame {
    /// Encodes the header (little-endian).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&self.tag.seq.to_le_bytes());
        h[8] = self.tag.collective.code();
        h[9] = self.tag.dtype.code();
        h[10] = self.tag.op;
        h[11] = self.flags;
        h[12..16].copy_from_slice(&self.tag.root.to_le_bytes());
        h[16..24].copy_from_slice(&self.tag.count.to_le_bytes());
        h[24..32].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    /// Decodes a header, rejecting bytes that are not a ringside frame.
    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<Frame> {
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let long = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
        if word(0) != MAGIC {
            return Err(Error::Protocol(format!(
                "bad frame magic {:#x}: the peer is not a ringside rank of this job",
                word(0)
            )));
        }
        let collective = Collective::from_code(h[8])
            .ok_or_else(|| Error::Protocol(format!("unknown collective code {}", h[8])))?;
        let dtype = DType::from_code(h[9])
            .ok_or_else(|| Error::Protocol(format!("unknown dtype code {}", h[9])))?;
        Ok(Frame {
            tag: Tag {
                collective,
                seq: word(4),
                dtype,
                op: h[10],
                root: word(12),
                count: long(16),
            },
            len: long(24),
            flags: h[11],
        })
    }

    /// Checks a received data frame from `peer` against what rank `me`
    /// expects. A different call is reported as both ranks' calls, side by
    /// side ("rank 0 is in all_reduce#9 (…), rank 1 is in broadcast#9 (…)"):
    /// this is the desync check, and it fires in the first exchange of the
    /// call, the reference backend's agreement round.
    ///
    /// An abort frame is not checked here: transports read its reason and
    /// return [`Error::PeerAborted`].
    pub fn expect(&self, me: usize, peer: usize, want: &Tag, want_len: usize) -> Result<()> {
        if self.tag != *want {
            return Err(Error::Mismatch(format!(
                "rank {me} is in {}, rank {peer} is in {}",
                want.describe(),
                self.tag.describe(),
            )));
        }
        if self.len != want_len as u64 {
            return Err(Error::Mismatch(format!(
                "rank {peer} sent {} bytes in {}, but rank {me} expects {want_len} bytes",
                self.len,
                want.describe(),
            )));
        }
        Ok(())
    }
}

/// Where received payload bytes go.
#[derive(Debug)]
pub enum Sink<'a> {
    /// Copy into this slice.
    Copy(&'a mut [u8]),
    /// Reduce into this slice: `dst[i] = op(dst[i], received[i])`.
    Reduce {
        /// Accumulator, also the expected payload length.
        dst: &'a mut [u8],
        /// Element type.
        dtype: DType,
        /// Operator (`Avg` sums; the algorithm divides at the end).
        op: ReduceOp,
    },
}

impl Sink<'_> {
    /// Payload bytes this sink expects.
    pub fn len(&self) -> usize {
        match self {
            Sink::Copy(d) => d.len(),
            Sink::Reduce { dst, .. } => dst.len(),
        }
    }
    /// Whether the sink expects no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Consumes `bytes` landing at `offset` of the payload.
    ///
    /// For `Reduce`, `offset` and `bytes.len()` must be multiples of the element
    /// size (except that the final piece ends the payload); [`SinkWriter`]
    /// guarantees this for transports that receive arbitrary byte counts.
    pub fn absorb(&mut self, offset: usize, bytes: &[u8]) {
        match self {
            Sink::Copy(d) => copy(&mut d[offset..offset + bytes.len()], bytes),
            Sink::Reduce { dst, dtype, op } => {
                element::reduce_into(*dtype, *op, &mut dst[offset..offset + bytes.len()], bytes)
            }
        }
    }
}

/// Feeds a [`Sink`] from pieces of arbitrary length, holding back partial
/// elements so reductions always see whole ones.
#[derive(Debug)]
pub struct SinkWriter<'a> {
    sink: Sink<'a>,
    done: usize,
    carry: [u8; 8],
    carried: usize,
    elem: usize,
}

impl<'a> SinkWriter<'a> {
    /// Wraps a sink.
    pub fn new(sink: Sink<'a>) -> Self {
        let elem = match &sink {
            Sink::Copy(_) => 1,
            Sink::Reduce { dtype, .. } => dtype.size(),
        };
        SinkWriter {
            sink,
            done: 0,
            carry: [0; 8],
            carried: 0,
            elem,
        }
    }
    /// Bytes still expected.
    pub fn remaining(&self) -> usize {
        self.sink.len() - self.done - self.carried
    }
    /// Pushes the next received bytes (at most `remaining()` of them).
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.carried > 0 {
            let take = (self.elem - self.carried).min(bytes.len());
            self.carry[self.carried..self.carried + take].copy_from_slice(&bytes[..take]);
            self.carried += take;
            bytes = &bytes[take..];
            if self.carried == self.elem {
                let carry = self.carry;
                self.sink.absorb(self.done, &carry[..self.elem]);
                self.done += self.elem;
                self.carried = 0;
            }
        }
        let whole = bytes.len() / self.elem * self.elem;
        if whole > 0 {
            self.sink.absorb(self.done, &bytes[..whole]);
            self.done += whole;
        }
        let rest = &bytes[whole..];
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carried += rest.len();
    }
}

/// Settings shared by the transports.
#[derive(Clone, Debug)]
pub struct TransportOptions {
    /// Bound on every wait (connect, send, receive).
    pub timeout: Duration,
    /// Prefix for store keys, so several communicators can share one store.
    pub prefix: String,
    /// The job token: peers prove they belong to this job when they connect.
    pub token: [u8; 16],
    /// TCP: the local address to listen on and advertise to peers.
    pub listen_ip: std::net::IpAddr,
    /// TCP: this rank's place on its host, (local rank, ranks on the host),
    /// when the launcher says (`backends::Options::local_rank` and
    /// `per_node`); the transport then binds the rank to its share of the
    /// host's CPUs as the shared-memory one does (`tcp/mod.rs` says when and
    /// why). `None`: unknown, and it does not bind.
    pub local: Option<(usize, usize)>,
}

/// Which halves of an exchange are still waiting, for a [`WaitWatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// The peer our send waits on (to make room or take the message).
    pub send_to: Option<usize>,
    /// The peer we wait to receive from.
    pub recv_from: Option<usize>,
}

/// Told about waits that make no progress (the flight recorder's notices and
/// hang checks; see [`crate::flight`]).
///
/// Transports call it only from their slow path, after a wait has gone
/// [`WATCH_AFTER`] without a byte moving and then at most every
/// [`WATCH_EVERY`] or so, so it costs nothing on the fast path. An error ends
/// the wait with that error.
pub trait WaitWatch: Send + Sync + std::fmt::Debug {
    /// The exchange of `tag` has made no progress for `stalled`.
    fn stalled(&self, tag: &Tag, waiting: Waiting, stalled: Duration) -> Result<()>;
}

/// How long a wait goes without progress before its [`WaitWatch`] hears of it.
pub const WATCH_AFTER: Duration = Duration::from_millis(500);
/// About how often a [`WaitWatch`] hears of a wait that stays stalled.
pub const WATCH_EVERY: Duration = Duration::from_millis(200);

/// Moves tagged messages between ranks.
///
/// Implementations must make [`Transport::exchange`] deadlock-free for any
/// pattern in which every send has a matching receive posted by its peer, no
/// matter how large the messages: sending and receiving progress together.
/// Every wait is bounded by the configured timeout, and a peer that dies makes
/// the wait fail with [`Error::PeerLost`] promptly.
pub trait Transport: Send {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Sends `send.1` to rank `send.0` while receiving a frame from rank
    /// `recv.0` into `recv.1`; returns when both are complete. Either side may
    /// be `None`. Sender and receiver use the same `tag`; the received frame
    /// must match it and carry exactly `recv.1.len()` bytes, or the call fails
    /// with [`Error::Mismatch`].
    fn exchange(
        &mut self,
        tag: &Tag,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, Sink<'_>)>,
    ) -> Result<()>;
    /// Both halves of a two-rank all_reduce (see [`Pair`]) as one step:
    /// afterwards both blocks hold the reduction on both ranks, each element
    /// reduced once, by the rank that owns its block (`op(this rank's, the
    /// peer's)` in `theirs`). The peer calls it with the blocks the other way
    /// round.
    ///
    /// The default is the ring's two steps, a reduce-scatter exchange then an
    /// all-gather one. Shared memory between processes answers in the ring
    /// instead (see `shm::reply`), saving a copy of every byte.
    fn reduce_pair(&mut self, tag: &Tag, pair: Pair<'_>) -> Result<()> {
        reduce_pair_in_two_steps(self, tag, pair)
    }
    /// The largest all_reduce that `Algo::Auto` sends down the latency path
    /// (recursive doubling staged in scratch) over this transport; larger
    /// ones take the bandwidth algorithms. Every rank must answer alike.
    fn latency_path_bytes(&self) -> usize {
        crate::algorithms::SMALL_BYTES
    }
    /// Best effort: tells every peer this rank is giving up, with `reason`, so
    /// peers waiting on us fail with [`Error::PeerAborted`] instead of timing
    /// out. Never blocks for long; the transport is unusable afterwards.
    fn abort(&mut self, reason: &str);
    /// Installs the watch told about stalled waits (none by default).
    fn set_watch(&mut self, watch: Option<std::sync::Arc<dyn WaitWatch>>) {
        let _ = watch;
    }
}

/// What [`Transport::reduce_pair`] reduces with one peer.
#[derive(Debug)]
pub struct Pair<'a> {
    /// The other rank.
    pub peer: usize,
    /// The block this rank sends for `peer` to reduce into its own copy; the
    /// reduction replaces it.
    pub mine: &'a mut [u8],
    /// The block this rank reduces `peer`'s copy into.
    pub theirs: &'a mut [u8],
    /// Element type.
    pub dtype: DType,
    /// Operator (`Avg` sums; the algorithm divides at the end).
    pub op: ReduceOp,
}

/// [`Transport::reduce_pair`] as the ring's two steps: a reduce-scatter
/// exchange, then an all-gather one.
pub fn reduce_pair_in_two_steps<T: Transport + ?Sized>(
    t: &mut T,
    tag: &Tag,
    pair: Pair<'_>,
) -> Result<()> {
    let Pair {
        peer,
        mine,
        theirs,
        dtype,
        op,
    } = pair;
    let reduce = Sink::Reduce {
        dst: &mut *theirs,
        dtype,
        op,
    };
    t.exchange(tag, Some((peer, &*mine)), Some((peer, reduce)))?;
    t.exchange(tag, Some((peer, &*theirs)), Some((peer, Sink::Copy(mine))))
}

/// CPUs online on this host, for deciding whether waiting ranks may spin.
///
/// Not `available_parallelism`: that follows this process's affinity mask, and
/// a launcher that binds each rank to one core (mpirun does by default) would
/// make every rank believe the ranks outnumber the cores — and sleep instead of
/// spinning, adding a wake-up (tens of µs) to every small message.
pub fn host_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}
