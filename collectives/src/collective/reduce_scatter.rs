//! reduce_scatter: rank r ends with block r of the reduction.
//! S is the full input (each rank keeps S / n); busbw factor (n−1)/n.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::error::Result;
use crate::{Collective, Communicator};

/// reduce_scatter for the harness and the conformance suite: S elements in on
/// every rank, block r of their reduction (S / n) out on rank r; no root.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::ReduceScatter,
    reducing: true,
    rooted: false,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n * n, total / n),
    run: |comm, input, output, op, _| comm.reduce_scatter(input, output, op),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let want = c.reduced(n, n * c.count);
    c.check_own_block(comm, &c.input(me, n * c.count), &want[c.block(me)])
}
