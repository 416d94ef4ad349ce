//! broadcast: the root's buffer is copied to every rank.
//! S is one rank's buffer; busbw factor 1.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::error::Result;
use crate::{Collective, Communicator};

/// broadcast for the harness and the conformance suite: the root's S
/// elements land on every rank; in place allowed.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Broadcast,
    reducing: false,
    rooted: true,
    in_place: true,
    payload: true,
    blocks: |total, _| (total, total, total),
    run: |comm, input, output, _, root| comm.broadcast(input, output, root),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let me = comm.rank();
    let want = c.input(c.root, c.count);
    let input = Aligned::from(&c.input(me, c.count));
    let mut out = c.output_like(&input);
    let inp = c.input_arg(&input)?;
    c.call(comm, inp, &mut out)?;
    Ok(c.compare("output", out.bytes(), &want))
}
