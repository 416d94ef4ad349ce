//! Results files (format `ringside-results/1`, documented in the book's
//! benchmarking chapter): the `measure` crate's writer and records, so
//! `ringside bench`, `ringside report`, the `peers` runner and the labs share
//! one vocabulary. What this file adds is the label of a measured backend.

pub use measure::{Record, ResultsWriter};
