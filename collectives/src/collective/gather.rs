//! gather: the root ends with the concatenation of all inputs.
//! S is the root's full buffer; busbw factor (n−1)/n (nccl-tests' gather.cu).

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::error::Result;
use crate::{Collective, Communicator};

/// gather for the harness and the conformance suite: S / n elements in from
/// each rank, all S out on the root only.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Gather,
    reducing: false,
    rooted: true,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n, total / n * n),
    run: |comm, input, output, _, root| comm.gather(input, output, root),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (out, want) = c.gathered(comm)?;
    Ok(if comm.rank() == c.root {
        c.compare("root output", out.bytes(), &want)
    } else {
        Ok(())
    })
}
