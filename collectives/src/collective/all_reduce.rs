//! all_reduce: every rank ends with the reduction of all inputs.
//! S is one rank's buffer; busbw factor 2(n−1)/n.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::error::Result;
use crate::{Collective, Communicator};

/// all_reduce for the harness and the conformance suite: S elements in and
/// out on every rank, reduced by the op; in place allowed, no root.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::AllReduce,
    reducing: true,
    rooted: false,
    in_place: true,
    payload: true,
    blocks: |total, _| (total, total, total),
    run: |comm, input, output, op, _| comm.all_reduce(input, output, op),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let want = c.reduced(n, c.count);
    let input = Aligned::from(&c.input(me, c.count));
    let mut out = c.output_like(&input);
    let inp = c.input_arg(&input)?;
    c.call(comm, inp, &mut out)?;
    Ok(c.compare("output", out.bytes(), &want))
}
