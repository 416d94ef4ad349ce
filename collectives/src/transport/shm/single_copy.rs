//! Single-copy large messages: the receiver reads the sender's buffer itself.
//!
//! Through the ring every byte is copied twice: the sender copies it in, the
//! receiver copies (or reduces) it out. For a large message the sender
//! instead puts only a descriptor in the ring (the frame header with
//! [`FLAG_SINGLE_COPY`], then the buffer's address and length) and waits; the
//! receiver copies straight from the sender's memory into its destination
//! (`process_vm_readv`, "cross-memory attach", as Open MPI's vader BTL does,
//! or a plain copy when both ranks are threads of one process) and only then
//! moves the ring's tail past the descriptor. That tail is the sender's
//! acknowledgement: until it moves, the sender's exchange has not returned and
//! its buffer cannot change. A reduction still needs the peer's bytes next to
//! ours, so across processes they land in an L2-sized bounce buffer first; the
//! saving there is the sender's copy, done by the kernel on the receiver's
//! core instead.
//!
//! Whether a receiver can read a sender's memory is settled once at set-up:
//! each rank publishes the address of a probe word, each receiver tries to
//! read its senders' words and records the answer in the pair's control
//! line, and the sender looks there per message. Both paths stay valid for
//! every message.
//!
//! # When it pays (measured on the 2-core EPYC VM, see issue 14's note)
//! - Ranks that are threads of one process (`thread_ranks`, criterion's
//!   world, the labs' in-process worlds): the receiver copies or reduces
//!   straight out of the sender's buffer with ordinary loads, one pass
//!   instead of two. On by default.
//! - Ranks in separate processes: only through `process_vm_readv`, and
//!   whether that wins depends on the machine. On the EPYC VM the kernel's
//!   copy (about 10 GB/s from cache, 5 GB/s from memory, against memcpy's
//!   40 and 8.5) was slower than the ring's two user-space copies, one of
//!   which stays in cache: a 2-rank all_reduce of 4 MiB took 2.3 ms instead
//!   of 0.25. On a Xeon VM it wins at 2 to 8 MiB. So by default each sender
//!   times both paths per size class and keeps the faster (`route.rs`).
//!
//! `RINGSIDE_SHM_SINGLE_COPY` chooses: `auto` (the default: threads, and
//! between processes whichever of ring and `process_vm_readv` measures
//! faster for each size, see `route.rs`), `threads`, `processes` (threads
//! and, always, processes), `off` (every message through the ring).

use std::sync::atomic::{Ordering, fence};
use std::time::Instant;

use super::ShmTransport;
use super::route::{Arms, Class, Path, Route};
use super::segment::{Layout, R_PROBE, Segment};
use super::streaming;
use crate::error::{Error, Result};
use crate::transport::Sink;

/// Messages at least this large go by single copy when the receiver can
/// read our memory. Below it the descriptor round trip (the sender waits for
/// the receiver's whole read) and `process_vm_readv`'s page pinning cost more
/// than the second copy of a cache-resident chunk.
pub(super) const MIN_BYTES: usize = 64 << 10;

/// Descriptor bytes after the header: address and length, little-endian.
pub(super) const DESCRIPTOR_LEN: usize = 16;

/// The bounce buffer a cross-process reduction reads into: big enough that a
/// system call moves a lot, small enough to stay in L2 for the reduction.
const BOUNCE_BYTES: usize = 256 << 10;

/// The most a copy moves per poll, so a long message still lets the loop
/// check the abort word and its own send between pieces.
const COPY_PIECE: usize = 4 << 20;

/// What the probe word holds; a reader that finds anything else at the
/// published address is not reading the peer it thinks.
const PROBE_MAGIC: u64 = u64::from_le_bytes(*b"RSCMAOK!");
static PROBE: u64 = PROBE_MAGIC;

/// How this rank reaches a peer's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// Only through the ring.
    Ring,
    /// The peer is a thread of this process: its buffer is ours to read.
    SameProcess,
    /// Another process whose memory `process_vm_readv` can read.
    CrossMemory {
        /// The peer's pid.
        pid: libc::pid_t,
    },
}

/// Publishes the address of this process's probe word in our rank's slot,
/// before the attach barrier.
pub(super) fn publish_probe(seg: &Segment, layout: &Layout, rank: usize) {
    seg.u64_at(layout.rank(rank) + R_PROBE)
        .store(&PROBE as *const u64 as u64, Ordering::Release);
}

