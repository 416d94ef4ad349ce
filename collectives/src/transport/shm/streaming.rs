//! Copies out of the ring that bypass the cache, for messages too large to
//! stay in it.
//!
//! An ordinary store to a line that is not in cache first reads the line
//! from memory ("read for ownership"), so copying a message out of the ring
//! into a destination of tens of MiB moves its bytes over the memory bus
//! three times: the read for ownership, and later the write-back, on top of
//! the ring's own (cache-resident) read. Non-temporal stores write whole
//! lines without reading them first. glibc's `memcpy` switches to them
//! itself, but only for copies larger than about three quarters of the
//! last-level cache; the ring hands over 64 KiB pieces, so it never does.
//! Here the decision is taken on the whole message instead, with glibc's
//! rule: a message larger than [`threshold`] would evict the cache anyway,
//! so nobody reads it from cache afterwards.

use std::sync::OnceLock;

/// Operations this large may be better off streamed even below
/// [`threshold`]: the sender's route learner times it (`route.rs`).
const LEARN_FROM: usize = 8 << 20;

/// The smallest message whose copy-out is worth timing both ways: a sliced
/// all_reduce's messages are 256 KiB at world 2 (`algorithms/ring.rs`).
const MIN_MESSAGE: usize = 64 << 10;

/// Messages at least this large are copied out of the ring with
/// non-temporal stores: three quarters of the last-level cache (glibc's
/// `x86_shared_non_temporal_threshold`), or 8 MiB where sysfs does not say.
///
/// In a virtual machine sysfs may name the host's cache: the 2-core Xeon VM
/// of issue 27 reports an L3 of 480 MiB, so this is 360 MiB there and
/// nothing streams by this rule, although the VM's share of the cache ends
/// between 32 and 64 MiB (its memcpy: 14 GB/s at 32 MiB, 8–11 at 64) and a
/// 64 MiB all_reduce streamed was 8 % faster (3 of 3 alternating runs). So
/// between [`LEARN_FROM`] and this threshold the sender times the streaming
/// copy-out as a path of its own and flags the messages it chose
/// ([`worth_learning`], `FLAG_STREAM`).
pub(super) fn threshold() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| last_level_cache().map_or(8 << 20, |c| c / 4 * 3))
}

/// Whether a `len`-byte message of an operation over `whole` bytes is in the
/// range where streaming it is timed rather than decided by [`threshold`].
/// Messages under [`MIN_MESSAGE`] never are: a large operation's small
/// messages (its agreement round, a header with no payload) copy too little
/// for the stores to matter, and a class of their own was learnt for nothing.
pub(super) fn worth_learning(len: usize, whole: usize) -> bool {
    len >= MIN_MESSAGE && (LEARN_FROM..threshold()).contains(&len.max(whole))
}

/// The largest cache of CPU 0 as sysfs reports it (bytes).
fn last_level_cache() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let size = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        parse_size(size.trim())
    })
    .max()
}

/// `32768K`, `2M`, `512` → bytes.
fn parse_size(s: &str) -> Option<usize> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(mult)
}

/// Copies `src` into `dst` (same length) with non-temporal stores where
/// the destination is 16-byte aligned, ordinary copies for the unaligned
/// head and the tail, and a store fence at the end so the bytes are
/// ordered before whatever this thread publishes next.
pub(super) fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "streaming copy of unequal lengths");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        dst[..head].copy_from_slice(&src[..head]);
        let body = (dst.len() - head) / 16 * 16;
        let (d, s) = (dst[head..].as_mut_ptr(), src[head..].as_ptr());
        let mut i = 0;
        while i < body {
            // SAFETY: SSE2 is part of x86-64; d + i is 16-aligned and both
            // ranges [i, i+16) lie inside the slices (i + 16 <= body).
            unsafe {
                let v = _mm_loadu_si128(s.add(i).cast::<__m128i>());
                _mm_stream_si128(d.add(i).cast::<__m128i>(), v);
            }
            i += 16;
        }
        let done = head + body;
        dst[done..].copy_from_slice(&src[done..]);
        // SAFETY: a fence; no preconditions.
        unsafe { _mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copy_is_exact_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..17 {
            for len in [0, 1, 15, 16, 17, 31, 100, 1000, 4000 - off] {
                let mut buf = vec![0xAAu8; 4096 + 32];
                copy(&mut buf[off..off + len], &src[..len]);
                assert_eq!(&buf[off..off + len], &src[..len], "off {off} len {len}");
                assert!(buf[..off].iter().all(|&b| b == 0xAA), "head touched");
                assert!(buf[off + len..].iter().all(|&b| b == 0xAA), "tail touched");
            }
        }
    }

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        assert!(threshold() >= 1 << 10);
    }

    /// A 32 MiB all_reduce's header-only agreement message was learnt as a
    /// class of its own, ring against streaming, for a copy of no bytes.
    #[test]
    fn a_large_operations_empty_and_tiny_messages_are_not_timed_for_streaming() {
        let whole = LEARN_FROM * 4;
        if whole >= threshold() {
            // sysfs names a cache so small that such an operation always
            // streams: nothing is learnt at all here.
            println!("skipped: threshold {} B is below {whole} B", threshold());
            return;
        }
        assert!(!worth_learning(0, whole));
        assert!(!worth_learning(MIN_MESSAGE - 1, whole));
        assert!(worth_learning(MIN_MESSAGE, whole));
        assert!(
            worth_learning(256 << 10, whole),
            "a sliced all_reduce's messages"
        );
    }
}
