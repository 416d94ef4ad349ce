//! barrier: nobody leaves until everyone has arrived. No payload, no
//! in-place form; busbw factor 0 (nccl-tests has no barrier test).

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::error::Result;
use crate::{Collective, Communicator};

/// barrier for the harness and the conformance suite: no payload; every
/// rank leaves only after all have entered.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Barrier,
    reducing: false,
    rooted: false,
    in_place: false,
    payload: false,
    blocks: |_, _| (0, 0, 0),
    run: |comm, _, _, _, _| comm.barrier(),
    check,
};

fn check(comm: &dyn Communicator, _c: &Case) -> Result<Checked> {
    comm.barrier()?;
    Ok(Ok(()))
}
