//! broadcast: the root's buffer is copied to every rank.
//! S is one rank's buffer; busbw factor 1.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::element::ReduceOp;
use crate::error::Result;
use crate::{BufferMut, Collective, Communicator, Input};

/// broadcast's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Broadcast,
    reducing: false,
    rooted: true,
    in_place: true,
    payload: true,
    blocks: |total, _| (total, total, total),
    run,
    check,
};

fn run(
    comm: &dyn Communicator,
    input: Input<'_>,
    output: &mut BufferMut<'_>,
    _op: ReduceOp,
    root: usize,
) -> Result<()> {
    comm.broadcast(input, output, root)
}

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let me = comm.rank();
    let want = c.input(c.root, c.count);
    let input = Aligned::from(&c.input(me, c.count));
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
