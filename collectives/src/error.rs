//! The one error type every backend, transport and the store return.

use std::time::Duration;

use crate::Backend;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a collective, a transport or the rendezvous.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O error, with what we were doing when it happened.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A wait ran past its deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What we were waiting for.
        what: String,
        /// The configured timeout.
        after: Duration,
    },
    /// A peer's connection closed or its process died.
    #[error("lost rank {rank}: {detail}")]
    PeerLost {
        /// The rank that is gone.
        rank: usize,
        /// How we noticed.
        detail: String,
    },
    /// A peer gave up on the job and told us why.
    #[error("rank {rank} aborted the collective: {reason}")]
    PeerAborted {
        /// The rank that aborted.
        rank: usize,
        /// Its reason, as it reported it.
        reason: String,
    },
    /// Ranks wait on each other in a cycle, or on a rank that has closed its
    /// communicator: the flight recorder saw that the wait can never end.
    #[error("hang: {0}")]
    Hang(String),
    /// Ranks called different collectives, or the same one with different
    /// lengths, dtypes, ops or roots.
    #[error("ranks disagree: {0}")]
    Mismatch(String),
    /// A caller passed arguments that cannot work (wrong lengths, bad root, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend cannot do this (for example device memory on a host-only backend).
    #[error("the {backend} backend does not support {what}")]
    Unsupported {
        /// The backend asked.
        backend: Backend,
        /// What it cannot do.
        what: String,
    },
    /// The backend was switched off at compile time.
    #[error("the `{feature}` backend is not compiled in; rebuild with `--features {feature}`")]
    NotCompiled {
        /// The cargo feature that enables it.
        feature: &'static str,
    },
    /// Rendezvous failed: bad environment, wrong world size, unreachable master.
    #[error("rendezvous: {0}")]
    Rendezvous(String),
    /// The store refused our connection (wrong job token).
    #[error("the store refused us: {0}")]
    Auth(String),
    /// Bytes on the wire did not follow the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl Error {
    /// Wraps an I/O error with what we were doing.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
