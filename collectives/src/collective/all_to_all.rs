//! all_to_all: rank r's block j goes to rank j's block r.
//! S is one rank's whole send buffer; busbw factor (n−1)/n.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::element::ReduceOp;
use crate::error::Result;
use crate::{BufferMut, Collective, Communicator, Input};

/// all_to_all's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::AllToAll,
    reducing: false,
    rooted: false,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n * n, total / n * n),
    run,
    check,
};

fn run(
    comm: &dyn Communicator,
    input: Input<'_>,
    output: &mut BufferMut<'_>,
    _op: ReduceOp,
    _root: usize,
) -> Result<()> {
    comm.all_to_all(input, output)
}

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let want: Vec<u8> = (0..n)
        .flat_map(|r| c.input(r, n * c.count)[c.block(me)].to_vec())
        .collect();
    let input = Aligned::from(&c.input(me, n * c.count));
    let mut out = c.output_like(&input);
    let inp = c.input_arg(&input)?;
    run(
        comm,
        inp,
        &mut BufferMut::from_bytes(c.dtype, out.bytes_mut())?,
        c.op_or_sum(),
        c.root,
    )?;
    Ok(c.compare("output", out.bytes(), &want))
}
