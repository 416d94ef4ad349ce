//! Collective algorithms over a [`Transport`], one file each.
//!
//! Every function here works on host bytes and a [`TaggedTransport`] handle that stamps
//! each message with the collective's [`Tag`]. Choosing among them is
//! [`select`]'s job (by message size, with an override).

pub mod dissemination;
pub mod group;
pub mod halving_doubling;
pub mod hierarchical;
pub mod linear;
pub mod pairwise;
pub mod plug;
pub mod recursive_doubling;
pub mod ring;
pub mod tree;

use std::ops::Range;

use crate::error::{Error, Result};
use crate::transport::{Pair, Sink, Tag, Transport};

/// An all_reduce algorithm choice: the names `--algo` takes. Which of them a
/// backend runs is [`crate::Backend::algorithms`]: the reference backend runs
/// the ones in this folder, Gloo its own ring, ring-chunked, halving-doubling
/// and bcube.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// Pick by message size and world size (see [`select`]).
    Auto,
    /// Ring: reduce-scatter then all-gather, bandwidth-optimal.
    Ring,
    /// Recursive halving (reduce-scatter) then doubling (all-gather).
    HalvingDoubling,
    /// Recursive doubling: log2(n) full-buffer exchanges, latency-optimal.
    RecursiveDoubling,
    /// Binomial-tree reduce to rank 0, then binomial-tree broadcast.
    Tree,
    /// Two levels across nodes: reduce inside each node, ring among the node
    /// leaders, broadcast inside each node ([`hierarchical`]; nodes of
    /// `LOCAL_WORLD_SIZE` ranks).
    Hierarchical,
    /// Gloo only: `gloo::AllreduceRingChunked`.
    RingChunked,
    /// Gloo only: `gloo::allreduce` with `Algorithm::BCUBE`.
    Bcube,
}

impl Algo {
    /// Every concrete algorithm of the reference backend (not `Auto`).
    pub const CONCRETE: [Algo; 5] = [
        Algo::Ring,
        Algo::HalvingDoubling,
        Algo::RecursiveDoubling,
        Algo::Tree,
        Algo::Hierarchical,
    ];

    /// Parses `auto`, `ring`, `halving-doubling` (`hd`), `recursive-doubling` (`rd`), `tree`,
    /// `hierarchical` (`hier`), and Gloo's `ring-chunked` and `bcube` (`_` for `-` everywhere).
    pub fn parse(s: &str) -> Option<Algo> {
        Some(match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "auto" => Algo::Auto,
            "ring" => Algo::Ring,
            "halving-doubling" | "hd" => Algo::HalvingDoubling,
            "recursive-doubling" | "rd" => Algo::RecursiveDoubling,
            "tree" | "binomial" => Algo::Tree,
            "hierarchical" | "hier" => Algo::Hierarchical,
            "ring-chunked" => Algo::RingChunked,
            "bcube" => Algo::Bcube,
            _ => return None,
        })
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Auto => "auto",
            Algo::Ring => "ring",
            Algo::HalvingDoubling => "halving-doubling",
            Algo::RecursiveDoubling => "recursive-doubling",
            Algo::Tree => "tree",
            Algo::Hierarchical => "hierarchical",
            Algo::RingChunked => "ring-chunked",
            Algo::Bcube => "bcube",
        }
    }

    /// Reads `RINGSIDE_ALGO`; unset means `Auto`.
    pub fn from_env() -> Result<Algo> {
        match std::env::var("RINGSIDE_ALGO") {
            Ok(s) => Algo::parse(&s).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "RINGSIDE_ALGO={s:?}: expected auto, ring, halving-doubling, recursive-doubling, tree or \
                     hierarchical"
                ))
            }),
            Err(_) => Ok(Algo::Auto),
        }
    }
}

/// All-reduces at or below this many bytes take the latency path: recursive
/// doubling staged in scratch memory, with no separate agreement round
/// (unless the transport draws the line lower: `Transport::latency_path_bytes`).
pub const SMALL_BYTES: usize = 16 << 10;
/// From this many bytes on, `Auto` uses the ring; below it, halving-doubling.
pub const RING_BYTES: usize = 256 << 10;

/// The all_reduce algorithm `Auto` picks for `bytes` at `world` ranks, over a
/// transport whose latency path goes up to `small` bytes
/// (`Transport::latency_path_bytes`).
pub fn select(requested: Algo, bytes: usize, world: usize, small: usize) -> Algo {
    match requested {
        Algo::Auto if bytes <= small => Algo::RecursiveDoubling,
        // With two ranks, halving-doubling and ring move the same bytes; the ring's
        // streamed blocks pipeline better.
        Algo::Auto if bytes >= RING_BYTES || world == 2 => Algo::Ring,
        Algo::Auto => Algo::HalvingDoubling,
        a => a,
    }
}

/// A transport plus the tag of the collective in progress: every message an
/// algorithm sends or receives through it is stamped with that tag, so two
/// collectives in flight on one transport never take each other's bytes.
pub struct TaggedTransport<'a> {
    /// The transport.
    pub t: &'a mut dyn Transport,
    /// Stamped on every message of this call.
    pub tag: Tag,
}

