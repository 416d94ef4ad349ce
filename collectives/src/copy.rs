//! Byte copies on the hot paths (the shared-memory rings, the reference
//! backend's staging, a TCP receive's copy-out), made around one slow case of
//! the C library's `memcpy`.
//!
//! glibc's x86-64 `memcpy` copies with `rep movsb` from 4 KiB (AVX2 builds;
//! 8 KiB with AVX-512) up to a few hundred KiB. On the 2-core AMD EPYC VM of
//! issue 27 (Zen 3, glibc 2.36 of Debian 12), that instruction ran at
//! **2.9–3.1 GB/s instead of 44–86 GB/s** whenever the destination lay 1 to 31
//! bytes past the source, counted modulo 4 KiB: best of 500 copies of
//! 4 KiB–256 KiB, with the same buffers 32 bytes further apart or 1–16 bytes the
//! other way at full speed, 2 KiB and 1 MiB at full speed in every case, and
//! `GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=100000000` at full speed
//! too. (Other CPUs have shown alike cliffs for `rep movsb` with nearby
//! addresses, e.g. microsoft/STL#5506.)
//!
//! Whether a copy hits that window depends on where the two buffers happen to
//! lie, which moves from run to run with the heap and the ring's positions.
//! That was the shared-memory "slow phase" of issue 27: in some runs every
//! all_reduce of 4–16 KiB (the recursive-doubling path, which stages through
//! scratch buffers and copies four times) took 2.1–8 µs where the next run
//! took 0.8–1.7, and the ring beat it from 4 KiB up.
//!
//! So a copy of 4 KiB or more whose ends lie in the window (widened to 63
//! bytes, in case other cores' window is wider) is made as `memcpy`s of
//! [`PIECE`] bytes, each below every `rep movsb` threshold: at full speed
//! there (68–82 GB/s for 4–16 KiB on that VM, against 2.9–3.1 as one call).
//! Every other copy is one `memcpy`, as before.

/// Copies from this many bytes on may take glibc's `rep movsb` (its lowest
/// threshold, for AVX2 builds).
const REP_MOVSB_FROM: usize = 4 << 10;

/// The pieces a copy in the window is made of: under every `rep movsb`
/// threshold, and long enough that the per-call cost stays small.
const PIECE: usize = 2 << 10;

/// A destination this few bytes past the source (modulo 4 KiB) or nearer
/// makes `rep movsb` slow (1–31 measured; see the module docs).
const WINDOW: usize = 63;

/// Whether one `memcpy` of `len` bytes from `src` to `dst` may hit the slow
/// `rep movsb` case.
fn in_slow_window(dst: *const u8, src: *const u8, len: usize) -> bool {
    let ahead = (dst as usize).wrapping_sub(src as usize) & 4095;
    len >= REP_MOVSB_FROM && (1..=WINDOW).contains(&ahead)
}

/// Copies `src` into `dst`, which must be as long (as `copy_from_slice`).
pub(crate) fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of different lengths"
    );
    // SAFETY: two distinct borrows of `len` bytes each cannot overlap.
    unsafe { copy_raw(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
}

/// Copies `len` bytes from `src` to `dst` (as `ptr::copy_nonoverlapping`).
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping`: `src` readable and `dst` writable for
/// `len` bytes, and the two ranges apart.
pub(crate) unsafe fn copy_raw(dst: *mut u8, src: *const u8, len: usize) {
    if !in_slow_window(dst, src, len) {
        // SAFETY: per the contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut done = 0;
    while done < len {
        // The piece's length varies (the last is short), which keeps the
        // compiler from fusing the calls back into one `memcpy`.
        let n = PIECE.min(len - done);
        // SAFETY: `done + n <= len`, inside both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), n) };
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers far apart in one allocation, page-aligned so the offsets
    /// below decide where the window falls.
    fn pair(len: usize, ahead: usize) -> (Vec<u8>, usize, usize) {
        let total = 2 * len + 3 * 4096 + ahead;
        let v = vec![0u8; total];
        let base = (v.as_ptr() as usize).next_multiple_of(4096) - v.as_ptr() as usize;
        let src = base;
        let dst = base + (len + 4096).next_multiple_of(4096) + ahead;
        (v, src, dst)
    }

    #[test]
    fn the_window_is_a_destination_just_past_the_source_from_4_kib() {
        let p = 0x10000 as *const u8;
        for ahead in 1..=WINDOW {
            assert!(in_slow_window(p.wrapping_add(ahead), p, 4096), "{ahead}");
            assert!(in_slow_window(p.wrapping_add(8192 + ahead), p, 1 << 20));
        }
        assert!(!in_slow_window(p, p.wrapping_add(4096), 4096), "0 apart");
        assert!(!in_slow_window(p.wrapping_add(64), p, 4096), "64 past");
        assert!(
            !in_slow_window(p, p.wrapping_add(1), 4096),
            "before the source"
        );
        assert!(!in_slow_window(p.wrapping_add(1), p, 4095), "under 4 KiB");
    }

    /// Named after what broke: the piecewise path must copy every byte,
    /// including a short last piece, at every distance in the window.
    #[test]
    fn copies_in_the_window_land_every_byte() {
        for len in [4096, 4097, 6143, 16384 + 5, 65536] {
            for ahead in [0, 1, 7, 31, 63, 64] {
                let (mut v, s, d) = pair(len, ahead);
                for (i, b) in v[s..s + len].iter_mut().enumerate() {
                    *b = (i * 7 + 3) as u8;
                }
                let (head, tail) = v.split_at_mut(d);
                copy(&mut tail[..len], &head[s..s + len]);
                assert!(
                    (0..len).all(|i| v[d + i] == (i * 7 + 3) as u8),
                    "len {len}, {ahead} past"
                );
                assert!(v[d + len..].iter().all(|&b| b == 0), "wrote past the end");
            }
        }
    }

    #[test]
    #[should_panic(expected = "different lengths")]
    fn slices_of_different_lengths_are_refused() {
        copy(&mut [0u8; 4], &[0u8; 5]);
    }
}
