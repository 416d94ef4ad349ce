//! gather: the root ends with the concatenation of all inputs.
//! S is the root's full buffer; busbw factor (n−1)/n (nccl-tests' gather.cu).

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::error::Result;
use crate::{Buffer, Collective, Communicator, Input};

/// gather's descriptor.
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
    let (me, n) = (comm.rank(), comm.world_size());
    let want: Vec<u8> = (0..n).flat_map(|r| c.input(r, c.count)).collect();
    let input = Aligned::from(&c.input(me, c.count));
    let mut out = Aligned::zeros(n * c.count * c.dtype.size());
    let inp = if c.in_place {
        out.bytes_mut()[c.block(me)].copy_from_slice(input.bytes());
        Input::InPlace
    } else {
        Input::Buffer(Buffer::from_bytes(c.dtype, input.bytes())?)
    };
    c.call(comm, inp, &mut out)?;
    Ok(if me == c.root {
        c.compare("root output", out.bytes(), &want)
    } else {
        Ok(())
    })
}
