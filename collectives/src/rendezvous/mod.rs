//! Rendezvous: how ranks find each other.
//!
//! - [`store`]: the TCP key-value store rank 0 hosts (set / get / wait / add,
//!   every wait with a timeout, a job token checked on every connection).
//! - [`env`](mod@env): who am I — rank, world size and master address from torchrun,
//!   OpenMPI, MPICH/PMI or Slurm variables, with explicit arguments on top.
//! - [`barrier`]: the one store barrier (everyone arrives, or whoever gave up
//!   says why, or the latecomers are named).
//! - [`Store`]: the trait transports use, so they can be tested against the
//!   in-process [`MemStore`] as well as the real store.

pub mod barrier;
pub mod env;
pub mod store;

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// A key-value store shared by all ranks of a job (Gloo and the design notes
/// call it the store too).
pub trait Store: Send + Sync {
    /// Sets `key` to `value` (overwrites).
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// Returns `key`'s value, waiting up to the store's timeout for it to be set.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// Atomically adds `delta` to the integer at `key` (0 if unset); returns the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
}

/// An in-process store for ranks that are threads (tests, single-process demos).
#[derive(Debug)]
pub struct MemStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    timeout: Duration,
}

impl MemStore {
    /// An empty store whose `get` waits at most `timeout`.
    pub fn new(timeout: Duration) -> Self {
        MemStore {
            map: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            timeout,
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>>> {
        self.map
            .lock()
            .map_err(|_| Error::Rendezvous("memory store poisoned by a panicking rank".into()))
    }
}

impl Store for MemStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.lock()?.insert(key.to_owned(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let deadline = Deadline::after(self.timeout);
        let mut map = self.lock()?;
        loop {
            if let Some(v) = map.get(key) {
                return Ok(v.clone());
            }
            deadline.check(|| format!("store key {key:?}"))?;
            map = self
                .changed
                .wait_timeout(map, deadline.remaining())
                .map_err(|_| Error::Rendezvous("memory store poisoned".into()))?
                .0;
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut map = self.lock()?;
        let cur = match map.get(key) {
            Some(v) => parse_i64(key, v)?,
            None => 0,
        };
        let new = cur + delta;
        map.insert(key.to_owned(), new.to_string().into_bytes());
        self.changed.notify_all();
        Ok(new)
    }
}

/// Parses a counter value stored by `add`.
pub(crate) fn parse_i64(key: &str, v: &[u8]) -> Result<i64> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Rendezvous(format!("store key {key:?} does not hold an integer")))
}
