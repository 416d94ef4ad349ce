//! One run of a lab: `results/labNN/<stamp>/` with `results.json` (the bench's
//! results format and manifest, rewritten after every record) and, at the end,
//! its charts as SVG and PNG with an `index.html`, drawn by `reports` as for
//! `ringside report`.
//!
//! The run is written into a temporary folder, `results/labNN/.partial/<stamp>/`,
//! and renamed to `results/labNN/<stamp>/` by [`Run::finish`] once its charts
//! are written ([`measure::RunFolder`]): a run that fails (a full disk, an error
//! in the lab) removes its folder and never becomes the newest run that the book
//! shows. One killed outright (Ctrl-C) keeps what it measured under `.partial/`.

use std::path::{Path, PathBuf};

use measure::{Record, ResultsWriter, RunFolder, manifest};

use crate::{LabError, Variant};

/// A lab run's results folder and results file (kept by rank 0).
pub struct Run {
    folder: RunFolder,
    writer: ResultsWriter,
}

impl Run {
    /// Starts a run of lab `lab` on `world` ranks over `transport`, timed as the
    /// slowest rank, under [`results_root`]: `$RINGSIDE_RESULTS_DIR/labNN/`, by
    /// default the workspace's `results/` (where `cargo xtask book` looks).
    pub fn start(lab: u32, world: usize, transport: &str) -> Result<Run, LabError> {
        Self::start_in(&results_root(), lab, world, transport)
    }

    /// [`Run::start`] under `root` instead of [`results_root`].
    pub fn start_in(root: &Path, lab: u32, world: usize, transport: &str) -> Result<Run, LabError> {
        let folder = RunFolder::create(&root.join(format!("lab{lab:02}")))?;
        let mut manifest = manifest::manifest(&measure::build!(), world, transport, "max");
        // Whose code ran, said outright: the book tells "your run" from the
        // solution's by it (the recorded environment says it only indirectly).
        manifest["lab"] = serde_json::json!({
            "number": lab,
            "variant": Variant::from_env().key(),
        });
        let writer = ResultsWriter::new(Some(folder.dir().join("results.json")), manifest);
        writer.write()?;
        Ok(Run { folder, writer })
    }

    /// The folder to write the run's own files into (a trace, a table): the
    /// temporary one until [`Run::finish`] moves it, with them, into place.
    pub fn dir(&self) -> &Path {
        self.folder.dir()
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

    /// Draws the charts of everything pushed into the run's folder, moves the
    /// complete folder into place and returns where it is. On failure nothing
    /// of the run is left. In a run of the reference solution
    /// ([`Variant::from_env`]) what the lab calls "your …" is named as the
    /// solution's ([`Run::finish_as`]).
    pub fn finish(self) -> Result<PathBuf, LabError> {
        self.finish_as(Variant::from_env())
    }

    /// [`Run::finish`] for a run of `variant`. A solution run's labels,
    /// series, categories and titles never say "your" or "yours": the labs name what the
    /// learner wrote "your ring", "your step 1", and a chart of the solution
    /// saying so (issue 24 saw "your ring" in a `--solution` run's legend)
    /// reads as the learner's own.
    pub fn finish_as(mut self, variant: Variant) -> Result<PathBuf, LabError> {
        self.writer.manifest["lab"]["variant"] = variant.key().into();
        self.writer.write()?;
        if variant == Variant::Solution {
            for r in &mut self.writer.records {
                r.label = solutions(&r.label);
            }
            for f in &mut self.writer.figures {
                f.title = solutions(&f.title);
                for c in &mut f.categories {
                    *c = solutions(c);
                }
                for s in &mut f.series {
                    s.name = solutions(&s.name);
                }
            }
            self.writer.write()?;
        }
        let dir = self.folder.dir();
        let results = dir.join("results.json");
        let mut opts = reports::ReportOptions::new(dir);
        // A lab's chart is read in the book, where nothing explains the
        // report's fitted model: the measurements alone.
        opts.charts.models = false;
        match reports::write_report(&[&results], &opts) {
            Ok(_) => {}
            // A write error as measure's, whose message carries the cause once
            // (reports' repeats it as its source, printed again by `{:#}`).
            Err(reports::Error::Write { path, source }) => {
                return Err(measure::Error::Write {
                    doing: "writing",
                    path,
                    cause: source,
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        }
        Ok(self.folder.finish()?)
    }
}

/// `label` with each word "your" as "solution's" and "yours" as "the
/// solution's" (a capital kept at the start).
fn solutions(label: &str) -> String {
    let mut out = String::with_capacity(label.len() + 8);
    let mut rest = label;
    while let Some(at) = rest.to_ascii_lowercase().find("your") {
        let bytes = rest.as_bytes();
        let word_start = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
        let plural = bytes
            .get(at + 4)
            .is_some_and(|b| b.eq_ignore_ascii_case(&b's'));
        let len = if plural { 5 } else { 4 };
        let word_end = bytes
            .get(at + len)
            .is_none_or(|b| !b.is_ascii_alphanumeric());
        out.push_str(&rest[..at]);
        if word_start && word_end {
            let capital = bytes[at].is_ascii_uppercase();
            out.push_str(match (plural, capital) {
                (false, false) => "solution's",
                (false, true) => "Solution's",
                (true, false) => "the solution's",
                (true, true) => "The solution's",
            });
        } else {
            out.push_str(&rest[at..at + len]);
        }
        rest = &rest[at + len..];
    }
    out.push_str(rest);
    out
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

#[cfg(test)]
mod tests;
