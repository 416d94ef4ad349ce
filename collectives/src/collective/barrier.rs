//! barrier: nobody leaves until everyone has arrived. No payload, no
//! in-place form; busbw factor 0 (nccl-tests has no barrier test).

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::element::ReduceOp;
use crate::error::Result;
use crate::{BufferMut, Collective, Communicator, Input};

/// barrier's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Barrier,
    reducing: false,
    rooted: false,
    in_place: false,
    payload: false,
    blocks: |_, _| (0, 0, 0),
    run,
    check,
};

fn run(
    comm: &dyn Communicator,
    _input: Input<'_>,
    _output: &mut BufferMut<'_>,
    _op: ReduceOp,
    _root: usize,
) -> Result<()> {
    comm.barrier()
}

fn check(comm: &dyn Communicator, _c: &Case) -> Result<Checked> {
    comm.barrier()?;
    Ok(Ok(()))
}
