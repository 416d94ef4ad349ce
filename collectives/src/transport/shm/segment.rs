//! The segment: one file under `/dev/shm` holding every rank's control words
//! and every ring (layout in the [module docs](super)). Rank 0 creates and
//! initialises it; the others open it and check it belongs to this job.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{DEFAULT_RING_BYTES, MAX_RING_BYTES, MIN_RING_BYTES};
use crate::error::{Error, Result};

/// Rings shrink so the whole segment stays near this size as the world grows
/// (containers often give /dev/shm only 64 MiB).
pub(super) const SEGMENT_BUDGET: usize = 32 << 20;

pub(super) const SHM_DIR: &str = "/dev/shm";
const NAME_PREFIX: &str = "ringside-shm-";
const SEG_MAGIC: u64 = u64::from_le_bytes(*b"RSIDESHM");
// 2: single-copy descriptors and the probe word.
const SEG_VERSION: u32 = 2;
/// Two 64-byte lines: x86 prefetchers pull lines in adjacent pairs, so
/// sharing a 128-byte block would still bounce between cores.
const LINE: usize = 128;
const PAGE: usize = 4096;
pub(super) const REASON_MAX: usize = 1024;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_WORLD: usize = 12;
const OFF_CAPACITY: usize = 16;
const OFF_TOTAL: usize = 24;
const OFF_TOKEN: usize = 32;
pub(super) const OFF_ABORT: usize = LINE;
pub(super) const OFF_ABORT_LEN: usize = LINE + 4;
pub(super) const OFF_REASON: usize = 2 * LINE;
const OFF_RANKS: usize = OFF_REASON + REASON_MAX;
const RANK_STRIDE: usize = 2 * LINE;
pub(super) const R_BELL: usize = 0;
pub(super) const R_SLEEPING: usize = 4;
pub(super) const R_PID: usize = LINE;
pub(super) const R_START: usize = LINE + 8;
pub(super) const R_PIDNS: usize = LINE + 16;
pub(super) const R_CPU: usize = LINE + 24;
/// Address of the rank's single-copy probe word (see `single_copy.rs`).
pub(super) const R_PROBE: usize = LINE + 32;
const CTRL_STRIDE: usize = 2 * LINE;

/// Where everything sits in a segment for a given world size and capacity.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    pub(super) world: usize,
    pub(super) cap: usize,
    pub(super) ctrl: usize,
    pub(super) data: usize,
    pub(super) total: usize,
}

impl Layout {
    pub(super) fn new(world: usize, cap: usize) -> Option<Layout> {
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
    pub(super) fn rank(&self, r: usize) -> usize {
        OFF_RANKS + r * RANK_STRIDE
    }
    pub(super) fn head(&self, from: usize, to: usize) -> usize {
        self.ctrl + (from * self.world + to) * CTRL_STRIDE
    }
    pub(super) fn tail(&self, from: usize, to: usize) -> usize {
        self.head(from, to) + LINE
    }
    /// Nonzero once the consumer `to` can read `from`'s memory: on the
    /// consumer's line, beside the tail it also writes.
    pub(super) fn single_copy(&self, from: usize, to: usize) -> usize {
        self.tail(from, to) + 8
    }
    /// Nonzero while the consumer `to` is reading a piece of `from`'s
    /// memory (single copy), on the consumer's line.
    pub(super) fn reading(&self, from: usize, to: usize) -> usize {
        self.tail(from, to) + 16
    }
    pub(super) fn ring(&self, from: usize, to: usize) -> usize {
        let j = if to > from { to - 1 } else { to };
        self.data + (from * (self.world - 1) + j) * self.cap
    }
}

/// A `MAP_SHARED` mapping of the whole segment.
pub(super) struct Segment {
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
    pub(super) fn map(file: &File, len: usize, path: &Path) -> Result<Segment> {
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
    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: in bounds and aligned (page-aligned base, layout offsets);
        // shared words are only ever accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// The atomic u64 at `off` (a layout offset, 8-aligned and in bounds).
    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: as for `u32_at`.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    pub(super) fn ptr(&self, off: usize) -> *mut u8 {
        debug_assert!(off <= self.len);
        // SAFETY: in bounds of the mapping.
        unsafe { self.base.add(off) }
    }
}

/// Picks the ring capacity: the caller's, or the largest power of two that
/// keeps the segment within budget (clamped to sane bounds).
pub(super) fn ring_capacity(world: usize, requested: Option<usize>) -> Result<usize> {
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

pub(super) fn hex(bytes: &[u8]) -> String {
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
pub(super) fn create_segment(
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
pub(super) fn open_segment(
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
