//! How a message size becomes buffers, following nccl-tests.
//!
//! nccl-tests' `size` (S) is not always one rank's buffer: for all_gather it is
//! the gathered output, for reduce_scatter the full input, for all_to_all a
//! rank's whole send buffer, for gather / scatter the root's full buffer. The
//! per-rank block is S / (n · elem) rounded down, and the reported size is what
//! was actually moved, so algbw and busbw stay comparable with nccl-tests.

use crate::{Collective, DType};

/// The buffers one timed call uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Per-rank element count in the sense of the crate's buffer-shape table.
    pub count: usize,
    /// Elements in the (out-of-place) input buffer.
    pub input: usize,
    /// Elements in the output buffer (the in-place buffer too).
    pub output: usize,
    /// The size reported as nccl-tests' `size` column, in bytes.
    pub bytes: usize,
    /// The count reported as nccl-tests' `count` column.
    pub reported_count: usize,
}

impl Shape {
    /// The shape for a requested size of `bytes` at `n` ranks. Zero counts
    /// (sizes below one element, or one block per rank) give `count == 0`.
    pub fn of(collective: Collective, bytes: usize, n: usize, dtype: DType) -> Shape {
        let e = dtype.size();
        let n = n.max(1);
        let total = bytes / e;
        match collective {
            Collective::AllReduce
            | Collective::Broadcast
            | Collective::Reduce
            | Collective::SendRecv => Shape {
                count: total,
                input: total,
                output: total,
                bytes: total * e,
                reported_count: total,
            },
            Collective::AllGather | Collective::Gather => {
                let c = total / n;
                Shape {
                    count: c,
                    input: c,
                    output: c * n,
                    bytes: c * n * e,
                    reported_count: c * n,
                }
            }
            Collective::ReduceScatter | Collective::Scatter => {
                let c = total / n;
                Shape {
                    count: c,
                    input: c * n,
                    output: c,
                    bytes: c * n * e,
                    reported_count: c * n,
                }
            }
            Collective::AllToAll => {
                let c = total / n;
                Shape {
                    count: c,
                    input: c * n,
                    output: c * n,
                    bytes: c * n * e,
                    reported_count: c * n,
                }
            }
            Collective::Barrier => Shape {
                count: 0,
                input: 0,
                output: 0,
                bytes: 0,
                reported_count: 0,
            },
        }
    }

    /// Elements of the single buffer the in-place form uses.
    pub fn in_place_len(&self, collective: Collective) -> usize {
        match collective {
            // In place, the full n·count buffer is both input and output.
            Collective::ReduceScatter | Collective::Scatter => self.input,
            _ => self.output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_nccl_tests() {
        let s = Shape::of(Collective::AllReduce, 1 << 20, 4, DType::F32);
        assert_eq!((s.count, s.bytes), (1 << 18, 1 << 20));
        // all_gather: S is the gathered output; each rank sends S / n.
        let s = Shape::of(Collective::AllGather, 1 << 20, 4, DType::F32);
        assert_eq!(
            (s.count, s.input, s.output, s.bytes),
            (1 << 16, 1 << 16, 1 << 18, 1 << 20)
        );
        // reduce_scatter: S is the full input; each rank keeps S / n.
        let s = Shape::of(Collective::ReduceScatter, 1 << 20, 4, DType::F32);
        assert_eq!((s.input, s.output), (1 << 18, 1 << 16));
        assert_eq!(s.in_place_len(Collective::ReduceScatter), 1 << 18);
        // Rounds down to whole blocks and reports what moved.
        let s = Shape::of(Collective::AllToAll, 100, 3, DType::F32);
        assert_eq!((s.count, s.bytes, s.reported_count), (8, 96, 24));
        assert_eq!(Shape::of(Collective::AllGather, 4, 2, DType::F32).count, 0);
    }
}
