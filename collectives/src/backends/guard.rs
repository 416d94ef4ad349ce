//! The one rule every stateful backend applies before a call: its state must
//! not be poisoned by a panic elsewhere, and a communicator that failed once
//! stays failed (its peers may be anywhere in a collective), so callers are
//! told to create a new one instead of getting a hang or wrong data.

use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Locks `state` if the communicator is still usable; `broken` reads the
/// reason it failed earlier, if it did.
pub(crate) fn lock_usable<'a, T>(
    state: &'a Mutex<T>,
    broken: impl FnOnce(&T) -> Option<&str>,
) -> Result<MutexGuard<'a, T>> {
    let g = state.lock().map_err(|_| {
        Error::Protocol("communicator poisoned by a panic in another thread".into())
    })?;
    if let Some(why) = broken(&g) {
        return Err(Error::Protocol(format!(
            "this communicator failed earlier ({why}); create a new one"
        )));
    }
    Ok(g)
}
