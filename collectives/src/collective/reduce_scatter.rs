//! reduce_scatter: rank r ends with block r of the reduction.
//! S is the full input (each rank keeps S / n); busbw factor (n−1)/n.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::element::ReduceOp;
use crate::error::Result;
use crate::{Buffer, BufferMut, Collective, Communicator, Input};

/// reduce_scatter's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::ReduceScatter,
    reducing: true,
    rooted: false,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n * n, total / n),
    run,
    check,
};

fn run(
    comm: &dyn Communicator,
    input: Input<'_>,
    output: &mut BufferMut<'_>,
    op: ReduceOp,
    _root: usize,
) -> Result<()> {
    comm.reduce_scatter(input, output, op)
}

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let (dt, es) = (c.dtype, c.dtype.size());
    let want = c.reduced(n, n * c.count);
    let input = Aligned::from(&c.input(me, n * c.count));
    Ok(if c.in_place {
        let mut out = Aligned::from(input.bytes());
        run(
            comm,
            Input::InPlace,
            &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
            c.op_or_sum(),
            c.root,
        )?;
        c.compare("own block", &out.bytes()[c.block(me)], &want[c.block(me)])
    } else {
        let mut out = Aligned::zeros(c.count * es);
        run(
            comm,
            Input::Buffer(Buffer::from_bytes(dt, input.bytes())?),
            &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
            c.op_or_sum(),
            c.root,
        )?;
        c.compare("output", out.bytes(), &want[c.block(me)])
    })
}
