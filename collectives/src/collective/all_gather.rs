//! all_gather: every rank ends with the concatenation of all inputs.
//! S is the gathered output (each rank sends S / n); busbw factor (n−1)/n.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::error::Result;
use crate::{Collective, Communicator};

/// all_gather for the harness and the conformance suite: S / n elements in
/// from each rank, all S out on every rank; no reduction, no root.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::AllGather,
    reducing: false,
    rooted: false,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n, total / n * n),
    run: |comm, input, output, _, _| comm.all_gather(input, output),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (out, want) = c.gathered(comm)?;
    Ok(c.compare("output", out.bytes(), &want))
}
