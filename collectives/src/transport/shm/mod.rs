//! Shared-memory transport: one single-producer/single-consumer byte ring per
//! directed pair of ranks, all in one segment under `/dev/shm`.
//!
//! # Why it looks like this
//! Ranks on one host need not pay for sockets: a message is copied once into a
//! ring the receiver can see, and the receiver reduces (or copies) straight out
//! of the ring into its destination. Positions are 64-bit byte counters that
//! only grow (`head` = bytes published by the producer, `tail` = bytes the
//! consumer is done with), each on its own pair of cache lines so the two sides
//! never write the same line. A message is the 32-byte [`Frame`] header then the
//! payload, padded to 8 bytes: every published position is a multiple of 8, so
//! the receiver always sees whole elements of every dtype, and the ring memory
//! is 8-byte aligned so the typed reduction loop applies.
//!
//! # Segment layout (offsets in bytes)
//! ```text
//! 0       identity: magic, version, world, ring capacity, total length, job token
//! 128     abort word ((rank+1)<<1 | reason-ready), reason length
//! 256     abort reason (up to 1024 bytes of UTF-8)
//! 1280    per rank, 256 bytes: [doorbell futex word, sleeping flag] on one
//!         128-byte line; [pid, process start time, pid namespace, last CPU]
//!         on the next
//! ...     per ordered pair (i, j), 256 bytes: head (line 0), tail (line 1)
//! page    per ordered pair i != j, `capacity` bytes of ring data
//! ```
//! Rank 0 creates the file, publishes its name in the store, and unlinks it once
//! every rank has mapped it, so nothing is left behind even if ranks are killed.
//!
//! # Waiting
//! A rank that cannot progress spins briefly (cheap when the peer is running on
//! another core), yields a few times, then sleeps on its doorbell futex. It
//! skips the spin when the peer last waited on the CPU we are on: then the
//! peer cannot run until we get off it (the scheduler likes to put a waker
//! and its wakee together, and spinning there costs a whole spin per message). Anyone
//! who publishes data for rank r, or frees ring space r is waiting for, checks
//! r's sleeping flag after a full fence and rings the bell only when r sleeps,
//! so the fast path costs no system call. Sleeps are short (50 ms) so the
//! sleeper re-checks the deadline, the abort word and whether its peer process
//! still exists; ranks outnumbering cores therefore do not collapse into
//! spinning against each other, and a SIGKILLed peer is noticed in ~100 ms.
//!
//! # Where things are
//! - `segment.rs`: the file, its layout, creating and checking it.
//! - `ring.rs`: the single-producer/single-consumer byte rings.
//! - `single_copy.rs`: large messages read straight from the sender's
//!   buffer (between thread ranks always, between processes where it pays).
//! - `route.rs`: between processes, ring or single copy for each size,
//!   chosen by timing both.
//! - `reply.rs`: both halves of a two-rank all_reduce in one exchange, the
//!   receiver answering in the ring.
//! - `streaming.rs`: copying messages larger than the cache out of the ring
//!   without reading their destination first.
//! - `wait.rs`: spinning, yielding and sleeping on the doorbell (each rank is
//!   bound to CPUs of its own, `sys::affinity`, so that spinning pays).
//! - `liveness.rs`: noticing that a peer's process has died.
//! - `abort.rs`: the abort word every rank watches.

mod abort;
mod liveness;
mod reply;
mod ring;
mod route;
mod segment;
mod single_copy;
mod streaming;
#[cfg(test)]
mod tests;
mod wait;

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use self::liveness::{PeerProc, claim_rank, peer_procs};
use self::ring::{Cursor, Rx, Stage, Tx};
use self::segment::{Layout, SHM_DIR, Segment, create_segment, open_segment, ring_capacity};
use self::single_copy::{DESCRIPTOR_LEN, Reach};
use self::wait::{OVERSUBSCRIBED_SPIN_TIME, OVERSUBSCRIBED_YIELDS, SPIN_TIME, Wait, YIELDS};
use super::{
    Frame, Pair, Sink, Tag, Transport, TransportOptions, WaitWatch, reduce_pair_in_two_steps,
};
use crate::error::{Error, Result};
use crate::rendezvous::{Store, barrier};

