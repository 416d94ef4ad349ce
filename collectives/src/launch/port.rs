//! A free local port, for a one-host job's store when none was given.

use crate::error::{Error, Result};

/// Picks a port that is free on 127.0.0.1 right now (the kernel's choice of an
/// ephemeral port). Another process may take it before it is bound again, so
/// callers bind it soon and say which port failed if it did.
pub fn free_port() -> Result<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::io("picking a free port on 127.0.0.1", e))
}
