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

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use super::{FLAG_ABORT, Frame, HEADER_LEN, Sink, Tag, Transport, TransportOptions};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::sys::futex;

/// Ring capacity per directed pair when the world is small (bytes).
///
/// Tuned with `shm_bench_two_processes` (bottom of this file) on a 2-core
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

/// Rings shrink so the whole segment stays near this size as the world grows
/// (containers often give /dev/shm only 64 MiB).
const SEGMENT_BUDGET: usize = 32 << 20;
/// Bytes copied or reduced between position updates: small enough that the
/// other side starts working on a chunk while the next one is written.
const CHUNK_BYTES: usize = 64 << 10;
/// How long a waiter spins before it yields its core, when every rank can
/// have a core of its own. A running peer answers within a microsecond, so
/// this only has to outlast scheduling noise; it bounds wasted CPU per wait.
const SPIN_TIME: Duration = Duration::from_micros(50);
/// `sched_yield` calls between spinning and sleeping (same condition).
const YIELDS: u32 = 8;
/// With more ranks than cores the peer we wait for is often not running, and
/// spinning only delays it: go almost straight to the futex. (4 thread ranks
/// on 2 cores, 2000 ring steps: ~0.15 s like this, ~0.5 s with the 50 us
/// spin, ~25 s spinning without sleeping.)
const OVERSUBSCRIBED_SPIN_TIME: Duration = Duration::ZERO;
const OVERSUBSCRIBED_YIELDS: u32 = 2;
/// Longest futex sleep before re-checking deadline, abort word and peer.
const SLEEP_SLICE: Duration = Duration::from_millis(50);
/// How often a sleeping waiter looks at `/proc` for its peer.
const LIVENESS_EVERY: Duration = Duration::from_millis(40);

const SHM_DIR: &str = "/dev/shm";
const NAME_PREFIX: &str = "ringside-shm-";
const SEG_MAGIC: u64 = u64::from_le_bytes(*b"RSIDESHM");
const SEG_VERSION: u32 = 1;
/// Two 64-byte lines: x86 prefetchers pull lines in adjacent pairs, so
/// sharing a 128-byte block would still bounce between cores.
const LINE: usize = 128;
const PAGE: usize = 4096;
const REASON_MAX: usize = 1024;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_WORLD: usize = 12;
const OFF_CAPACITY: usize = 16;
const OFF_TOTAL: usize = 24;
const OFF_TOKEN: usize = 32;
const OFF_ABORT: usize = LINE;
const OFF_ABORT_LEN: usize = LINE + 4;
const OFF_REASON: usize = 2 * LINE;
const OFF_RANKS: usize = OFF_REASON + REASON_MAX;
const RANK_STRIDE: usize = 2 * LINE;
const R_BELL: usize = 0;
const R_SLEEPING: usize = 4;
const R_PID: usize = LINE;
const R_START: usize = LINE + 8;
const R_PIDNS: usize = LINE + 16;
const R_CPU: usize = LINE + 24;
const CTRL_STRIDE: usize = 2 * LINE;

/// Where everything sits in a segment for a given world size and capacity.
#[derive(Clone, Copy, Debug)]
struct Layout {
    world: usize,
    cap: usize,
    ctrl: usize,
    data: usize,
    total: usize,
}

impl Layout {
    fn new(world: usize, cap: usize) -> Option<Layout> {
        let ctrl = OFF_RANKS.checked_add(world.checked_mul(RANK_STRIDE)?)?;
        let ctrl_end = ctrl.checked_add(world.checked_mul(world)?.checked_mul(CTRL_STRIDE)?)?;
        let data = ctrl_end.checked_next_multiple_of(PAGE)?;
        let rings = world.checked_mul(world.saturating_sub(1))?;
        let total = data.checked_add(rings.checked_mul(cap)?)?;
        Some(Layout {
            world,
            cap,
            ctrl,
            data,
            total,
        })
    }
    fn rank(&self, r: usize) -> usize {
        OFF_RANKS + r * RANK_STRIDE
    }
    fn head(&self, from: usize, to: usize) -> usize {
        self.ctrl + (from * self.world + to) * CTRL_STRIDE
    }
    fn tail(&self, from: usize, to: usize) -> usize {
        self.head(from, to) + LINE
    }
    fn ring(&self, from: usize, to: usize) -> usize {
        let j = if to > from { to - 1 } else { to };
        self.data + (from * (self.world - 1) + j) * self.cap
    }
}

/// A `MAP_SHARED` mapping of the whole segment.
struct Segment {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value and unmapped once, in Drop. All
// state other ranks also touch is reached through atomics, or through ring
// bytes whose ownership the head/tail protocol hands back and forth, so moving
// the owner to another thread is sound.
unsafe impl Send for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; nothing borrows the
        // mapping past the owner's lifetime.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

impl Segment {
    fn map(file: &File, len: usize, path: &Path) -> Result<Segment> {
        // SAFETY: a fresh mapping of `len` bytes of an open file; MAP_POPULATE
        // pre-faults it so the first message does not pay for page faults.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io(
                format!("mapping shared-memory segment {}", path.display()),
                io::Error::last_os_error(),
            ));
        }
        Ok(Segment {
            base: p.cast(),
            len,
        })
    }

    /// The atomic u32 at `off` (a layout offset, 4-aligned and in bounds).
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: in bounds and aligned (page-aligned base, layout offsets);
        // shared words are only ever accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// The atomic u64 at `off` (a layout offset, 8-aligned and in bounds).
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: as for `u32_at`.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn ptr(&self, off: usize) -> *mut u8 {
        debug_assert!(off <= self.len);
        // SAFETY: in bounds of the mapping.
        unsafe { self.base.add(off) }
    }
}

/// Our side of one ring: our own position and the last seen position of the
/// other side (re-read only when it is not enough, to avoid cache misses).
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    pos: u64,
    seen: u64,
}

/// What we know about a peer's process, for noticing its death.
#[derive(Clone, Copy, Debug)]
struct PeerProc {
    pid: u32,
    start: u64,
    /// False for ranks that are threads of this process, and for processes in
    /// another pid namespace (their pid means nothing here).
    watch: bool,
}

/// A message being written: header, payload, padding, as one byte stream.
struct Tx<'a> {
    peer: usize,
    hdr: [u8; HEADER_LEN],
    payload: &'a [u8],
    pos: usize,
    end: usize,
}

impl Tx<'_> {
    fn done(&self) -> bool {
        self.pos == self.end
    }
    /// Free bytes needed before writing anything: the header goes in whole so
    /// the receiver never waits on half a header.
    fn min_room(&self) -> usize {
        if self.pos < HEADER_LEN {
            HEADER_LEN - self.pos
        } else {
            8
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Header,
    Payload(usize),
    Done,
}

/// A message being received.
struct Rx<'a> {
    peer: usize,
    sink: Sink<'a>,
    want: usize,
    stage: Stage,
}

/// Escalation state of one stretch of waiting without progress.
struct Wait {
    polls: u32,
    yields: u32,
    since: Option<Instant>,
    /// A peer we wait for last ran on our CPU: spinning would only delay it.
    colocated: bool,
}

impl Wait {
    fn new() -> Wait {
        Wait {
            polls: 0,
            yields: 0,
            since: None,
            colocated: false,
        }
    }
}

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
}