/// Ring capacity per directed pair when the world is small (bytes).
///
/// Tuned with `shm_bench_two_processes` (in `tests/processes.rs`) on a 2-core
/// EPYC VM: rings of 256 KiB to 2 MiB with 32 to 128 KiB chunks all gave
/// the same 2-rank all-reduce bandwidth within noise (~26 GB/s at 1 MiB,
/// ~24 GB/s at 4 MiB), so this is the middle: room for a sender to run ahead
/// of a slower reducer, and still L2-sized.
pub const DEFAULT_RING_BYTES: usize = 1 << 20;
/// The smallest ring capacity accepted (bytes).
pub const MIN_RING_BYTES: usize = 4096;
/// The largest ring capacity accepted (bytes).
pub const MAX_RING_BYTES: usize = 1 << 30;
/// The largest world size this transport accepts: there are `n·(n−1)` rings.
pub const MAX_WORLD: usize = 256;

/// Bytes copied or reduced between position updates: small enough that the
/// other side starts working on a chunk while the next one is written.
const CHUNK_BYTES: usize = 64 << 10;

/// Shared-memory rings between the ranks of one host.
pub struct ShmTransport {
    seg: Segment,
    layout: Layout,
    rank: usize,
    world: usize,
    chunk: usize,
    timeout: Duration,
    out: Vec<Cursor>,
    inc: Vec<Cursor>,
    peers: Vec<PeerProc>,
    last_liveness: Instant,
    aborted: Option<String>,
    spin_time: Duration,
    yields: u32,
    /// The CPU (+1) last recorded in our slot, to write it only on change.
    cpu: u32,
    /// How we can read each peer's memory (single copy).
    reach: Vec<Reach>,
    /// Where a cross-process single-copy reduction lands first.
    bounce: Vec<u64>,
    /// `RINGSIDE_SHM_SINGLE_COPY`, read at set-up.
    mode: single_copy::Mode,
    /// Between processes in `auto` mode: ring or single copy, per size.
    routes: route::Routes,
    /// This rank's CPU binding, undone when the transport goes.
    _binding: Option<crate::sys::affinity::Binding>,
    /// Hears of stalled waits (the flight recorder).
    watch: Option<std::sync::Arc<dyn WaitWatch>>,
}

impl fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmTransport")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("ring_bytes", &self.layout.cap)
            .field("single_copy", &self.mode)
            .field("routes_decided", &self.routes.decided())
            .finish_non_exhaustive()
    }
}

/// The bytes of the whole operation a message belongs to (its tag's count
/// of its dtype): with the message's own size, what its route is learnt by.
pub(super) fn op_bytes(tag: &Tag) -> usize {
    (tag.count as usize).saturating_mul(tag.dtype.size())
}

impl ShmTransport {
    /// Connects `world_size` ranks on this host through a segment under
    /// `/dev/shm`, with ring sizes chosen from the world size.
    ///
    /// Every rank calls this with the same store, prefix and token. Rank 0
    /// creates the segment and publishes its name under `"{prefix}shm/name"`;
    /// the prefix must be fresh for every communicator.
    pub fn connect(
        store: &dyn Store,
        rank: usize,
        world_size: usize,
        opts: &TransportOptions,
    ) -> Result<Self> {
        Self::connect_in(Path::new(SHM_DIR), store, rank, world_size, opts, None)
    }

    /// Like [`ShmTransport::connect`] with an explicit ring capacity per
    /// directed pair (a power of two in `MIN_RING_BYTES..=MAX_RING_BYTES`).
    /// Only rank 0's choice counts; the others read it from the segment.
    pub fn connect_with_ring_bytes(
        store: &dyn Store,
        rank: usize,
        world_size: usize,
        opts: &TransportOptions,
        ring_bytes: usize,
    ) -> Result<Self> {
        Self::connect_in(
            Path::new(SHM_DIR),
            store,
            rank,
            world_size,
            opts,
            Some(ring_bytes),
        )
    }

    /// Ring capacity per directed pair, in bytes.
    pub fn ring_bytes(&self) -> usize {
        self.layout.cap
    }

