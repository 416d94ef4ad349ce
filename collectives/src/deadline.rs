//! Deadlines: every wait in ringside is bounded.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A point in time after which a wait gives up with [`Error::Timeout`].
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl Deadline {
    /// A deadline `timeout` from now.
    pub fn after(timeout: Duration) -> Self {
        Deadline {
            at: Instant::now() + timeout,
            timeout,
        }
    }
    /// Time left, zero if past.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }
    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.at
    }
    /// The timeout this deadline was made from.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// `Err(Timeout)` naming `what` if the deadline has passed.
    pub fn check(&self, what: impl FnOnce() -> String) -> Result<()> {
        if self.expired() {
            Err(self.error(what()))
        } else {
            Ok(())
        }
    }
    /// The timeout error for `what`.
    pub fn error(&self, what: String) -> Error {
        Error::Timeout {
            what,
            after: self.timeout,
        }
    }
}