impl fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmTransport")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("ring_bytes", &self.layout.cap)
            .finish_non_exhaustive()
    }
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
        let name_key = format!("{}shm/name", opts.prefix);
        let ready_key = format!("{}shm/ready", opts.prefix);
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
                    let _ = store.set(&ready_key, format!("!rank {rank}: {e}").as_bytes());
                    return Err(e);
                }
            }
        };

        let attached = claim_rank(&seg, &layout, rank).and_then(|()| {
            barrier(store, &opts.prefix, &ready_key, world).inspect_err(|e| {
                let _ = store.set(&ready_key, format!("!rank {rank}: {e}").as_bytes());
            })
        });
        if let Some(path) = created {
            // Everyone has mapped it (or given up): the name is no longer
            // needed, and unlinking now means a killed job leaks nothing. A
            // failure here only leaves a file behind, so it is not fatal.
            let _ = std::fs::remove_file(path);
        }
        attached?;

        let me = read_proc_ids(&seg, &layout, rank);
        let peers = (0..world)
            .map(|r| {
                let p = read_proc_ids(&seg, &layout, r);
                PeerProc {
                    pid: p.pid,
                    start: p.start,
                    watch: r != rank && p.pid != me.pid && p.pidns == me.pidns,
                }
            })
            .collect();
        // All ranks of this transport share the host, so the world size is
        // the number of ranks competing for its cores.
        let cores = super::host_cpus();
        let (spin_time, yields) = if world > cores {
            (OVERSUBSCRIBED_SPIN_TIME, OVERSUBSCRIBED_YIELDS)
        } else {
            (SPIN_TIME, YIELDS)
        };
        Ok(ShmTransport {
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
        })
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

    fn bell(&self, r: usize) -> &AtomicU32 {
        self.seg.u32_at(self.layout.rank(r) + R_BELL)
    }

    fn sleeping(&self, r: usize) -> &AtomicU32 {
        self.seg.u32_at(self.layout.rank(r) + R_SLEEPING)
    }

    /// Wakes rank `r` if it sleeps. Called after publishing a position: the
    /// fence orders that store before reading r's flag, pairing with the fence
    /// r executes between raising its flag and re-reading our position
    /// (Dekker), so either r sees our update or we see r's flag.
    fn notify(&self, r: usize) {
        fence(Ordering::SeqCst);
        if self.sleeping(r).load(Ordering::Relaxed) != 0 {
            let bell = self.bell(r);
            bell.fetch_add(1, Ordering::Release);
            futex::wake_all(bell);
        }
    }

    fn check_abort(&self) -> Result<()> {
        let w = self.seg.u32_at(OFF_ABORT).load(Ordering::Acquire);
        if w == 0 {
            Ok(())
        } else {
            Err(self.abort_error(w))
        }
    }

    #[cold]
    fn abort_error(&self, mut w: u32) -> Error {
        // The aborting rank claims the word first and sets the low bit once
        // its reason is written; give it a moment to finish.
        let t0 = Instant::now();
        while w & 1 == 0 && t0.elapsed() < Duration::from_millis(20) {
            std::thread::yield_now();
            w = self.seg.u32_at(OFF_ABORT).load(Ordering::Acquire);
        }
        let rank = ((w >> 1) as usize).saturating_sub(1);
        let reason = if w & 1 == 1 {
            let len =
                (self.seg.u32_at(OFF_ABORT_LEN).load(Ordering::Acquire) as usize).min(REASON_MAX);
            // SAFETY: the reason area is in bounds and no longer written once
            // the ready bit is set (only the first aborter writes it).
            let bytes = unsafe { std::slice::from_raw_parts(self.seg.ptr(OFF_REASON), len) };
            String::from_utf8_lossy(bytes).into_owned()
        } else {
            "(it did not finish writing its reason)".to_owned()
        };
        Error::PeerAborted { rank, reason }
    }

    /// The consumer's position in our ring to `peer`, checked against ours.
    fn load_tail(&self, peer: usize, pos: u64) -> Result<u64> {
        let tail = self
            .seg
            .u64_at(self.layout.tail(self.rank, peer))
            .load(Ordering::Acquire);
        if tail > pos || pos - tail > self.layout.cap as u64 {
            return Err(self.corrupt(self.rank, peer, pos, tail));
        }
        Ok(tail)
    }

    /// The producer's position in `peer`'s ring to us, checked against ours.
    fn load_head(&self, peer: usize, pos: u64) -> Result<u64> {
        let head = self
            .seg
            .u64_at(self.layout.head(peer, self.rank))
            .load(Ordering::Acquire);
        if head < pos || head - pos > self.layout.cap as u64 {
            return Err(self.corrupt(peer, self.rank, head, pos));
        }
        Ok(head)
    }

    #[cold]
    fn corrupt(&self, from: usize, to: usize, head: u64, tail: u64) -> Error {
        Error::Protocol(format!(
            "shared-memory ring from rank {from} to rank {to} is corrupt (head {head}, tail {tail}, \
             capacity {}): something wrote into the segment out of turn",
            self.layout.cap
        ))
    }

    /// Writes as much of `t` as fits (at most one chunk) and publishes it.
    fn push(&mut self, t: &mut Tx<'_>) -> Result<bool> {
        let cap = self.layout.cap;
        let mut c = self.out[t.peer];
        let want = (t.end - t.pos).min(self.chunk);
        let mut free = cap - (c.pos - c.seen) as usize;
        if free < want {
            c.seen = self.load_tail(t.peer, c.pos)?;
            free = cap - (c.pos - c.seen) as usize;
        }
        if free < t.min_room() {
            self.out[t.peer] = c;
            return Ok(false);
        }
        let n = want.min(free);
        let ring = self.seg.ptr(self.layout.ring(self.rank, t.peer));
        // Stream = header ++ payload ++ padding; padding bytes are never read.
        let mut s = t.pos;
        let end = t.pos + n;
        let mut at = c.pos;
        while s < end {
            let src: &[u8] = if s < HEADER_LEN {
                &t.hdr[s..]
            } else if s - HEADER_LEN < t.payload.len() {
                &t.payload[s - HEADER_LEN..]
            } else {
                break;
            };
            let k = src.len().min(end - s);
            // SAFETY: [at, at+k) lies in ring space the consumer has released
            // (free >= n) and that only this rank writes.
            unsafe { copy_into_ring(ring, cap, at, &src[..k]) };
            s += k;
            at += k as u64;
        }
        c.pos += n as u64;
        t.pos += n;
        self.out[t.peer] = c;
        self.seg
            .u64_at(self.layout.head(self.rank, t.peer))
            .store(c.pos, Ordering::Release);
        self.notify(t.peer);
        Ok(true)
    }

    /// Consumes what has arrived for `r` (the header, then at most one chunk).
    fn pull(&mut self, tag: &Tag, r: &mut Rx<'_>) -> Result<bool> {
        let cap = self.layout.cap;
        let ring = self.seg.ptr(self.layout.ring(r.peer, self.rank));
        let mut c = self.inc[r.peer];
        let start = c.pos;
        if r.stage == Stage::Header {
            if ((c.seen - c.pos) as usize) < HEADER_LEN {
                c.seen = self.load_head(r.peer, c.pos)?;
            }
            let avail = (c.seen - c.pos) as usize;
            if avail < HEADER_LEN {
                self.inc[r.peer] = c;
                return Ok(false);
            }
            let mut h = [0u8; HEADER_LEN];
            // SAFETY: published bytes [pos, pos+32) belong to us until we
            // advance the tail.
            unsafe { copy_from_ring(ring, cap, c.pos, &mut h) };
            let frame = Frame::decode(&h)?;
            if frame.flags & FLAG_ABORT != 0 {
                let len = (frame.len as usize).min(avail - HEADER_LEN).min(REASON_MAX);
                let mut reason = vec![0u8; len];
                // SAFETY: as above, within the published bytes.
                unsafe { copy_from_ring(ring, cap, c.pos + HEADER_LEN as u64, &mut reason) };
                return Err(Error::PeerAborted {
                    rank: r.peer,
                    reason: String::from_utf8_lossy(&reason).into_owned(),
                });
            }
            frame.expect(r.peer, tag, r.want)?;
            c.pos += HEADER_LEN as u64;
            r.stage = if r.want == 0 {
                Stage::Done
            } else {
                Stage::Payload(0)
            };
        }
        if let Stage::Payload(done) = r.stage {
            let left = r.want - done;
            if ((c.seen - c.pos) as usize) < left.min(self.chunk) {
                c.seen = self.load_head(r.peer, c.pos)?;
            }
            let take = ((c.seen - c.pos) as usize).min(left).min(self.chunk);
            if take > 0 {
                let off = (c.pos as usize) & (cap - 1);
                let first = take.min(cap - off);
                // SAFETY: [pos, pos+take) is published and ours until the tail
                // moves; the producer does not write it meanwhile. Both pieces
                // start 8-aligned, so reductions see whole elements.
                unsafe {
                    r.sink
                        .absorb(done, std::slice::from_raw_parts(ring.add(off), first));
                    if first < take {
                        r.sink
                            .absorb(done + first, std::slice::from_raw_parts(ring, take - first));
                    }
                }
                let done = done + take;
                if done == r.want {
                    // The producer published the padding with the last bytes.
                    c.pos += take.next_multiple_of(8) as u64;
                    r.stage = Stage::Done;
                } else {
                    c.pos += take as u64;
                    r.stage = Stage::Payload(done);
                }
            }
        }
        self.inc[r.peer] = c;
        if c.pos == start {
            return Ok(false);
        }
        self.seg
            .u64_at(self.layout.tail(r.peer, self.rank))
            .store(c.pos, Ordering::Release);
        self.notify(r.peer);
        Ok(true)
    }

    /// Whether a poll could progress now (read fresh from shared memory).
    fn can_progress(&self, tx: Option<&Tx<'_>>, rx: Option<&Rx<'_>>) -> bool {
        if let Some(t) = tx.filter(|t| !t.done()) {
            let c = self.out[t.peer];
            let tail = self
                .seg
                .u64_at(self.layout.tail(self.rank, t.peer))
                .load(Ordering::Acquire);
            // An impossible position also counts: the poll reports it.
            let used = c.pos.wrapping_sub(tail);
            if used > self.layout.cap as u64 || self.layout.cap - used as usize >= t.min_room() {
                return true;
            }
        }
        if let Some(r) = rx.filter(|r| r.stage != Stage::Done) {
            let c = self.inc[r.peer];
            let head = self
                .seg
                .u64_at(self.layout.head(r.peer, self.rank))
                .load(Ordering::Acquire);
            let need = if r.stage == Stage::Header {
                HEADER_LEN as u64
            } else {
                1
            };
            if head.wrapping_sub(c.pos) >= need {
                return true;
            }
        }
        false
    }

    /// One step of waiting: spin, then yield, then sleep on the doorbell.
    fn wait(
        &mut self,
        tag: &Tag,
        tx: Option<&Tx<'_>>,
        rx: Option<&Rx<'_>>,
        w: &mut Wait,
        deadline: &mut Option<Deadline>,
    ) -> Result<()> {
        w.polls += 1;
        if w.polls & 63 != 1 {
            std::hint::spin_loop();
            return Ok(());
        }
        // Every 64 polls: the slower checks.
        let now = Instant::now();
        if w.since.is_none() {
            w.colocated = self.colocated(tx, rx);
        }
        let since = *w.since.get_or_insert(now);
        let dl = *deadline.get_or_insert_with(|| Deadline::after(self.timeout));
        self.check_abort()?;
        if !w.colocated && now.duration_since(since) < self.spin_time {
            std::hint::spin_loop();
            return Ok(());
        }
        if dl.expired() {
            return Err(dl.error(self.waiting_for(tag, tx, rx)));
        }
        if w.yields < self.yields && !w.colocated {
            w.yields += 1;
            std::thread::yield_now();
            // Re-enter the slow checks on the next poll.
            w.polls = 0;
            return Ok(());
        }
        w.polls = 0;
        let bell = self.bell(self.rank);
        let sleeping = self.sleeping(self.rank);
        let snap = bell.load(Ordering::Acquire);
        sleeping.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !self.can_progress(tx, rx) && self.check_abort().is_ok() {
            futex::wait(bell, snap, SLEEP_SLICE.min(dl.remaining()));
        }
        sleeping.store(0, Ordering::Relaxed);
        self.check_abort()?;
        if self.last_liveness.elapsed() >= LIVENESS_EVERY {
            self.last_liveness = Instant::now();
            let peers = [
                tx.filter(|t| !t.done()).map(|t| t.peer),
                rx.filter(|r| r.stage != Stage::Done).map(|r| r.peer),
            ];
            for p in peers.into_iter().flatten() {
                let peer = self.peers[p];
                if !peer.watch {
                    continue;
                }
                // What a peer published before it exited is still ours to
                // read: only a wait that can no longer end is an error.
                if let Some(detail) =
                    process_gone(peer.pid, peer.start).filter(|_| !self.can_progress(tx, rx))
                {
                    return Err(Error::PeerLost {
                        rank: p,
                        detail: format!(
                            "{detail} (shared-memory transport, noticed while waiting for {})",
                            self.waiting_for(tag, tx, rx)
                        ),
                    });
                }
            }
        }
        if dl.expired() {
            return Err(dl.error(self.waiting_for(tag, tx, rx)));
        }
        Ok(())
    }

    /// Records the CPU we run on, and tells whether a peer we wait for was
    /// last seen waiting on the same one.
    fn colocated(&mut self, tx: Option<&Tx<'_>>, rx: Option<&Rx<'_>>) -> bool {
        // SAFETY: no preconditions; a vDSO/rseq read on Linux.
        let cpu = unsafe { libc::sched_getcpu() };
        let Ok(cpu) = u32::try_from(cpu) else {
            return false;
        };
        let mine = cpu.wrapping_add(1);
        if mine != self.cpu {
            self.cpu = mine;
            self.seg
                .u32_at(self.layout.rank(self.rank) + R_CPU)
                .store(mine, Ordering::Relaxed);
        }
        let peers = [
            tx.filter(|t| !t.done()).map(|t| t.peer),
            rx.filter(|r| r.stage != Stage::Done).map(|r| r.peer),
        ];
        peers.into_iter().flatten().any(|p| {
            self.seg
                .u32_at(self.layout.rank(p) + R_CPU)
                .load(Ordering::Relaxed)
                == mine
        })
    }

    #[cold]
    fn waiting_for(&self, tag: &Tag, tx: Option<&Tx<'_>>, rx: Option<&Rx<'_>>) -> String {
        let mut parts = Vec::new();
        if let Some(t) = tx.filter(|t| !t.done()) {
            parts.push(format!(
                "rank {} to take {} off the ring ({} of {} bytes written)",
                t.peer,
                tag.describe(),
                t.pos.saturating_sub(HEADER_LEN).min(t.payload.len()),
                t.payload.len()
            ));
        }
        if let Some(r) = rx.filter(|r| r.stage != Stage::Done) {
            let got = match r.stage {
                Stage::Payload(d) => d,
                _ => 0,
            };
            parts.push(format!(
                "rank {} to send {} ({} of {} bytes received)",
                r.peer,
                tag.describe(),
                got,
                r.want
            ));
        }
        format!(
            "{} (rank {} over shared memory)",
            parts.join(" and "),
            self.rank
        )
    }
}

