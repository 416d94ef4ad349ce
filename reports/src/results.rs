//! The results file contract (`ringside-results/1`) is the `measure` crate's:
//! reports reads the same [`Record`] that `ringside bench` writes.

pub use measure::{Collective, FORMAT, Record, ResultsFile};

use std::path::Path;

use crate::error::Result;

/// Parse and validate the text of one results file; `origin` only names the
/// file in errors.
pub fn parse_results(text: &str, origin: &Path) -> Result<ResultsFile> {
    Ok(measure::parse_results(text, origin)?)
}

/// Read, parse and validate one results file.
pub fn read_results(path: &Path) -> Result<ResultsFile> {
    Ok(measure::read_results(path)?)
}
