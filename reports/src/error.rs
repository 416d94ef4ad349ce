//! The one error type of the reports crate. Every variant that concerns an input
//! names the file, because a report usually merges several and "invalid JSON"
//! alone would leave the user guessing which one is broken.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while turning results files into a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A results file could not be read at all (missing, permissions, ...).
    #[error("cannot read results file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A results file is not valid JSON, or not the expected shape.
    #[error("results file {path} is not a valid ringside results document: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why serde gave up (line and column included).
        source: serde_json::Error,
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
    /// No input files were given, or none of them holds a record.
    #[error("nothing to report: {0}")]
    NoRecords(String),
    /// The TTF font used for chart text is missing or unreadable.
    #[error(
        "cannot load the chart font {path}: {reason}; install the Debian package \
         fonts-dejavu-core (`apt-get install fonts-dejavu-core`) or pass another TTF font"
    )]
    Font {
        /// The font file.
        path: PathBuf,
        /// Why it could not be used.
        reason: String,
    },
    /// plotters failed while drawing a chart.
    #[error("cannot draw chart {chart}: {reason}")]
    Chart {
        /// The chart's file stem, e.g. `latency-all_reduce`.
        chart: String,
        /// plotters' message.
        reason: String,
    },
    /// Encoding a chart as PNG failed.
    #[error("cannot encode chart {chart} as PNG: {source}")]
    Png {
        /// The chart's file stem.
        chart: String,
        /// The encoder's error.
        source: png::EncodingError,
    },
    /// Writing an output file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The output file or folder.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}

/// The results vocabulary's errors keep their own variants and messages here.
impl From<measure::Error> for Error {
    fn from(e: measure::Error) -> Self {
        match e {
            measure::Error::Read { path, source } => Error::Read { path, source },
            measure::Error::Parse { path, source } => Error::Parse { path, source },
            measure::Error::WrongFormat {
                path,
                found,
                expected,
            } => Error::WrongFormat {
                path,
                found,
                expected,
            },
            measure::Error::InvalidRecord {
                path,
                index,
                label,
                reason,
            } => Error::InvalidRecord {
                path,
                index,
                label,
                reason,
            },
            // Reports only reads whole files: these come from writers and line readers.
            other @ (measure::Error::BadLine { .. }
            | measure::Error::Write { .. }
            | measure::Error::Serialise(_)) => Error::NoRecords(other.to_string()),
        }
    }
}