/// Which peers single copy is used with (`RINGSIDE_SHM_SINGLE_COPY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Every message through the ring.
    Off,
    /// Peers that are threads of this process.
    Threads,
    /// Those, and peer processes `process_vm_readv` can read, for the sizes
    /// where timing shows it faster than the ring (`route.rs`).
    Auto,
    /// Those, and peer processes `process_vm_readv` can read, always.
    Processes,
}

impl Mode {
    /// Reads `RINGSIDE_SHM_SINGLE_COPY`; unset means `auto`.
    pub(super) fn from_env() -> Result<Mode> {
        Mode::parse(std::env::var("RINGSIDE_SHM_SINGLE_COPY").ok().as_deref())
    }

    /// Parses the variable's value (`None`: unset).
    pub(super) fn parse(v: Option<&str>) -> Result<Mode> {
        match v.map(str::to_ascii_lowercase).as_deref() {
            None | Some("" | "auto") => Ok(Mode::Auto),
            Some("threads") => Ok(Mode::Threads),
            Some("off" | "0" | "none") => Ok(Mode::Off),
            Some("processes" | "on" | "cma") => Ok(Mode::Processes),
            Some(other) => Err(Error::InvalidArgument(format!(
                "RINGSIDE_SHM_SINGLE_COPY={other}: expected auto, off, threads or processes"
            ))),
        }
    }
}