impl Transport for ShmTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn exchange(
        &mut self,
        tag: &Tag,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, Sink<'_>)>,
    ) -> Result<()> {
        if let Some(reason) = &self.aborted {
            return Err(Error::PeerAborted {
                rank: self.rank,
                reason: format!("this rank aborted earlier: {reason}"),
            });
        }
        if let Some((p, _)) = send {
            self.check_peer(p, "send to")?;
        }
        if let Some((p, _)) = &recv {
            self.check_peer(*p, "receive from")?;
        }
        self.check_abort()?;
        let mut tx = send.map(|(peer, payload)| Tx {
            peer,
            hdr: Frame {
                tag: *tag,
                len: payload.len() as u64,
                flags: 0,
            }
            .encode(),
            payload,
            pos: 0,
            end: HEADER_LEN + payload.len().next_multiple_of(8),
        });
        let mut rx = recv.map(|(peer, sink)| Rx {
            peer,
            want: sink.len(),
            sink,
            stage: Stage::Header,
        });
        let mut w = Wait::new();
        let mut deadline = None;
        loop {
            let mut moved = false;
            let mut pending = false;
            if let Some(t) = tx.as_mut() {
                if !t.done() {
                    moved |= self.push(t)?;
                    pending |= !t.done();
                }
            }
            if let Some(r) = rx.as_mut() {
                if r.stage != Stage::Done {
                    moved |= self.pull(tag, r)?;
                    pending |= r.stage != Stage::Done;
                }
            }
            if !pending {
                return Ok(());
            }
            if moved {
                w = Wait::new();
                continue;
            }
            self.wait(tag, tx.as_ref(), rx.as_ref(), &mut w, &mut deadline)?;
        }
    }

    fn abort(&mut self, reason: &str) {
        if self.aborted.is_none() {
            self.aborted = Some(reason.to_owned());
        }
        let word = self.seg.u32_at(OFF_ABORT);
        let claim = ((self.rank as u32) + 1) << 1;
        if word
            .compare_exchange(0, claim, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let mut len = reason.len().min(REASON_MAX);
            while !reason.is_char_boundary(len) {
                len -= 1;
            }
            // SAFETY: the reason area is in bounds, and only the rank that
            // won the claim above writes it, before setting the ready bit.
            unsafe {
                std::ptr::copy_nonoverlapping(reason.as_ptr(), self.seg.ptr(OFF_REASON), len);
            }
            self.seg
                .u32_at(OFF_ABORT_LEN)
                .store(len as u32, Ordering::Release);
            word.fetch_or(1, Ordering::Release);
        }
        for r in (0..self.world).filter(|&r| r != self.rank) {
            let bell = self.bell(r);
            bell.fetch_add(1, Ordering::Release);
            futex::wake_all(bell);
        }
    }
}

