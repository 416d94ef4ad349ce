//! scatter: rank r ends with block r of the root's buffer.
//! S is the root's full buffer; busbw factor (n−1)/n (nccl-tests' scatter.cu).

use super::Descriptor;
use super::expected::{Case, Checked};
use crate::aligned::Aligned;
use crate::error::Result;
use crate::{Buffer, Collective, Communicator, Input};

/// scatter's descriptor.
pub const DESCRIPTOR: Descriptor = Descriptor {
    collective: Collective::Scatter,
    reducing: false,
    rooted: true,
    in_place: true,
    payload: true,
    blocks: |total, n| (total / n, total / n * n, total / n),
    run: |comm, input, output, _, root| comm.scatter(input, output, root),
    check,
};

fn check(comm: &dyn Communicator, c: &Case) -> Result<Checked> {
    let (me, n) = (comm.rank(), comm.world_size());
    let (dt, es) = (c.dtype, c.dtype.size());
    let root_data = c.input(c.root, n * c.count);
    let want = root_data[c.block(me)].to_vec();
    Ok(if c.in_place {
        let mut out = if me == c.root {
            Aligned::from(&root_data)
        } else {
            Aligned::zeros(n * c.count * es)
        };
        c.call(comm, Input::InPlace, &mut out)?;
        c.compare("own block", &out.bytes()[c.block(me)], &want)
    } else {
        let input = Aligned::from(if me == c.root { &root_data } else { &[] });
        let mut out = Aligned::zeros(c.count * es);
        c.call(
            comm,
            Input::Buffer(Buffer::from_bytes(dt, input.bytes())?),
            &mut out,
        )?;
        c.compare("output", out.bytes(), &want)
    })
}
