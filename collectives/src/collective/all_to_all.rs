//! all_to_all: rank r's block j goes to rank j's block r.
//! S is one rank's whole send buffer; busbw factor (n−1)/n.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::error::Result;
use crate::{Collective, Communicator};

/// all_to_all for the harness and the conformance suite: S elements in and
/// out on every rank, block j of rank i's input landing as block i of rank
/// j's output; no reduction, no root.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::AllToAll,
    reducing: false,
    rooted: false,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n * n, total / n * n),
    run: |comm, input, output, _, _| comm.all_to_all(input, output),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let want: Vec<u8> = (0..n)
        .flat_map(|r| c.input(r, n * c.count)[c.block(me)].to_vec())
        .collect();
    let input = Aligned::from(&c.input(me, n * c.count));
    let mut out = c.output_like(&input);
    let inp = c.input_arg(&input)?;
    c.call(comm, inp, &mut out)?;
    Ok(c.compare("output", out.bytes(), &want))
}
