//! Pairwise all_to_all: in step k = 1..n−1, rank r sends its block for r+k and
//! receives the block from r−k. One partner per direction per step, so every
//! link is busy exactly once per step and no rank is a hotspot.

use std::ops::Range;

use super::{TaggedTransport, sub_mod};
use crate::copy::copy;
use crate::error::Result;
use crate::transport::Sink;

/// Moves block j of `input` to rank j's `output` block r. `input` and `output`
/// are n blocks each, described by `blocks` (byte ranges, same for both).
pub fn all_to_all(
    p: &mut TaggedTransport<'_>,
    input: &[u8],
    output: &mut [u8],
    blocks: &[Range<usize>],
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    copy(&mut output[blocks[r].clone()], &input[blocks[r].clone()]);
    for k in 1..n {
        let to = (r + k) % n;
        let from = sub_mod(r, k, n);
        p.sendrecv(
            to,
            &input[blocks[to].clone()],
            from,
            Sink::Copy(&mut output[blocks[from].clone()]),
        )?;
    }
    Ok(())
}
