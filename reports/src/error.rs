//! The one error type of the reports crate. Every variant that concerns an input
//! names the file, because a report usually merges several and "invalid JSON"
//! alone would leave the user guessing which one is broken.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while turning results files into a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A results file could not be read, parsed or validated (the
    /// `measure` crate's errors, each naming the file).
    #[error(transparent)]
    Results(#[from] measure::Error),
    /// A record's numbers cannot be charted or fitted: a time that is not
    /// finite, negative or absurdly large (see [`crate::MAX_TIME_US`]).
    #[error("{path}: record {record}: {reason}")]
    BadRecord {
        /// The results file holding it.
        path: PathBuf,
        /// Which record: label, collective, size and world.
        record: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No input files were given, or none of them holds a record.
    #[error("nothing to report: {0}")]
    NoRecords(String),
    /// The TTF/OTF file chosen for chart text is missing or unreadable (the
    /// default, embedded font needs no file).
    #[error(
        "cannot load the chart font {path}: {reason}; pass another TTF/OTF file, or none \
         to draw with the built-in DejaVu Sans"
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
