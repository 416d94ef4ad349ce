//! One descriptor per collective, as nccl-tests keeps `src/all_reduce.cu`
//! beside one shared harness: every fact about a collective lives in its file
//! (`all_reduce.rs`, `broadcast.rs`, ...), and the benchmark harness
//! ([`crate::bench`]) and the conformance suite ([`crate::conformance`])
//! loop over them.
//!
//! A descriptor says
//! - how nccl-tests' size S becomes buffers ([`Descriptor::blocks`], per
//!   nccl-tests' doc/PERFORMANCE.md: S is not always one rank's buffer);
//! - whether it reduces (takes an op), has a root, an in-place form, a payload;
//! - its bus-bandwidth factor (the `measure` crate's table, shared with
//!   results readers that do not link this crate);
//! - how to run it on a [`Communicator`] ([`Descriptor::run`]);
//! - how to check one call exactly against the sequential reference
//!   ([`Descriptor::check`], built from [`expected`]'s inputs and expected values).

mod all_gather;
mod all_reduce;
mod all_to_all;
mod barrier;
mod broadcast;
pub mod expected;
mod gather;
mod reduce;
mod reduce_scatter;
mod scatter;
mod send_recv;

use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::{BufferMut, Collective, Communicator, Input};

use expected::{Case, Checked};

/// One call of a collective on a communicator: (comm, input, output, op, root).
pub type RunFn = fn(
    comm: &dyn Communicator,
    input: Input<'_>,
    output: &mut BufferMut<'_>,
    op: ReduceOp,
    root: usize,
) -> Result<()>;

/// Everything the harness and the suite need to know about one collective.
#[derive(Debug)]
pub struct Descriptor {
    /// Which collective.
    pub collective: Collective,
    /// Takes a reduction op (all_reduce, reduce, reduce_scatter).
    pub reducing: bool,
    /// Has a root rank (broadcast, reduce, gather, scatter).
    pub rooted: bool,
    /// Has an in-place form (not barrier, not send/recv).
    pub in_place: bool,
    /// Moves data (not barrier): sizes and dtypes mean something.
    pub payload: bool,
    /// `(count, input, output)` elements for `total` elements of S at `n`
    /// ranks: the per-rank count of the crate's buffer-shape table, and the
    /// out-of-place input and output lengths.
    pub blocks: fn(total: usize, n: usize) -> (usize, usize, usize),
    /// One call. `input` is [`Input::InPlace`] only when the collective has
    /// an in-place form; `op` and `root` matter only where it takes them.
    pub run: RunFn,
    /// One call on fresh integer inputs, compared with the sequential
    /// reference: `Ok(Err(_))` is a wrong result, `Err(_)` a communicator error.
    pub check: fn(comm: &dyn Communicator, case: &Case) -> Result<Checked>,
}

impl Descriptor {
    /// nccl-tests' bus-bandwidth factor at `n` ranks.
    pub fn bus_factor(&self, n: usize) -> f64 {
        measure::busbw_factor(self.collective, n)
    }
}

/// Every descriptor, in [`Collective::ALL`] order.
pub const ALL: [&Descriptor; 10] = [
    &all_reduce::DESCRIPTOR,
    &broadcast::DESCRIPTOR,
    &reduce::DESCRIPTOR,
    &all_gather::DESCRIPTOR,
    &reduce_scatter::DESCRIPTOR,
    &all_to_all::DESCRIPTOR,
    &gather::DESCRIPTOR,
    &scatter::DESCRIPTOR,
    &barrier::DESCRIPTOR,
    &send_recv::DESCRIPTOR,
];

/// The descriptor of `collective`.
pub fn of(collective: Collective) -> &'static Descriptor {
    ALL[collective.code() as usize]
}

/// The buffers one timed call uses, for nccl-tests' size S.
///
/// nccl-tests' `size` (S) is not always one rank's buffer: for all_gather it is
/// the gathered output, for reduce_scatter the full input, for all_to_all a
/// rank's whole send buffer, for gather / scatter the root's full buffer. The
/// per-rank block is S / (n · elem) rounded down, and the reported size is what
/// was actually moved, so algbw and busbw stay comparable with nccl-tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Per-rank element count in the sense of the crate's buffer-shape table.
    pub count: usize,
    /// Elements in the (out-of-place) input buffer.
    pub input: usize,
    /// Elements in the output buffer.
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
        let (count, input, output) = (of(collective).blocks)(bytes / e, n.max(1));
        // What moved: the larger of the two buffers (the gathered output, the
        // scattered input, or the one buffer both use).
        let reported_count = input.max(output);
        Shape {
            count,
            input,
            output,
            bytes: reported_count * e,
            reported_count,
        }
    }

    /// Elements of the single buffer the in-place form uses: the larger of
    /// input and output (in place, the full n·count buffer of reduce_scatter
    /// and scatter is both input and output).
    pub fn in_place_len(&self) -> usize {
        self.input.max(self.output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_in_code_order() {
        for (d, c) in ALL.iter().zip(Collective::ALL) {
            assert_eq!(d.collective, c);
            assert_eq!(of(c).collective, c);
        }
    }

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
        assert_eq!(s.in_place_len(), 1 << 18);
        // Rounds down to whole blocks and reports what moved.
        let s = Shape::of(Collective::AllToAll, 100, 3, DType::F32);
        assert_eq!((s.count, s.bytes, s.reported_count), (8, 96, 24));
        assert_eq!(Shape::of(Collective::AllGather, 4, 2, DType::F32).count, 0);
        let s = Shape::of(Collective::Barrier, 1 << 20, 4, DType::F32);
        assert_eq!((s.count, s.bytes), (0, 0));
    }

    #[test]
    fn flags_match_the_collectives() {
        let reducing: Vec<Collective> = ALL
            .iter()
            .filter(|d| d.reducing)
            .map(|d| d.collective)
            .collect();
        assert_eq!(
            reducing,
            [
                Collective::AllReduce,
                Collective::Reduce,
                Collective::ReduceScatter
            ]
        );
        let rooted: Vec<Collective> = ALL
            .iter()
            .filter(|d| d.rooted)
            .map(|d| d.collective)
            .collect();
        assert_eq!(
            rooted,
            [
                Collective::Broadcast,
                Collective::Reduce,
                Collective::Gather,
                Collective::Scatter
            ]
        );
        let without_in_place: Vec<Collective> = ALL
            .iter()
            .filter(|d| !d.in_place)
            .map(|d| d.collective)
            .collect();
        assert_eq!(
            without_in_place,
            [Collective::Barrier, Collective::SendRecv]
        );
        assert_eq!(of(Collective::AllReduce).bus_factor(4), 1.5);
    }
}
