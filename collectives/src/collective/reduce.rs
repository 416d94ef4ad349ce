//! reduce: the root ends with the reduction of all inputs.
//! S is one rank's buffer; busbw factor 1.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::element::ReduceOp;
use crate::error::Result;
use crate::{BufferMut, Collective, Communicator, Input};

/// reduce's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Reduce,
    reducing: true,
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
    op: ReduceOp,
    root: usize,
) -> Result<()> {
    comm.reduce(input, output, op, root)
}

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
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
    Ok(if me == c.root {
        c.compare("root output", out.bytes(), &c.reduced(n, c.count))
    } else if c.in_place {
        c.compare(
            "non-root buffer (must be left unchanged)",
            out.bytes(),
            input.bytes(),
        )
    } else {
        Ok(())
    })
}
