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
    /// An implementation name not in [`crate::Label::ALL`].
    #[error("unknown implementation {0:?} (known: {known})", known = crate::Label::names())]
    UnknownLabel(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
