//! What a backend switched off at compile time answers: a clear error naming the
//! cargo feature that would enable it (ripgrep's `disabled.rs` pattern).

use crate::Communicator;
use crate::error::{Error, Result};

/// The error for a backend whose `feature` was not compiled in.
pub fn connect(feature: &'static str) -> Result<Box<dyn Communicator>> {
    Err(Error::NotCompiled { feature })
}
