//! reduce_scatter: rank r ends with block r of the reduction.
//! S is the full input (each rank keeps S / n); busbw factor (n−1)/n.

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::error::Result;
use crate::{Buffer, Collective, Communicator, Input};

/// reduce_scatter's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::ReduceScatter,
    reducing: true,
    rooted: false,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n * n, total / n),
    run: |comm, input, output, op, _| comm.reduce_scatter(input, output, op),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let (dt, es) = (c.dtype, c.dtype.size());
    let want = c.reduced(n, n * c.count);
    let input = Aligned::from(&c.input(me, n * c.count));
    Ok(if c.in_place {
        let mut out = Aligned::from(input.bytes());
        c.call(comm, Input::InPlace, &mut out)?;
        c.compare("own block", &out.bytes()[c.block(me)], &want[c.block(me)])
    } else {
        let mut out = Aligned::zeros(c.count * es);
        c.call(
            comm,
            Input::Buffer(Buffer::from_bytes(dt, input.bytes())?),
            &mut out,
        )?;
        c.compare("output", out.bytes(), &want[c.block(me)])
    })
}