/// Copies `src` into the ring at stream position `at`, wrapping at `cap`.
///
/// # Safety
/// `ring` must point at `cap` writable bytes (cap a power of two), and the
/// range must be ring space this rank owns.
unsafe fn copy_into_ring(ring: *mut u8, cap: usize, at: u64, src: &[u8]) {
    let off = (at as usize) & (cap - 1);
    let first = src.len().min(cap - off);
    // SAFETY: per the contract; both pieces stay inside the ring.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), ring.add(off), first);
        std::ptr::copy_nonoverlapping(src.as_ptr().add(first), ring, src.len() - first);
    }
}

/// Copies ring bytes at stream position `at` into `dst`, wrapping at `cap`.
///
/// # Safety
/// As [`copy_into_ring`], for bytes published to this rank.
unsafe fn copy_from_ring(ring: *const u8, cap: usize, at: u64, dst: &mut [u8]) {
    let off = (at as usize) & (cap - 1);
    let first = dst.len().min(cap - off);
    // SAFETY: per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(ring.add(off), dst.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(ring, dst.as_mut_ptr().add(first), dst.len() - first);
    }
}

/// Picks the ring capacity: the caller's, or the largest power of two that
/// keeps the segment within budget (clamped to sane bounds).
fn ring_capacity(world: usize, requested: Option<usize>) -> Result<usize> {
    if let Some(b) = requested {
        if !b.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&b) {
            return Err(Error::InvalidArgument(format!(
                "shared-memory ring capacity {b} must be a power of two between {MIN_RING_BYTES} and {MAX_RING_BYTES}"
            )));
        }
        return Ok(b);
    }
    let fair = SEGMENT_BUDGET / (world * world.saturating_sub(1)).max(1);
    let pow = if fair == 0 {
        0
    } else {
        1usize << (usize::BITS - 1 - fair.leading_zeros())
    };
    Ok(pow.clamp(MIN_RING_BYTES, DEFAULT_RING_BYTES))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn shm_dir_missing(dir: &Path) -> Error {
    Error::io(
        format!(
            "no shared-memory directory {}: this host has no /dev/shm (tmpfs); use the tcp transport",
            dir.display()
        ),
        io::Error::from(io::ErrorKind::NotFound),
    )
}

/// Rank 0: creates, sizes (really allocating, so a full /dev/shm fails here
/// with ENOSPC rather than later with SIGBUS), maps and initialises a segment.
fn create_segment(
    dir: &Path,
    token: &[u8; 16],
    world: usize,
    cap: usize,
) -> Result<(Segment, Layout, PathBuf, String)> {
    let layout = Layout::new(world, cap).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "shared-memory segment for {world} ranks is too large"
        ))
    })?;
    if !dir.is_dir() {
        return Err(shm_dir_missing(dir));
    }
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| {
        Error::io(
            "drawing a random shared-memory segment name",
            io::Error::other(e.to_string()),
        )
    })?;
    let name = format!("{NAME_PREFIX}{}-{}", hex(token), hex(&suffix));
    let path = dir.join(&name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| {
            Error::io(
                format!("creating shared-memory segment {}", path.display()),
                e,
            )
        })?;
    let init = || -> Result<Segment> {
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, layout.total as libc::off_t) };
        if rc != 0 {
            let context = if rc == libc::ENOSPC {
                format!(
                    "{} has no room for a {:.1} MiB shared-memory segment ({world} ranks, {} KiB rings); \
                     free space there, enlarge it (docker: --shm-size), or use the tcp transport",
                    dir.display(),
                    layout.total as f64 / (1 << 20) as f64,
                    cap >> 10
                )
            } else {
                format!("allocating shared-memory segment {}", path.display())
            };
            return Err(Error::io(context, io::Error::from_raw_os_error(rc)));
        }
        let seg = Segment::map(&file, layout.total, &path)?;
        seg.u32_at(OFF_VERSION)
            .store(SEG_VERSION, Ordering::Relaxed);
        seg.u32_at(OFF_WORLD).store(world as u32, Ordering::Relaxed);
        seg.u64_at(OFF_CAPACITY)
            .store(cap as u64, Ordering::Relaxed);
        seg.u64_at(OFF_TOTAL)
            .store(layout.total as u64, Ordering::Relaxed);
        for (i, chunk) in token.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            seg.u64_at(OFF_TOKEN + 8 * i).store(word, Ordering::Relaxed);
        }
        // Magic last: a segment with a valid magic is fully initialised.
        seg.u64_at(OFF_MAGIC).store(SEG_MAGIC, Ordering::Release);
        Ok(seg)
    };
    match init() {
        Ok(seg) => Ok((seg, layout, path, name)),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// Other ranks: opens the segment rank 0 published and checks it is ours.
fn open_segment(
    dir: &Path,
    name: &str,
    key: &str,
    token: &[u8; 16],
    world: usize,
) -> Result<(Segment, Layout)> {
    let well_formed = name.starts_with(NAME_PREFIX)
        && name.len() < 200
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !well_formed {
        return Err(Error::Protocol(format!(
            "store key {key:?} holds {name:?}, which is not a ringside shared-memory segment name"
        )));
    }
    if !dir.is_dir() {
        return Err(shm_dir_missing(dir));
    }
    let path = dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| {
            let context = if e.kind() == io::ErrorKind::NotFound {
                format!(
                    "opening shared-memory segment {}: it is gone (is rank 0 on another host, did it exit, \
                     or is {key:?} left over from an earlier communicator with the same prefix?)",
                    path.display()
                )
            } else {
                format!("opening shared-memory segment {}", path.display())
            };
            Error::io(context, e)
        })?;
    let len = file
        .metadata()
        .map_err(|e| Error::io(format!("inspecting {}", path.display()), e))?
        .len() as usize;
    let foreign = |why: String| {
        Error::Protocol(format!(
            "{} is not a ringside shared-memory segment of this job: {why}",
            path.display()
        ))
    };
    if len < OFF_RANKS {
        return Err(foreign(format!("it is only {len} bytes long")));
    }
    let seg = Segment::map(&file, len, &path)?;
    if seg.u64_at(OFF_MAGIC).load(Ordering::Acquire) != SEG_MAGIC {
        return Err(foreign("bad magic".into()));
    }
    let version = seg.u32_at(OFF_VERSION).load(Ordering::Relaxed);
    if version != SEG_VERSION {
        return Err(foreign(format!(
            "layout version {version}, this build speaks {SEG_VERSION}"
        )));
    }
    let mut theirs = [0u8; 16];
    for i in 0..2 {
        let word = seg.u64_at(OFF_TOKEN + 8 * i).load(Ordering::Relaxed);
        theirs[8 * i..8 * i + 8].copy_from_slice(&word.to_le_bytes());
    }
    if theirs != *token {
        return Err(Error::Auth(format!(
            "shared-memory segment {} belongs to another job (job token differs)",
            path.display()
        )));
    }
    let their_world = seg.u32_at(OFF_WORLD).load(Ordering::Relaxed) as usize;
    if their_world != world {
        return Err(Error::Rendezvous(format!(
            "shared-memory segment {} was made for {their_world} ranks, but this rank was told the world has {world}",
            path.display()
        )));
    }
    let cap = seg.u64_at(OFF_CAPACITY).load(Ordering::Relaxed) as usize;
    let total = seg.u64_at(OFF_TOTAL).load(Ordering::Relaxed) as usize;
    let layout = Layout::new(world, cap)
        .filter(|l| {
            cap.is_power_of_two()
                && (MIN_RING_BYTES..=MAX_RING_BYTES).contains(&cap)
                && l.total == total
                && total == len
        })
        .ok_or_else(|| {
            foreign(format!(
                "inconsistent sizes (ring {cap}, total {total}, file {len})"
            ))
        })?;
    Ok((seg, layout))
}

