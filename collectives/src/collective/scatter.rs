//! scatter: rank r ends with block r of the root's buffer.
//! S is the root's full buffer; busbw factor (n−1)/n (nccl-tests' scatter.cu).

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::element::ReduceOp;
use crate::error::Result;
use crate::{Buffer, BufferMut, Collective, Communicator, Input};

/// scatter's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Scatter,
    reducing: false,
    rooted: true,
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
    _op: ReduceOp,
    root: usize,
) -> Result<()> {
    comm.scatter(input, output, root)
}

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let (dt, es) = (c.dtype, c.dtype.size());
    let root_data = c.input(c.root, n * c.count);
    let want = root_data[c.block(me)].to_vec();
    Ok(if c.in_place {
        let mut out = if me == c.root {
            Aligned::from(&root_data)
        } else {
            Aligned::zeros(n * c.count * es)
        };
        run(
            comm,
            Input::InPlace,
            &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
            c.op_or_sum(),
            c.root,
        )?;
        c.compare("own block", &out.bytes()[c.block(me)], &want)
    } else {
        let input = Aligned::from(if me == c.root { &root_data } else { &[] });
        let mut out = Aligned::zeros(c.count * es);
        run(
            comm,
            Input::Buffer(Buffer::from_bytes(dt, input.bytes())?),
            &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
            c.op_or_sum(),
            c.root,
        )?;
        c.compare("output", out.bytes(), &want)
    })
}
