//! scatter: rank r ends with block r of the root's buffer.
//! S is the root's full buffer; busbw factor (n−1)/n (nccl-tests' scatter.cu).

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::error::Result;
use crate::{Collective, Communicator};

/// scatter for the harness and the conformance suite: the root's S elements
/// in, block r (S / n) out on rank r.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Scatter,
    reducing: false,
    rooted: true,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n * n, total / n),
    run: |comm, input, output, _, root| comm.scatter(input, output, root),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let root_data = c.input(c.root, n * c.count);
    let input: &[u8] = if me == c.root { &root_data } else { &[] };
    c.check_own_block(comm, input, &root_data[c.block(me)])
}