/// The descriptor of `payload`: where it is and how long.
pub(super) fn descriptor(payload: &[u8]) -> [u8; DESCRIPTOR_LEN] {
    let mut d = [0u8; DESCRIPTOR_LEN];
    d[..8].copy_from_slice(&(payload.as_ptr() as u64).to_le_bytes());
    d[8..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    d
}

/// Decodes a descriptor into (address, length).
pub(super) fn decode_descriptor(d: &[u8; DESCRIPTOR_LEN]) -> (u64, u64) {
    let mut a = [0u8; 8];
    let mut l = [0u8; 8];
    a.copy_from_slice(&d[..8]);
    l.copy_from_slice(&d[8..]);
    (u64::from_le_bytes(a), u64::from_le_bytes(l))
}

/// Reads `dst.len()` bytes at `addr` in process `pid`.
fn read_cross(pid: libc::pid_t, addr: u64, dst: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr + done as u64) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` is our own writable slice; the kernel checks the
        // remote range and our right to read it, and fails instead of faulting.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += n as usize;
    }
    Ok(())
}

impl ShmTransport {
    /// Tries to read each peer's probe word, and tells each peer (through
    /// the control line of its ring to us) whether it may send us
    /// descriptors. Called once, after every rank has published its probe.
    pub(super) fn probe_peers(&mut self, mode: Mode) {
        let me = std::process::id();
        for p in 0..self.world {
            if p == self.rank {
                continue;
            }
            let peer = self.peers[p];
            let reach = if mode == Mode::Off {
                Reach::Ring
            } else if peer.pid == me {
                Reach::SameProcess
            } else if matches!(mode, Mode::Processes | Mode::Auto) && peer.watch {
                let addr = self
                    .seg
                    .u64_at(self.layout.rank(p) + R_PROBE)
                    .load(Ordering::Acquire);
                let mut word = [0u8; 8];
                let pid = peer.pid as libc::pid_t;
                match read_cross(pid, addr, &mut word) {
                    Ok(()) if u64::from_ne_bytes(word) == PROBE_MAGIC => Reach::CrossMemory { pid },
                    _ => Reach::Ring,
                }
            } else {
                Reach::Ring
            };
            self.reach[p] = reach;
            if reach != Reach::Ring {
                self.seg
                    .u64_at(self.layout.single_copy(p, self.rank))
                    .store(1, Ordering::Release);
            }
        }
    }

    /// Whether `peer` reads messages of `len` bytes from our memory when we
    /// send it a descriptor (it said so at set-up).
    pub(super) fn single_copy_to(&self, peer: usize, len: usize) -> bool {
        len >= MIN_BYTES
            && self
                .seg
                .u64_at(self.layout.single_copy(self.rank, peer))
                .load(Ordering::Acquire)
                != 0
    }

    /// The path of a `len`-byte message to `peer` in call `seq` of an
    /// operation over `whole` bytes: single copy where the peer offers it
    /// and, between processes in `auto` mode, where timing chose it; the
    /// ring with a streaming copy-out where timing chose that (`route.rs`).
    pub(super) fn route(
        &mut self,
        peer: usize,
        len: usize,
        whole: usize,
        seq: u32,
    ) -> (Route, Class) {
        let class = Class::of(len, whole);
        let single = self.single_copy_to(peer, len);
        if single && (self.mode != Mode::Auto || self.peers[peer].pid == std::process::id()) {
            return (Route::untimed(Path::Single), class);
        }
        let arms = Arms {
            single,
            streaming: streaming::worth_learning(len, whole),
        };
        if arms == Arms::default() {
            return (Route::untimed(Path::Ring), class);
        }
        (self.routes.pick(class, seq, arms), class)
    }

    /// Moves the next piece of a single-copy message from `peer`'s buffer
    /// at `addr` into `sink` at `done`; returns the bytes moved.
    ///
    /// Each piece is read under the pair's reading flag, raised before the
    /// abort word is checked (Dekker, with [`Self::abandon_single_copy`]):
    /// a sender that gives up either sees the flag and waits for the piece
    /// to end, or we see its abort and read nothing more of a buffer it may
    /// be about to free.
    pub(super) fn read_piece(
        &mut self,
        peer: usize,
        addr: u64,
        done: usize,
        sink: &mut Sink<'_>,
    ) -> Result<usize> {
        let flag = self.layout.reading(peer, self.rank);
        self.seg.u64_at(flag).store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let r = self
            .check_abort()
            .and_then(|()| self.read_piece_unguarded(peer, addr, done, sink));
        self.seg.u64_at(flag).store(0, Ordering::Release);
        r
    }

    fn read_piece_unguarded(
        &mut self,
        peer: usize,
        addr: u64,
        done: usize,
        sink: &mut Sink<'_>,
    ) -> Result<usize> {
        let left = sink.len() - done;
        let src = addr + done as u64;
        match self.reach[peer] {
            Reach::Ring => Err(Error::Protocol(format!(
                "rank {peer} sent a single-copy descriptor over shared memory, but rank {} never \
                 offered to read its memory",
                self.rank
            ))),
            Reach::SameProcess => {
                let n = left.min(COPY_PIECE);
                // SAFETY: the peer thread published this descriptor of a
                // buffer it borrows for the whole exchange, and does not
                // return (or write it) until our tail passes the descriptor;
                // its stores were published by the head we acquired.
                let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, n) };
                sink.absorb(done, bytes);
                Ok(n)
            }
            Reach::CrossMemory { pid } => {
                match sink {
                    Sink::Copy(dst) => {
                        let n = left.min(COPY_PIECE);
                        read_cross(pid, src, &mut dst[done..done + n])
                            .map_err(|e| self.cross_read_failed(peer, e))?;
                        Ok(n)
                    }
                    Sink::Reduce { .. } => {
                        let n = left.min(BOUNCE_BYTES);
                        // u64 elements: 8-byte aligned for every dtype. Taken
                        // out of `self` for the call so errors can borrow it.
                        let mut bounce = std::mem::take(&mut self.bounce);
                        bounce.resize(BOUNCE_BYTES / 8, 0);
                        // SAFETY: a u64 buffer viewed as its bytes.
                        let bytes = unsafe {
                            std::slice::from_raw_parts_mut(bounce.as_mut_ptr().cast::<u8>(), n)
                        };
                        let read = read_cross(pid, src, bytes);
                        if read.is_ok() {
                            sink.absorb(done, bytes);
                        }
                        self.bounce = bounce;
                        read.map_err(|e| self.cross_read_failed(peer, e))?;
                        Ok(n)
                    }
                }
            }
        }
    }

    /// A send by single copy failed before the reader acknowledged it:
    /// publishes the abort, then waits (up to the timeout) until `peer` is
    /// not in the middle of reading our buffer, so the caller may free it.
    #[cold]
    pub(super) fn abandon_single_copy(&mut self, peer: usize, reason: &str) {
        use crate::transport::Transport;
        self.abort(reason);
        fence(Ordering::SeqCst);
        let flag = self.seg.u64_at(self.layout.reading(self.rank, peer));
        let start = Instant::now();
        while flag.load(Ordering::Acquire) != 0 && start.elapsed() < self.timeout {
            std::thread::yield_now();
        }
    }

    #[cold]
    fn cross_read_failed(&self, peer: usize, e: std::io::Error) -> Error {
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Error::PeerLost {
                rank: peer,
                detail: format!(
                    "process {} exited while rank {} read a message from its memory \
                     (shared-memory transport, single copy)",
                    self.peers[peer].pid, self.rank
                ),
            };
        }
        Error::Protocol(format!(
            "rank {} could not read a message from rank {peer}'s memory (process_vm_readv: {e}); \
             RINGSIDE_SHM_SINGLE_COPY=threads keeps messages between processes in the ring",
            self.rank
        ))
    }
}
