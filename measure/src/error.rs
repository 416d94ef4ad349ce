//! The one error type of this crate. Every variant about a file names it,
//! because a report usually merges several.
//!
//! Each message carries its cause (what the operating system or the JSON
//! parser said) in its text, and no variant exposes it again as a
//! [`std::error::Error::source`]: `anyhow`'s `{:#}` and `Debug`, which print a
//! message and then every source, would print the cause twice ("No space left
//! on device" twice after a full disk).

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading or writing results.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A results file could not be read at all (missing, permissions, ...).
    #[error("cannot read results file {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// A results file is not valid JSON, or not the expected shape.
    #[error("results file {path} is not a valid ringside results document: {cause}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why serde gave up (line and column included).
        cause: serde_json::Error,
    },
    /// The document is JSON but declares another format (or none).
    #[error(
        "results file {path} has format {found}, expected \"{expected}\" \
         (written by `ringside bench --json`)"
    )]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// The `format` value found, quoted, or `no "format" field`.
        found: String,
        /// The format this crate understands.
        expected: &'static str,
    },
    /// A record parsed but its numbers cannot be right (negative or NaN times,
    /// min > median, zero ranks, ...).
    #[error("results file {path}, record {index} ({label}): {reason}")]
    InvalidRecord {
        /// The file.
        path: PathBuf,
        /// Position of the record in `records` (0-based).
        index: usize,
        /// The record's label, to find it quickly.
        label: String,
        /// What is wrong.
        reason: String,
    },
    /// A figure of a results file (or one being added) cannot be drawn.
    #[error("results file {path}: {reason}")]
    InvalidFigure {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the figure.
        reason: String,
    },
    /// A line that looks like a result record but does not parse as one.
    #[error("bad result line {line:?}: {cause}")]
    BadLine {
        /// The offending line (truncated).
        line: String,
        /// The JSON error.
        cause: serde_json::Error,
    },
    /// Writing a results file failed; `doing` says at which step.
    #[error("{doing} {path}: {cause}")]
    Write {
        /// `creating`, `writing` or `renaming to`.
        doing: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// Serialising a results file failed (not expected: every field is plain data).
    #[error("cannot serialise results: {0}")]
    Serialise(serde_json::Error),
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Serialise(e)
    }
}
