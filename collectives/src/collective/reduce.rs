//! reduce: the root ends with the reduction of all inputs.
//! S is one rank's buffer; busbw factor 1.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::error::Result;
use crate::{Collective, Communicator};

/// reduce for the harness and the conformance suite: S elements in on every
/// rank, their reduction out on the root only.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Reduce,
    reducing: true,
    rooted: true,
    in_place: true,
    payload: true,
    blocks: |total, _| (total, total, total),
    run: |comm, input, output, op, root| comm.reduce(input, output, op, root),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let input = Aligned::from(&c.input(me, c.count));
    let mut out = c.output_like(&input);
    let inp = c.input_arg(&input)?;
    c.call(comm, inp, &mut out)?;
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