    fn connect_in(
        dir: &Path,
        store: &dyn Store,
        rank: usize,
        world: usize,
        opts: &TransportOptions,
        ring_bytes: Option<usize>,
    ) -> Result<Self> {
        if world == 0 || world > MAX_WORLD || rank >= world {
            return Err(Error::InvalidArgument(format!(
                "shared-memory transport: rank {rank} of world size {world} (world must be 1..={MAX_WORLD})"
            )));
        }
        // Read before anything is shared, so a bad value fails every rank
        // (they share the environment) before rendezvous.
        let mode = single_copy::Mode::from_env()?;
        let name_key = format!("{}shm/name", opts.prefix);
        // Rank 0 unlinks the file once every rank has mapped it: this barrier
        // says when. A rank that cannot attach gives up on it, so the others
        // fail at once with its reason.
        let attached_key = format!("{}shm/attached", opts.prefix);
        let give_up = |e: &Error| {
            barrier::give_up(
                store,
                &attached_key,
                &format!("shared-memory set-up failed on rank {rank}: {e}"),
            )
        };
        let (seg, layout, created) = if rank == 0 {
            let made = ring_capacity(world, ring_bytes)
                .and_then(|cap| create_segment(dir, &opts.token, world, cap));
            match made {
                Ok((seg, layout, path, name)) => {
                    if let Err(e) = store.set(&name_key, name.as_bytes()) {
                        let _ = std::fs::remove_file(&path);
                        return Err(e);
                    }
                    (seg, layout, Some(path))
                }
                Err(e) => {
                    // Tell the others at once instead of letting them time out.
                    let _ = store.set(&name_key, format!("!{e}").as_bytes());
                    return Err(e);
                }
            }
        } else {
            let value = store.get(&name_key)?;
            let name = String::from_utf8_lossy(&value).into_owned();
            if let Some(why) = name.strip_prefix('!') {
                return Err(Error::Rendezvous(format!(
                    "rank 0 could not create the shared-memory segment: {why}"
                )));
            }
            match open_segment(dir, &name, &name_key, &opts.token, world) {
                Ok((seg, layout)) => (seg, layout, None),
                Err(e) => {
                    give_up(&e);
                    return Err(e);
                }
            }
        };

        let attached = claim_rank(&seg, &layout, rank).and_then(|()| {
            single_copy::publish_probe(&seg, &layout, rank);
            barrier::join(store, &attached_key, rank, world, opts.timeout).inspect_err(give_up)
        });
        if let Some(path) = created {
            // Everyone has mapped it (or given up): the name is no longer
            // needed, and unlinking now means a killed job leaks nothing. A
            // failure here only leaves a file behind, so it is not fatal.
            let _ = std::fs::remove_file(path);
        }
        attached?;

        let peers = peer_procs(&seg, &layout, rank);
        let binding = crate::sys::affinity::bind_local_rank(rank, world);
        // All ranks of this transport share the host, so the world size is
        // the number of ranks competing for its cores.
        let cores = super::host_cpus();
        let (spin_time, yields) = if world > cores {
            (OVERSUBSCRIBED_SPIN_TIME, OVERSUBSCRIBED_YIELDS)
        } else {
            (SPIN_TIME, YIELDS)
        };
        let mut t = ShmTransport {
            spin_time,
            yields,
            chunk: CHUNK_BYTES.min(layout.cap / 4),
            seg,
            layout,
            rank,
            world,
            timeout: opts.timeout,
            out: vec![Cursor::default(); world],
            inc: vec![Cursor::default(); world],
            peers,
            last_liveness: Instant::now(),
            aborted: None,
            cpu: 0,
            reach: vec![Reach::Ring; world],
            bounce: Vec::new(),
            mode,
            routes: route::Routes::default(),
            _binding: binding,
            watch: None,
        };
        t.probe_peers(mode);
        // Every receiver has said whether it can read its senders' memory
        // before anyone sends: the first message takes the same path as the
        // rest, so runs and tests do not depend on who got here first.
        barrier::join(
            store,
            &format!("{}shm/probed", opts.prefix),
            rank,
            world,
            opts.timeout,
        )?;
        Ok(t)
    }

    /// Fails if this rank or any other has aborted.
    fn check_usable(&mut self) -> Result<()> {
        if let Some(reason) = &self.aborted {
            return Err(Error::PeerAborted {
                rank: self.rank,
                reason: format!("this rank aborted earlier: {reason}"),
            });
        }
        self.check_abort()
    }

