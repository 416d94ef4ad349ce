//! The one error type of this crate.

use thiserror::Error as ThisError;

/// Errors from parsing flags and peer output.
#[derive(Debug, ThisError)]
pub enum Error {
    /// A size such as `64M` that does not parse.
    #[error("bad size {input:?}: {why}")]
    BadSize {
        /// What was given.
        input: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A sweep whose flags make no sense (e.g. factor 1).
    #[error("bad sweep: {0}")]
    BadSweep(String),
    /// An implementation name not in [`crate::Impl::ALL`].
    #[error("unknown implementation {0:?} (known: {known})", known = crate::Impl::names())]
    UnknownImpl(String),
    /// A line that looks like a result record but does not parse as one.
    #[error("bad result line {line:?}: {source}")]
    BadRecord {
        /// The offending line (truncated).
        line: String,
        /// The JSON error.
        source: serde_json::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
