//! send/recv: every rank sends to its right neighbour and receives from its
//! left (nccl-tests' sendrecv). S is one rank's buffer; busbw factor 1.
//! No in-place form; nothing to do on one rank.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::element::ReduceOp;
use crate::error::{Error, Result};
use crate::{Buffer, BufferMut, Collective, Communicator, Input};

/// send/recv for the harness and the conformance suite: each rank sends S
/// elements to its right neighbour and receives S from its left.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::SendRecv,
    reducing: false,
    rooted: false,
    in_place: false,
    payload: true,
    blocks: |total, _| (total, total, total),
    run,
    check,
};

fn run(
    comm: &dyn Communicator,
    input: Input<'_>,
    output: &mut BufferMut<'_>,
    _op: ReduceOp,
    _root: usize,
) -> Result<()> {
    let Input::Buffer(send) = input else {
        return Err(Error::InvalidArgument(
            "send/recv has no in-place form".into(),
        ));
    };
    let (me, n) = (comm.rank(), comm.world_size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    // Even ranks send first, odd ranks receive first, so blocking sends of
    // large messages cannot all wait on each other around the ring.
    if me % 2 == 0 {
        comm.send(&send, right)?;
        comm.recv(output, left)
    } else {
        comm.recv(output, left)?;
        comm.send(&send, right)
    }
}

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    if n == 1 {
        return Ok(Ok(()));
    }
    let left = (me + n - 1) % n;
    let input = Aligned::from(&c.input(me, c.count));
    let mut out = Aligned::zeros(c.count * c.dtype.size());
    c.call(
        comm,
        Input::Buffer(Buffer::from_bytes(c.dtype, input.bytes())?),
        &mut out,
    )?;
    Ok(c.compare("received", out.bytes(), &c.input(left, c.count)))
}