/// Identity of a rank's process as recorded in its slot.
#[derive(Clone, Copy, Debug)]
struct ProcIds {
    pid: u32,
    start: u64,
    pidns: u64,
}

fn read_proc_ids(seg: &Segment, layout: &Layout, r: usize) -> ProcIds {
    let base = layout.rank(r);
    ProcIds {
        pid: seg.u32_at(base + R_PID).load(Ordering::Acquire),
        start: seg.u64_at(base + R_START).load(Ordering::Acquire),
        pidns: seg.u64_at(base + R_PIDNS).load(Ordering::Acquire),
    }
}

/// Writes our pid (and what makes it unambiguous) into our rank's slot.
fn claim_rank(seg: &Segment, layout: &Layout, rank: usize) -> Result<()> {
    let base = layout.rank(rank);
    let pid = std::process::id();
    // The start time tells a live process from a later one that reuses the
    // pid; the pid namespace tells whether the pid means anything here.
    let start = proc_start_time("self").unwrap_or(0);
    let pidns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            let digits: String = s.chars().filter(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0);
    if let Err(other) =
        seg.u32_at(base + R_PID)
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
    {
        return Err(Error::Rendezvous(format!(
            "rank {rank} is already attached to the shared-memory segment (pid {other}): two processes were given the same rank"
        )));
    }
    // Claimed (so a second process given our rank fails instead of
    // overwriting us); peers read the rest only after the barrier.
    seg.u64_at(base + R_START).store(start, Ordering::Release);
    seg.u64_at(base + R_PIDNS).store(pidns, Ordering::Release);
    Ok(())
}

/// Store barrier: count arrivals; the last one opens the gate.
fn barrier(store: &dyn Store, prefix: &str, ready_key: &str, world: usize) -> Result<()> {
    let n = store.add(&format!("{prefix}shm/attached"), 1)?;
    if n == world as i64 {
        store.set(ready_key, b"ok")?;
    } else if n > world as i64 {
        return Err(Error::Rendezvous(format!(
            "{n} ranks attached to a shared-memory segment for {world}: \
             is the store prefix {prefix:?} shared by two communicators?"
        )));
    }
    let v = store.get(ready_key)?;
    match v.strip_prefix(b"!") {
        Some(why) => Err(Error::Rendezvous(format!(
            "shared-memory set-up failed on another rank: {}",
            String::from_utf8_lossy(why)
        ))),
        None => Ok(()),
    }
}

/// Fields of `/proc/<who>/stat` after the command name: (state, start time).
fn proc_stat(who: &str) -> io::Result<(char, u64)> {
    let raw = std::fs::read(format!("/proc/{who}/stat"))?;
    let text = String::from_utf8_lossy(&raw);
    // The command name may contain spaces and parentheses; it ends at the last ')'.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let mut fields = rest.split_whitespace();
    let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
    // Field 22 (starttime) is the 20th after the name (state is field 3).
    let start = fields.nth(18).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((state, start))
}

fn proc_start_time(who: &str) -> Option<u64> {
    proc_stat(who).ok().map(|(_, s)| s)
}

