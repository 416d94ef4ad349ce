//! One run of a lab: `results/labNN/<UTC time>/` with `results.json` (the bench's
//! results format and manifest, rewritten after every record so an interrupted
//! run keeps what it measured) and, at the end, its charts as SVG and PNG with an
//! `index.html`, drawn by `reports` as for `ringside report`.

use std::path::{Path, PathBuf};

use measure::{Record, ResultsWriter, manifest};

use crate::LabError;

/// A lab run's results folder and results file (kept by rank 0).
pub struct Run {
    dir: PathBuf,
    writer: ResultsWriter,
}

impl Run {
    /// Starts a run of lab `lab` on `world` ranks over `transport`, timed as the
    /// slowest rank. The folder is `$RINGSIDE_RESULTS_DIR/labNN/<time>/`, by
    /// default under the workspace's `results/` (where `cargo xtask book` looks).
    pub fn start(lab: u32, world: usize, transport: &str) -> Result<Run, LabError> {
        let dir = results_root()
            .join(format!("lab{lab:02}"))
            .join(manifest::stamp());
        let writer = ResultsWriter::new(
            Some(dir.join("results.json")),
            manifest::manifest(&measure::build!(), world, transport, "max"),
        );
        writer.write()?;
        Ok(Run { dir, writer })
    }

    /// The run's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds a measured size and rewrites the results file.
    pub fn push(&mut self, record: Record) -> Result<(), LabError> {
        Ok(self.writer.push(record)?)
    }

    /// The records pushed so far.
    pub fn records(&self) -> &[Record] {
        &self.writer.records
    }

    /// Adds (or replaces, by name) one of the lab's own figures and rewrites the
    /// results file: a loss curve, a step's phases, a bubble against its theory.
    pub fn figure(&mut self, figure: measure::Figure) -> Result<(), LabError> {
        Ok(self.writer.set_figure(figure)?)
    }

    /// Draws the charts of everything pushed into the run's folder and returns
    /// the folder.
    pub fn finish(self) -> Result<PathBuf, LabError> {
        let results = self.dir.join("results.json");
        reports::write_report(&[&results], &reports::ReportOptions::new(&self.dir))?;
        Ok(self.dir)
    }
}

/// Where lab runs go ([`measure::results_root`]): the workspace's when the
/// binary runs where it was built, else the current folder's.
pub fn results_root() -> PathBuf {
    let workspace = manifest::workspace_dir();
    if workspace.join("labs/info.toml").is_file() {
        measure::results_root(&workspace)
    } else {
        measure::results_root(Path::new("."))
    }
}