impl TaggedTransport<'_> {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.t.rank()
    }
    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.t.world_size()
    }
    /// Sends `data` to `to`.
    pub fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.t.exchange(&self.tag, Some((to, data)), None)
    }
    /// Receives from `from` into `sink`.
    pub fn recv(&mut self, from: usize, sink: Sink<'_>) -> Result<()> {
        self.t.exchange(&self.tag, None, Some((from, sink)))
    }
    /// Sends to `to` while receiving from `from`.
    pub fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, sink: Sink<'_>) -> Result<()> {
        self.t
            .exchange(&self.tag, Some((to, data)), Some((from, sink)))
    }
    /// Both halves of a two-rank all_reduce (see [`Transport::reduce_pair`]).
    pub fn reduce_pair(&mut self, pair: Pair<'_>) -> Result<()> {
        self.t.reduce_pair(&self.tag, pair)
    }
}

/// Splits `count` elements of `esize` bytes into `parts` nearly equal byte ranges.
pub fn partition(count: usize, parts: usize, esize: usize) -> Vec<Range<usize>> {
    (0..parts)
        .map(|i| (i * count / parts) * esize..((i + 1) * count / parts) * esize)
        .collect()
}

/// Borrows `buf[src]` shared and `buf[dst]` mutably at once.
///
/// Overlapping ranges or ranges past the end of `buf` are an
/// [`Error::InvalidArgument`] naming both, not a
/// panic: lab 6's learners call this with block indices of their own, and a
/// wrong index must read as "you sent and received the same block", not as a
/// slice-index panic inside a rank thread that leaves its peers waiting.
pub fn split_pair(
    buf: &mut [u8],
    src: Range<usize>,
    dst: Range<usize>,
) -> crate::error::Result<(&[u8], &mut [u8])> {
    let len = buf.len();
    if src.start > src.end || dst.start > dst.end || src.end > len || dst.end > len {
        return Err(crate::Error::InvalidArgument(format!(
            "split_pair: byte ranges {src:?} (send) and {dst:?} (receive) must lie within \
             the buffer's {len} bytes"
        )));
    }
    // Two empty ranges never overlap, wherever they start.
    if !src.is_empty() && !dst.is_empty() && src.start < dst.end && dst.start < src.end {
        return Err(crate::Error::InvalidArgument(format!(
            "split_pair: byte ranges {src:?} (send) and {dst:?} (receive) overlap: \
             the block you send and the block you receive into must be different blocks"
        )));
    }
    if src.is_empty() {
        return Ok((&[], &mut buf[dst]));
    }
    Ok(if src.start >= dst.end {
        let (lo, hi) = buf.split_at_mut(src.start);
        (&hi[..src.len()], &mut lo[dst])
    } else {
        let (lo, hi) = buf.split_at_mut(dst.start);
        (&lo[src], &mut hi[..dst.len()])
    })
}

/// `(a - b) mod n` for ranks and block indices.
pub fn sub_mod(a: usize, b: usize, n: usize) -> usize {
    (a + n - b % n) % n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_covers_everything_in_order() {
        let p = partition(10, 3, 4);
        assert_eq!(p, vec![0..12, 12..24, 24..40]);
        assert_eq!(partition(1, 4, 2), vec![0..0, 0..0, 0..0, 0..2]);
    }

    #[test]
    fn split_pair_either_order() {
        let mut b: Vec<u8> = (0..10).collect();
        let (s, d) = split_pair(&mut b, 6..8, 1..3).unwrap();
        assert_eq!(s, &[6, 7]);
        d[0] = 99;
        let (s, d) = split_pair(&mut b, 0..2, 4..5).unwrap();
        assert_eq!(s, &[0, 99]);
        assert_eq!(d, &[4]);
        let (s, d) = split_pair(&mut b, 4..4, 0..8).unwrap();
        assert!(s.is_empty());
        assert_eq!(d.len(), 8);
    }

    /// Lab 6: a learner who sends and receives the same block got a slice-index
    /// panic inside a rank thread; now an error that says what overlapped.
    #[test]
    fn split_pair_overlapping_or_out_of_range_is_an_error_not_a_panic() {
        let mut b = vec![0u8; 10];
        let e = split_pair(&mut b, 2..6, 4..8).unwrap_err().to_string();
        assert!(
            e.contains("2..6") && e.contains("4..8") && e.contains("overlap"),
            "{e}"
        );
        let e = split_pair(&mut b, 0..2, 8..12).unwrap_err().to_string();
        assert!(e.contains("10 bytes"), "{e}");
        assert!(split_pair(&mut b, 3..3, 3..3).is_ok());
    }

    /// The transport's line decides where the latency path ends; forced
    /// algorithms are kept whatever the size.
    #[test]
    fn auto_takes_the_latency_path_up_to_the_transports_line() {
        assert_eq!(
            select(Algo::Auto, 4 << 10, 2, 4 << 10),
            Algo::RecursiveDoubling
        );
        assert_eq!(select(Algo::Auto, 8 << 10, 2, 4 << 10), Algo::Ring);
        assert_eq!(
            select(Algo::Auto, 16 << 10, 2, SMALL_BYTES),
            Algo::RecursiveDoubling
        );
        assert_eq!(
            select(Algo::Auto, 32 << 10, 4, SMALL_BYTES),
            Algo::HalvingDoubling
        );
        assert_eq!(select(Algo::Auto, 1 << 20, 4, SMALL_BYTES), Algo::Ring);
        assert_eq!(
            select(Algo::RecursiveDoubling, 1 << 20, 2, 4 << 10),
            Algo::RecursiveDoubling
        );
    }
}
