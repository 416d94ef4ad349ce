//! Dissemination barrier: in round k rank r signals r + 2^k and waits for
//! r − 2^k. After ⌈log2 n⌉ rounds every rank has heard, transitively, from all.
//!
//! The same rounds double as the agreement check that runs before a
//! collective: every signal carries the caller's [`crate::transport::Tag`], and
//! a rank only signals onward after its own received tags matched. So if any
//! two ranks called different things, no rank gets through — each one either
//! sees a mismatched tag itself or is told by a peer that aborted.

use super::{TaggedTransport, sub_mod};
use crate::error::Result;
use crate::transport::Sink;

/// Runs the dissemination rounds with empty payloads.
pub fn barrier(p: &mut TaggedTransport<'_>) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let mut d = 1;
    while d < n {
        p.sendrecv((r + d) % n, &[], sub_mod(r, d, n), Sink::Copy(&mut []))?;
        d *= 2;
    }
    Ok(())
}
