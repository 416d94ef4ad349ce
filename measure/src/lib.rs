//! The measuring vocabulary of ringside: what a benchmark writes and what
//! every reader (reports, the `peers` runner, labs) reads.
//!
//! - [`Collective`]: the collectives' names (nccl-tests' for tables, the
//!   results file's for records) and [`busbw_factor`], nccl-tests' bus
//!   factors;
//! - [`size`]: message sizes parsed from flags (`64M`) and printed for people;
//! - [`Record`] and [`ResultsFile`]: one measured size, and a whole results
//!   file (format [`FORMAT`]) with its [`manifest`] (which build, machine,
//!   libraries and settings measured it); [`ResultsWriter`] writes one;
//! - [`RunFolder`]: a run's results folder, written aside and renamed into
//!   place only when complete;
//! - [`median_run`], [`median_rounds`]: which of several repeated runs a table shows;
//!   [`pairings`]: ours against the peer round by round (rounds won, median ratio);
//!   [`cautious_median`]: a median that never flatters ringside;
//!   [`reversed_round`]: the ABBA order of repeated rounds;
//! - [`Figure`]: a lab's own measurement that is not a size sweep (a loss curve,
//!   a step's phases), carried in the same results file and drawn by `reports`.
//!
//! Nothing here talks to a network or a GPU; the `collectives` crate builds
//! its collective descriptors on these names and factors.
#![deny(missing_docs)]

pub mod build_script;
pub mod busbw;
mod collective;
mod error;
mod figure;
pub mod manifest;
mod record;
mod run_folder;
mod runs;
pub mod size;
mod writer;

pub use busbw::busbw_factor;
pub use collective::Collective;
pub use error::{Error, Result};
pub use figure::{Figure, FigureKind, FigureSeries};
pub use record::{FORMAT, Record, ResultsFile, parse_line, parse_results, read_results};
pub use run_folder::{PARTIAL_DIR, RunFolder};
pub use runs::{Pairings, cautious_median, median_rounds, median_run, pairings, reversed_round};
pub use writer::{RESULTS_DIR_ENV, ResultsWriter, results_root};
