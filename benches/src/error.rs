//! The one error type of this crate.

use thiserror::Error as ThisError;

/// Errors from parsing flags and peer output.
#[derive(Debug, ThisError)]
pub enum Error {
    /// A sweep whose flags make no sense (e.g. factor 1).
    #[error("bad sweep: {0}")]
    BadSweep(String),
    /// An implementation name not in [`crate::Impl::ALL`].
    #[error("unknown implementation {0:?} (known: {known})", known = crate::Impl::names())]
    UnknownImpl(String),
    /// An implementation timed inside another's run, asked for without it.
    #[error("{imp} is timed inside {host}'s run: add {host} to --impl")]
    NoHost {
        /// The implementation asked for.
        imp: crate::Impl,
        /// The one whose run times it.
        host: crate::Impl,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