    /// Moves `tx` and `rx` until both are done, waiting while neither can.
    fn run(
        &mut self,
        tag: &Tag,
        mut tx: Option<&mut Tx<'_>>,
        mut rx: Option<&mut Rx<'_>>,
    ) -> Result<()> {
        let mut w = Wait::new();
        let mut deadline = None;
        loop {
            let mut moved = false;
            let mut pending = false;
            if let Some(t) = tx.as_deref_mut()
                && !t.done()
            {
                if t.pos < t.end || t.ack.is_some() {
                    moved |= self.push(t)?;
                }
                if !t.answered() {
                    moved |= self.take_reply(t)?;
                }
                pending |= !t.done();
            }
            if let Some(r) = rx.as_deref_mut()
                && r.stage != Stage::Done
            {
                moved |= self.pull(tag, r)?;
                pending |= r.stage != Stage::Done;
            }
            if !pending {
                return Ok(());
            }
            if moved {
                w = Wait::new();
                continue;
            }
            self.wait(tag, tx.as_deref(), rx.as_deref(), &mut w, &mut deadline)?;
        }
    }

    fn check_peer(&self, peer: usize, what: &str) -> Result<()> {
        if peer >= self.world || peer == self.rank {
            return Err(Error::InvalidArgument(format!(
                "rank {} cannot {what} rank {peer} over shared memory (world size {})",
                self.rank, self.world
            )));
        }
        Ok(())
    }
}

impl Transport for ShmTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn latency_path_bytes(&self) -> usize {
        // Both ranks of a pair see the same reach of each other.
        if self.world == 2 && self.answers_in_ring(1 - self.rank) {
            reply::PAIR_LATENCY_BYTES
        } else {
            crate::algorithms::SMALL_BYTES
        }
    }

    fn exchange(
        &mut self,
        tag: &Tag,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, Sink<'_>)>,
    ) -> Result<()> {
        if let Some((p, _)) = send {
            self.check_peer(p, "send to")?;
        }
        if let Some((p, _)) = &recv {
            self.check_peer(*p, "receive from")?;
        }
        self.check_usable()?;
        // The whole operation's buffer decides whether copies stream (an
        // all_reduce of 32 MiB receives 16 MiB messages but sweeps 32 MiB),
        // and with the message's size which path a message takes.
        let whole = op_bytes(tag);
        let route = send.map(|(peer, payload)| self.route(peer, payload.len(), whole, tag.seq));
        let single = route.is_some_and(|(r, _)| r.single());
        let started = route.filter(|(r, _)| r.timed).map(|_| Instant::now());
        // A single-copy message streams its descriptor instead of the
        // payload; the array outlives the exchange's borrow of it.
        let desc = match send {
            Some((_, payload)) if single => single_copy::descriptor(payload),
            _ => [0; DESCRIPTOR_LEN],
        };
        let mut tx = send.map(|(peer, payload)| {
            let body: &[u8] = if single { &desc } else { payload };
            let hdr = Frame {
                tag: *tag,
                len: payload.len() as u64,
                flags: route.map_or(0, |(r, _)| r.path.flag()),
            }
            .encode();
            Tx::new(peer, hdr, body, payload.len(), single)
        });
        let mut rx = recv.map(|(peer, sink)| Rx {
            peer,
            want: sink.len(),
            stream: sink.len().max(whole) >= streaming::threshold(),
            sink,
            stage: Stage::Header,
            reply: false,
        });
        let result = self.run(tag, tx.as_mut(), rx.as_mut());
        if let (Some(t0), Some((_, class))) = (started, route) {
            match &result {
                Ok(()) => self.routes.record(class, t0.elapsed()),
                Err(_) => self.routes.discard(class),
            }
        }
        if let (Err(e), Some(t)) = (&result, &tx) {
            if t.ack.is_some() {
                // Our payload may be under a peer's read: it must not be
                // freed until that read is over.
                self.abandon_single_copy(t.peer, &e.to_string());
            }
        }
        result
    }

    fn reduce_pair(&mut self, tag: &Tag, pair: Pair<'_>) -> Result<()> {
        self.check_peer(pair.peer, "reduce with")?;
        if !self.answers_in_ring(pair.peer) {
            return reduce_pair_in_two_steps(self, tag, pair);
        }
        self.check_usable()?;
        self.reduce_pair_in_ring(tag, pair)
    }

    fn abort(&mut self, reason: &str) {
        if self.aborted.is_none() {
            self.aborted = Some(reason.to_owned());
        }
        self.publish_abort(reason);
    }

    fn set_watch(&mut self, watch: Option<std::sync::Arc<dyn WaitWatch>>) {
        self.watch = watch;
    }
}