/// `Some(how we know)` if process `pid` (started at `start`, 0 = unknown) is gone.
fn process_gone(pid: u32, start: u64) -> Option<String> {
    match proc_stat(&pid.to_string()) {
        Ok((state, now_start)) => {
            if state == 'Z' || state == 'X' {
                Some(format!("process {pid} has exited (it is a zombie)"))
            } else if start != 0 && now_start != 0 && now_start != start {
                Some(format!(
                    "process {pid} has exited (its pid now belongs to another process)"
                ))
            } else {
                None
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(format!("process {pid} has exited")),
        Err(_) => {
            // No usable /proc: fall back to signal 0, which only tells
            // whether the pid exists.
            // SAFETY: kill with signal 0 sends nothing.
            let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
            let gone = rc == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            gone.then(|| format!("process {pid} has exited"))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::process::{Child, Command, Stdio};
    use std::sync::Barrier;

    use super::*;
    use crate::Collective;
    use crate::element::{DType, ReduceOp};
    use crate::rendezvous::MemStore;

    fn opts(prefix: &str, timeout: Duration) -> TransportOptions {
        let mut token = [0u8; 16];
        getrandom::fill(&mut token).unwrap();
        TransportOptions {
            timeout,
            prefix: prefix.to_owned(),
            token,
            listen_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    fn tag(seq: u32, count: usize) -> Tag {
        Tag {
            collective: Collective::SendRecv,
            seq,
            dtype: DType::U8,
            op: 0,
            root: 0,
            count: count as u64,
        }
    }

    fn f32_tag(seq: u32, count: usize) -> Tag {
        Tag {
            collective: Collective::AllReduce,
            seq,
            dtype: DType::F32,
            op: ReduceOp::Sum.code(),
            root: 0,
            count: count as u64,
        }
    }

    /// Runs `f` on `world` thread ranks connected through one segment.
    fn with_ranks<T: Send>(
        world: usize,
        timeout: Duration,
        f: impl Fn(ShmTransport) -> T + Sync,
    ) -> Vec<T> {
        let store = MemStore::new(Duration::from_secs(20));
        let o = opts("t/", timeout);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..world)
                .map(|r| {
                    let (store, o, f) = (&store, &o, &f);
                    s.spawn(move || f(ShmTransport::connect(store, r, world, o).unwrap()))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Bytes that differ per rank, call and position (tiled from a block
    /// with a prime length, so building 64 MiB is cheap in debug builds).
    fn pattern(rank: usize, seq: u32, len: usize) -> Vec<u8> {
        let block: Vec<u8> = (0..4099u32)
            .map(|i| (i ^ (rank as u32 * 131) ^ (seq * 7)) as u8)
            .collect();
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            let take = block.len().min(len - v.len());
            v.extend_from_slice(&block[..take]);
        }
        v
    }

    fn floats(rank: usize, n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i % 1000) + rank * 1000) as f32).collect()
    }

    #[test]
    fn ring_exchange_copy_and_reduce_at_several_world_sizes() {
        let byte_sizes = [0usize, 1, 7, 1000, (4 << 20) + 3];
        let float_counts = [0usize, 1, 7, 1000, (1 << 20) + 3];
        for world in [2, 3, 5] {
            with_ranks(world, Duration::from_secs(30), |mut t| {
                let (me, next, prev) = (
                    t.rank(),
                    (t.rank() + 1) % world,
                    (t.rank() + world - 1) % world,
                );
                let mut seq = 0;
                for &len in &byte_sizes {
                    let send = pattern(me, seq, len);
                    let mut got = vec![0u8; len];
                    t.exchange(
                        &tag(seq, len),
                        Some((next, &send)),
                        Some((prev, Sink::Copy(&mut got))),
                    )
                    .unwrap();
                    assert!(
                        got == pattern(prev, seq, len),
                        "world {world} rank {me} len {len}"
                    );
                    seq += 1;
                }
                for &n in &float_counts {
                    let send = floats(me, n);
                    let mut acc = floats(me, n);
                    let sink = Sink::Reduce {
                        dst: bytemuck::cast_slice_mut(&mut acc),
                        dtype: DType::F32,
                        op: ReduceOp::Sum,
                    };
                    t.exchange(
                        &f32_tag(seq, n),
                        Some((next, bytemuck::cast_slice(&send))),
                        Some((prev, sink)),
                    )
                    .unwrap();
                    let want: Vec<f32> = floats(me, n)
                        .iter()
                        .zip(floats(prev, n))
                        .map(|(a, b)| a + b)
                        .collect();
                    assert!(acc == want, "world {world} rank {me} count {n}");
                    seq += 1;
                }
            });
        }
    }

    #[test]
    fn bidirectional_64_mib_exchange_completes() {
        let len = 64 << 20;
        with_ranks(2, Duration::from_secs(60), |mut t| {
            let me = t.rank();
            let send = pattern(me, 9, len);
            let mut got = vec![0u8; len];
            t.exchange(
                &tag(9, len),
                Some((1 - me, &send)),
                Some((1 - me, Sink::Copy(&mut got))),
            )
            .unwrap();
            assert!(got == pattern(1 - me, 9, len));
        });
    }

    #[test]
    fn four_ranks_on_two_cores_do_not_collapse() {
        let t0 = Instant::now();
        let rounds = 2000;
        let (small, large) = (8, (1 << 20) + 8);
        with_ranks(4, Duration::from_secs(30), |mut t| {
            let world = 4;
            let (me, next, prev) = (
                t.rank(),
                (t.rank() + 1) % world,
                (t.rank() + world - 1) % world,
            );
            let sends = [pattern(me, 0, small), pattern(me, 0, large)];
            let wants = [pattern(prev, 0, small), pattern(prev, 0, large)];
            let mut got = vec![0u8; large];
            for seq in 0..rounds {
                // Mostly tiny messages (latency-bound), every 100th a large one.
                let which = usize::from(seq % 100 == 99);
                let len = sends[which].len();
                let sink = Sink::Copy(&mut got[..len]);
                t.exchange(
                    &tag(seq, len),
                    Some((next, &sends[which])),
                    Some((prev, sink)),
                )
                .unwrap();
                assert!(got[..len] == wants[which]);
            }
        });
        let took = t0.elapsed();
        eprintln!("{rounds} ring steps of 4 ranks took {took:?}");
        // Collapsing into 50 ms futex time-outs would take ~100 s, spinning
        // against descheduled peers ~25 s (measured); this takes ~0.1 s.
        assert!(
            took < Duration::from_secs(5),
            "{rounds} ring steps took {took:?}"
        );
    }

    #[test]
    fn mismatched_tag_or_length_is_a_mismatch_on_the_receiver() {
        let out = with_ranks(2, Duration::from_secs(5), |mut t| {
            if t.rank() == 0 {
                t.exchange(&tag(1, 4), Some((1, &[1, 2, 3, 4])), None)
                    .unwrap();
                t.exchange(&tag(2, 4), Some((1, &[1, 2, 3, 4])), None)
                    .unwrap();
                Ok(())
            } else {
                let mut buf = [0u8; 4];
                // Wrong sequence number (the peer is in another call).
                let a = t.exchange(&tag(7, 4), None, Some((0, Sink::Copy(&mut buf))));
                assert!(matches!(a, Err(Error::Mismatch(_))), "{a:?}");
                Err(a.unwrap_err())
            }
        });
        let msg = out[1].as_ref().unwrap_err().to_string();
        assert!(msg.contains("rank 0 sent sendrecv#1"), "{msg}");

        let out = with_ranks(2, Duration::from_secs(5), |mut t| {
            if t.rank() == 0 {
                t.exchange(&tag(1, 4), Some((1, &[1, 2, 3, 4])), None)
                    .map(|_| ())
            } else {
                let mut buf = [0u8; 3];
                t.exchange(&tag(1, 4), None, Some((0, Sink::Copy(&mut buf))))
            }
        });
        assert!(out[0].is_ok());
        let msg = out[1].as_ref().unwrap_err().to_string();
        assert!(
            matches!(out[1], Err(Error::Mismatch(_))) && msg.contains("4 bytes"),
            "{msg}"
        );
    }

    #[test]
    fn abort_wakes_every_waiting_peer_with_its_reason() {
        let gate = Barrier::new(3);
        let out = with_ranks(3, Duration::from_secs(20), |mut t| {
            gate.wait();
            if t.rank() == 0 {
                std::thread::sleep(Duration::from_millis(300));
                t.abort("out of memory on rank 0");
                // Unusable afterwards.
                let again = t.exchange(&tag(0, 0), Some((1, &[])), None);
                assert!(matches!(again, Err(Error::PeerAborted { rank: 0, .. })));
                None
            } else {
                let t0 = Instant::now();
                let mut buf = [0u8; 8];
                let r = t.exchange(&tag(0, 8), None, Some((0, Sink::Copy(&mut buf))));
                Some((r, t0.elapsed()))
            }
        });
        for (r, took) in out.into_iter().flatten() {
            match r {
                Err(Error::PeerAborted { rank: 0, reason }) => {
                    assert_eq!(reason, "out of memory on rank 0")
                }
                other => panic!("expected PeerAborted, got {other:?}"),
            }
            // 300 ms until the abort, then a futex wake; the 20 s timeout is
            // far away (the slack is for busy machines).
            assert!(took < Duration::from_millis(1500), "took {took:?}");
        }
    }

    #[test]
    fn silent_peer_times_out_naming_it() {
        let out = with_ranks(2, Duration::from_millis(300), |mut t| {
            if t.rank() == 1 {
                std::thread::sleep(Duration::from_millis(600));
                return None;
            }
            let t0 = Instant::now();
            let mut buf = [0u8; 16];
            let r = t.exchange(&tag(3, 16), None, Some((1, Sink::Copy(&mut buf))));
            Some((r, t0.elapsed()))
        });
        let (r, took) = out.into_iter().flatten().next().unwrap();
        let msg = match r {
            Err(e @ Error::Timeout { .. }) => e.to_string(),
            other => panic!("expected Timeout, got {other:?}"),
        };
        assert!(msg.contains("rank 1 to send sendrecv#3"), "{msg}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
            "{took:?}"
        );
    }

    #[test]
    fn bad_peer_and_segment_problems_are_clear_errors() {
        with_ranks(2, Duration::from_secs(5), |mut t| {
            let r = t.exchange(&tag(0, 0), Some((t.rank(), &[])), None);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
            let r = t.exchange(&tag(0, 0), None, Some((9, Sink::Copy(&mut []))));
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        });

        // No /dev/shm: rank 0 fails clearly, and tells rank 1 through the store.
        let store = MemStore::new(Duration::from_secs(5));
        let o = opts("nodir/", Duration::from_secs(5));
        let missing = Path::new("/nonexistent/ringside-shm-dir");
        let e = ShmTransport::connect_in(missing, &store, 0, 2, &o, None).unwrap_err();
        assert!(e.to_string().contains("no /dev/shm"), "{e}");
        let e = ShmTransport::connect_in(missing, &store, 1, 2, &o, None).unwrap_err();
        assert!(e.to_string().contains("rank 0 could not create"), "{e}");

        // A foreign file published under the key.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ringside-shm-feed"), vec![7u8; 8192]).unwrap();
        let store = MemStore::new(Duration::from_secs(5));
        store.set("x/shm/name", b"ringside-shm-feed").unwrap();
        let o = opts("x/", Duration::from_secs(5));
        let e = ShmTransport::connect_in(dir.path(), &store, 1, 2, &o, None).unwrap_err();
        assert!(
            matches!(e, Error::Protocol(_)) && e.to_string().contains("bad magic"),
            "{e}"
        );
        // A name that is not ours at all is not even opened.
        store.set("y/shm/name", b"../etc/passwd").unwrap();
        let o = opts("y/", Duration::from_secs(5));
        let e = ShmTransport::connect_in(dir.path(), &store, 1, 2, &o, None).unwrap_err();
        assert!(e.to_string().contains("not a ringside"), "{e}");
    }

    #[test]
    fn segment_of_another_job_or_world_is_refused_and_nothing_leaks() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemStore::new(Duration::from_millis(500));
        let o = opts("j/", Duration::from_secs(5));
        // Rank 0 alone: it times out in the barrier and must unlink its file.
        let e = ShmTransport::connect_in(dir.path(), &store, 0, 2, &o, None).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        let (seg, _, path, name) = create_segment(dir.path(), &o.token, 3, 4096).unwrap();
        let other = opts("k/", Duration::from_secs(5));
        let e = open_segment(dir.path(), &name, "k", &other.token, 3)
            .err()
            .unwrap();
        assert!(matches!(e, Error::Auth(_)), "{e}");
        let e = open_segment(dir.path(), &name, "k", &o.token, 2)
            .err()
            .unwrap();
        assert!(e.to_string().contains("made for 3 ranks"), "{e}");
        drop(seg);
        std::fs::remove_file(path).unwrap();

        // A successful connect leaves nothing in the directory either.
        let store = MemStore::new(Duration::from_secs(5));
        let o = opts("ok/", Duration::from_secs(5));
        std::thread::scope(|s| {
            let h: Vec<_> = (0..2)
                .map(|r| {
                    let (store, o, d) = (&store, &o, dir.path());
                    s.spawn(move || ShmTransport::connect_in(d, store, r, 2, o, None).unwrap())
                })
                .collect();
            let ts: Vec<_> = h.into_iter().map(|h| h.join().unwrap()).collect();
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
            assert_eq!(ts[1].ring_bytes(), DEFAULT_RING_BYTES);
        });
    }

    #[test]
    fn ring_capacity_shrinks_with_world_and_rejects_bad_requests() {
        assert_eq!(ring_capacity(2, None).unwrap(), DEFAULT_RING_BYTES);
        let c8 = ring_capacity(8, None).unwrap();
        assert!(c8 * 56 <= SEGMENT_BUDGET && c8.is_power_of_two());
        assert_eq!(ring_capacity(MAX_WORLD, None).unwrap(), MIN_RING_BYTES);
        assert!(ring_capacity(2, Some(5000)).is_err());
        assert!(ring_capacity(2, Some(1024)).is_err());
        assert_eq!(ring_capacity(2, Some(8192)).unwrap(), 8192);
    }

    #[test]
    fn tiny_rings_wrap_headers_and_payloads_correctly() {
        // 4 KiB rings with 1 KiB chunks: headers straddle the wrap point, and
        // payloads are many times the capacity.
        let store = MemStore::new(Duration::from_secs(10));
        let o = opts("tiny/", Duration::from_secs(10));
        std::thread::scope(|s| {
            for r in 0..2 {
                let (store, o) = (&store, &o);
                s.spawn(move || {
                    let mut t =
                        ShmTransport::connect_with_ring_bytes(store, r, 2, o, MIN_RING_BYTES)
                            .unwrap();
                    for (seq, len) in [3usize, 4000, 4096, 17, 100_000, 0, 5]
                        .into_iter()
                        .enumerate()
                    {
                        let seq = seq as u32;
                        let send = pattern(r, seq, len);
                        let mut got = vec![0u8; len];
                        t.exchange(
                            &tag(seq, len),
                            Some((1 - r, &send)),
                            Some((1 - r, Sink::Copy(&mut got))),
                        )
                        .unwrap();
                        assert!(got == pattern(1 - r, seq, len), "len {len}");
                    }
                });
            }
        });
    }

    // ----- Ranks as real processes --------------------------------------------------

    /// A store in a directory, so separate processes can rendezvous in tests.
    struct DirStore {
        dir: PathBuf,
        timeout: Duration,
    }

    impl DirStore {
        fn path(&self, key: &str) -> PathBuf {
            self.dir.join(hex(key.as_bytes()))
        }
    }

    impl Store for DirStore {
        fn set(&self, key: &str, value: &[u8]) -> Result<()> {
            let tmp = self.dir.join(format!(
                "tmp-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::write(&tmp, value).unwrap();
            std::fs::rename(&tmp, self.path(key)).unwrap();
            Ok(())
        }
        fn get(&self, key: &str) -> Result<Vec<u8>> {
            let d = Deadline::after(self.timeout);
            loop {
                if let Ok(v) = std::fs::read(self.path(key)) {
                    return Ok(v);
                }
                d.check(|| format!("dir store key {key}"))?;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        fn add(&self, key: &str, delta: i64) -> Result<i64> {
            let lock = File::create(self.dir.join("lock")).unwrap();
            // SAFETY: flock on an fd we own; closing it releases the lock.
            assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
            let cur = std::fs::read(self.path(key))
                .map(|v| crate::rendezvous::parse_i64(key, &v).unwrap())
                .unwrap_or(0);
            self.set(key, (cur + delta).to_string().as_bytes())?;
            Ok(cur + delta)
        }
    }

    const CHILD_ENV: &str = "RINGSIDE_SHM_TEST_CHILD";

    /// Starts this test binary again as rank 1, running `child_rank` in `role`.
    fn spawn_child(
        role: &str,
        dir: &Path,
        o: &TransportOptions,
        extra: &[(&str, String)],
    ) -> Child {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "transport::shm::tests::child_rank",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_ENV, role)
        .env("RINGSIDE_SHM_TEST_DIR", dir)
        .env("RINGSIDE_SHM_TEST_TOKEN", hex(&o.token))
        .env(
            "RINGSIDE_SHM_TEST_TIMEOUT_MS",
            o.timeout.as_millis().to_string(),
        )
        .stdout(Stdio::null());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    fn child_opts() -> TransportOptions {
        let hex_token = std::env::var("RINGSIDE_SHM_TEST_TOKEN").unwrap();
        let mut token = [0u8; 16];
        for (i, b) in token.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex_token[2 * i..2 * i + 2], 16).unwrap();
        }
        let ms = std::env::var("RINGSIDE_SHM_TEST_TIMEOUT_MS")
            .unwrap()
            .parse()
            .unwrap();
        TransportOptions {
            timeout: Duration::from_millis(ms),
            prefix: "p/".into(),
            token,
            listen_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// Entry point of child ranks (does nothing unless spawned by a test).
    #[test]
    #[ignore = "entry point for child processes spawned by the multi-process tests"]
    fn child_rank() {
        let Ok(role) = std::env::var(CHILD_ENV) else {
            return;
        };
        let store = DirStore {
            dir: std::env::var("RINGSIDE_SHM_TEST_DIR").unwrap().into(),
            timeout: Duration::from_secs(20),
        };
        let mut t = ShmTransport::connect(&store, 1, 2, &child_opts()).unwrap();
        match role.as_str() {
            // Connect, then hang without sending until killed.
            "hang" => std::thread::sleep(Duration::from_secs(30)),
            // Echo `rounds` messages back, sleeping between them.
            "echo" => {
                let rounds: u32 = std::env::var("ROUNDS").unwrap().parse().unwrap();
                for seq in 0..rounds {
                    let mut buf = [0u8; 8];
                    t.exchange(&tag(seq, 8), None, Some((0, Sink::Copy(&mut buf))))
                        .unwrap();
                    t.exchange(&tag(seq, 8), Some((0, &buf)), None).unwrap();
                }
            }
            // Send one message that fits in the ring, then exit at once.
            "send-and-exit" => {
                let msg = pattern(1, 5, 100_000);
                t.exchange(&tag(5, msg.len()), Some((0, &msg)), None)
                    .unwrap();
            }
            "bench" => bench_peer(&mut t),
            other => panic!("unknown child role {other}"),
        }
    }

    #[test]
    fn killed_peer_process_is_lost_within_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore {
            dir: dir.path().into(),
            timeout: Duration::from_secs(20),
        };
        let mut o = opts("p/", Duration::from_secs(20));
        o.prefix = "p/".into();
        let mut child = spawn_child("hang", dir.path(), &o, &[]);
        let mut t = ShmTransport::connect(&store, 0, 2, &o).unwrap();
        assert!(t.peers[1].watch, "a separate process must be watched");
        let pid = child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            child.kill().unwrap();
            let killed = Instant::now();
            // Leave it a zombie until we are done: that is the case kill(pid, 0) misses.
            (child, killed)
        });
        let mut buf = [0u8; 8];
        let r = t.exchange(&tag(0, 8), None, Some((1, Sink::Copy(&mut buf))));
        let noticed = Instant::now();
        let (mut child, killed) = killer.join().unwrap();
        child.wait().unwrap();
        match r {
            Err(Error::PeerLost { rank: 1, detail }) => {
                assert!(detail.contains(&pid.to_string()), "{detail}")
            }
            other => panic!("expected PeerLost, got {other:?}"),
        }
        let lag = noticed.saturating_duration_since(killed);
        assert!(
            lag < Duration::from_secs(1),
            "noticed {lag:?} after the kill"
        );
    }

    #[test]
    fn data_published_by_an_exited_peer_is_still_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore {
            dir: dir.path().into(),
            timeout: Duration::from_secs(20),
        };
        let o = opts("p/", Duration::from_secs(20));
        let mut child = spawn_child("send-and-exit", dir.path(), &o, &[]);
        let mut t = ShmTransport::connect(&store, 0, 2, &o).unwrap();
        assert!(child.wait().unwrap().success());
        let mut got = vec![0u8; 100_000];
        t.exchange(&tag(5, got.len()), None, Some((1, Sink::Copy(&mut got))))
            .unwrap();
        assert!(got == pattern(1, 5, 100_000));
        // The next wait can never end: now the loss is reported.
        let r = t.exchange(&tag(6, 1), None, Some((1, Sink::Copy(&mut [0u8]))));
        assert!(matches!(r, Err(Error::PeerLost { rank: 1, .. })), "{r:?}");
    }

    #[test]
    fn futex_wakes_a_sleeping_peer_process_promptly() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore {
            dir: dir.path().into(),
            timeout: Duration::from_secs(20),
        };
        let o = opts("p/", Duration::from_secs(20));
        let rounds = 20u32;
        let mut child = spawn_child("echo", dir.path(), &o, &[("ROUNDS", rounds.to_string())]);
        let mut t = ShmTransport::connect(&store, 0, 2, &o).unwrap();
        let mut trips = Vec::new();
        for seq in 0..rounds {
            // Long enough for the child to stop spinning and sleep on its futex.
            std::thread::sleep(Duration::from_millis(5));
            let t0 = Instant::now();
            let msg = seq.to_le_bytes().repeat(2);
            t.exchange(&tag(seq, 8), Some((1, &msg)), None).unwrap();
            let mut buf = [0u8; 8];
            t.exchange(&tag(seq, 8), None, Some((1, Sink::Copy(&mut buf))))
                .unwrap();
            trips.push(t0.elapsed());
            assert_eq!(buf[..], msg[..]);
        }
        assert!(child.wait().unwrap().success());
        // Without a cross-process wake every round would last until the
        // child's 50 ms sleep slice ran out (~45 ms); the median shrugs off
        // a busy machine's scheduling hiccups.
        trips.sort();
        let median = trips[trips.len() / 2];
        assert!(
            median < Duration::from_millis(15),
            "median round trip {median:?}"
        );
    }

    // ----- Benchmark -----------------------------------------------------------------

    const BENCH_LAT_SIZES: [usize; 4] = [8, 64, 512, 4096];
    const BENCH_BW_SIZES: [usize; 3] = [1 << 20, 4 << 20, 64 << 20];

    /// (iterations per window, windows): the machine is shared, so we report
    /// the best window (what the code can do) and the median window.
    fn bench_windows(size: usize) -> (u32, usize) {
        match size {
            s if s <= 4096 => (1000, 20),
            s if s <= (1 << 20) => (10, 30),
            s if s <= (4 << 20) => (5, 30),
            _ => (1, 8),
        }
    }

    fn best_and_median(mut w: Vec<Duration>) -> (Duration, Duration) {
        w.sort();
        (w[0], w[w.len() / 2])
    }

    /// Ping-pong, a simultaneous exchange, then a 2-rank ring all-reduce
    /// (reduce-scatter + all-gather over one pair of rings); both ranks run
    /// the same code.
    fn bench_run(t: &mut ShmTransport, report: bool) {
        let me = t.rank();
        let peer = 1 - me;
        let mut seq = 0u32;
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        for &size in &BENCH_LAT_SIZES {
            let msg = vec![1u8; size];
            let mut buf = vec![0u8; size];
            let (iters, windows) = bench_windows(size);
            let mut ping_pong = |t: &mut ShmTransport, seq: u32| {
                let tg = tag(seq, size);
                if me == 0 {
                    t.exchange(&tg, Some((peer, &msg)), None).unwrap();
                    t.exchange(&tg, None, Some((peer, Sink::Copy(&mut buf))))
                        .unwrap();
                } else {
                    t.exchange(&tg, None, Some((peer, Sink::Copy(&mut buf))))
                        .unwrap();
                    t.exchange(&tg, Some((peer, &msg)), None).unwrap();
                }
            };
            let mut pp = Vec::new();
            for w in 0..=windows {
                let t0 = Instant::now();
                for _ in 0..iters {
                    ping_pong(t, seq);
                    seq += 1;
                }
                if w > 0 {
                    pp.push(t0.elapsed() / iters / 2);
                }
            }
            // Both ranks send and receive at once: a 2-rank small all-reduce.
            let mut ex = Vec::new();
            for _ in 0..windows {
                let t0 = Instant::now();
                for _ in 0..iters {
                    let sink = Sink::Reduce {
                        dst: &mut buf,
                        dtype: DType::F32,
                        op: ReduceOp::Sum,
                    };
                    t.exchange(&tag(seq, size), Some((peer, &msg)), Some((peer, sink)))
                        .unwrap();
                    seq += 1;
                }
                ex.push(t0.elapsed() / iters);
            }
            let (pp, ex) = (best_and_median(pp), best_and_median(ex));
            if report {
                println!(
                    "latency {size:>6} B: one-way (ping-pong/2) best {:>6.2} us median {:>6.2} us | \
                     exchange+reduce best {:>6.2} us median {:>6.2} us",
                    us(pp.0),
                    us(pp.1),
                    us(ex.0),
                    us(ex.1)
                );
            }
        }
        for &size in &BENCH_BW_SIZES {
            let n = size / 4;
            let half = n / 2;
            let input: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
            let mut data = input.clone();
            let (iters, windows) = bench_windows(size);
            let mut times = Vec::new();
            for w in 0..=windows {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    data.copy_from_slice(&input);
                    let t0 = Instant::now();
                    let (lo, hi) = data.split_at_mut(half);
                    let (mine, theirs) = if me == 0 { (lo, hi) } else { (hi, lo) };
                    // Reduce-scatter: send the peer's half, reduce ours in place.
                    let sink = Sink::Reduce {
                        dst: bytemuck::cast_slice_mut(mine),
                        dtype: DType::F32,
                        op: ReduceOp::Sum,
                    };
                    let tg = f32_tag(seq, n);
                    t.exchange(
                        &tg,
                        Some((peer, bytemuck::cast_slice(theirs))),
                        Some((peer, sink)),
                    )
                    .unwrap();
                    // All-gather: send our reduced half, receive theirs.
                    let sink = Sink::Copy(bytemuck::cast_slice_mut(theirs));
                    let tg = f32_tag(seq + 1, n);
                    t.exchange(
                        &tg,
                        Some((peer, bytemuck::cast_slice(mine))),
                        Some((peer, sink)),
                    )
                    .unwrap();
                    seq += 2;
                    spent += t0.elapsed();
                }
                if w > 0 {
                    times.push(spent / iters);
                }
                assert!(data.iter().zip(&input).all(|(d, i)| *d == 2.0 * i));
            }
            let (best, med) = best_and_median(times);
            if report {
                let gbs = |d: Duration| size as f64 / d.as_secs_f64() / 1e9;
                println!(
                    "all_reduce-like {:>3} MiB: best {:>8.1} us median {:>8.1} us | \
                     busbw best {:>6.2} GB/s median {:>6.2} GB/s",
                    size >> 20,
                    us(best),
                    us(med),
                    gbs(best),
                    gbs(med)
                );
            }
        }
    }

    /// Pins the calling thread to one CPU, as `mpirun --bind-to core` does
    /// for the MPI numbers we compare with: two ranks sharing a core would
    /// measure the scheduler, not the transport.
    fn pin_to_cpu(cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is valid; the libc macros index within it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
                0
            );
        }
    }

    fn bench_peer(t: &mut ShmTransport) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        pin_to_cpu(1 % cores);
        bench_run(t, false);
    }

    #[test]
    #[ignore = "benchmark: cargo test --release -p collectives shm_bench -- --ignored --nocapture"]
    fn shm_bench_two_processes() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore {
            dir: dir.path().into(),
            timeout: Duration::from_secs(20),
        };
        let o = opts("p/", Duration::from_secs(60));
        let ring = std::env::var("RINGSIDE_SHM_BENCH_RING")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_RING_BYTES);
        let mut child = spawn_child("bench", dir.path(), &o, &[]);
        let mut t = ShmTransport::connect_with_ring_bytes(&store, 0, 2, &o, ring).unwrap();
        pin_to_cpu(0);
        println!(
            "shm transport, 2 processes, ring {} KiB, chunk {} KiB",
            ring >> 10,
            t.chunk >> 10
        );
        bench_run(&mut t, true);
        assert!(child.wait().unwrap().success());
    }
}
