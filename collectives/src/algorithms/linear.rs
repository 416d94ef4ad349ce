//! Linear gather and scatter: the root talks to every other rank in turn.
//!
//! The root's link carries (n−1)/n of the data whatever the algorithm, so a
//! tree would only save latency at large n; linear keeps the memory traffic
//! minimal (every block is copied once).

use std::ops::Range;

use super::TaggedTransport;
use crate::copy::copy;
use crate::error::Result;
use crate::transport::Sink;

/// Gathers every rank's `input` into the root's `output` (blocks by rank).
/// `output` is only touched on the root; `input` must be the rank's own block
/// (for in-place use the caller passes a copy).
pub fn gather(
    p: &mut TaggedTransport<'_>,
    input: &[u8],
    output: &mut [u8],
    blocks: &[Range<usize>],
    root: usize,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    if r != root {
        return p.send(root, input);
    }
    copy(&mut output[blocks[r].clone()], input);
    for from in (0..n).filter(|&j| j != root) {
        p.recv(from, Sink::Copy(&mut output[blocks[from].clone()]))?;
    }
    Ok(())
}

/// Scatters block j of the root's `input` to rank j's `output`.
pub fn scatter(
    p: &mut TaggedTransport<'_>,
    input: &[u8],
    output: &mut [u8],
    blocks: &[Range<usize>],
    root: usize,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    if r != root {
        return p.recv(root, Sink::Copy(output));
    }
    for to in (0..n).filter(|&j| j != root) {
        p.send(to, &input[blocks[to].clone()])?;
    }
    copy(output, &input[blocks[r].clone()]);
    Ok(())
}
