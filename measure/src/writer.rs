//! Writing a results file: whole, after every size (temporary file + rename),
//! so a crash or Ctrl-C never leaves a torn file behind.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::Figure;
use crate::error::{Error, Result};
use crate::record::{FORMAT, Record};

/// The environment variable that moves the labs' results folder (the tests and
/// the suite's `labs` step point it at a temporary folder).
pub const RESULTS_DIR_ENV: &str = "RINGSIDE_RESULTS_DIR";

/// Where lab runs are written (`labNN/<time>/`) and where the book looks for them:
/// `$RINGSIDE_RESULTS_DIR`, else `<workspace>/results`.
pub fn results_root(workspace: &Path) -> PathBuf {
    std::env::var_os(RESULTS_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map_or_else(|| workspace.join("results"), PathBuf::from)
}

/// A results file being written.
#[derive(Debug, Clone)]
pub struct ResultsWriter {
    /// Where to write (`None`: keep in memory only, e.g. on ranks other than 0).
    pub path: Option<PathBuf>,
    /// The manifest (free JSON: command, versions, host, environment).
    pub manifest: Value,
    /// The records so far.
    pub records: Vec<Record>,
    /// The figures so far (a lab's; bench files have none).
    pub figures: Vec<Figure>,
}

impl ResultsWriter {
    /// A writer with no records yet.
    pub fn new(path: Option<PathBuf>, manifest: Value) -> Self {
        ResultsWriter {
            path,
            manifest,
            records: Vec::new(),
            figures: Vec::new(),
        }
    }

    /// Adds a figure, or replaces the one with its name (a lab redraws its curve
    /// as it goes), and rewrites the file. A figure that could not be drawn is
    /// refused here, so the file on disk always reads back.
    pub fn set_figure(&mut self, figure: Figure) -> Result<()> {
        if let Some(reason) = figure.problem() {
            return Err(Error::InvalidFigure {
                path: self.path.clone().unwrap_or_default(),
                reason,
            });
        }
        match self.figures.iter_mut().find(|f| f.name == figure.name) {
            Some(old) => *old = figure,
            None => self.figures.push(figure),
        }
        self.write()
    }

    /// Adds a record and rewrites the file.
    pub fn push(&mut self, r: Record) -> Result<()> {
        self.records.push(r);
        self.write()
    }

    /// The document as it is written: keys in sorted order at every level
    /// (serde_json's map), the byte layout results files have always had.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut doc = json!({
            "format": FORMAT,
            "manifest": self.manifest,
            "records": serde_json::to_value(&self.records)?,
        });
        if !self.figures.is_empty() {
            doc["figures"] = serde_json::to_value(&self.figures)?;
        }
        Ok(serde_json::to_vec_pretty(&doc)?)
    }

    /// Writes the whole file (temporary file, then rename). On failure (a full
    /// disk) the temporary file is removed and the previous file, if any, stays
    /// as it was.
    pub fn write(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|cause| Error::Write {
                doing: "creating",
                path: dir.to_path_buf(),
                cause,
            })?;
        }
        let bytes = self.to_json()?;
        let tmp = path.with_extension("json.tmp");
        let written = std::fs::write(&tmp, bytes)
            .map_err(|cause| Error::Write {
                doing: "writing",
                path: tmp.clone(),
                cause,
            })
            .and_then(|()| {
                std::fs::rename(&tmp, path).map_err(|cause| Error::Write {
                    doing: "renaming to",
                    path: path.clone(),
                    cause,
                })
            });
        if written.is_err() {
            // Best effort: the error being returned is the one that matters.
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::parse_results;

    #[test]
    fn a_written_file_reads_back_with_sorted_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/bench.json");
        let mut w = ResultsWriter::new(Some(path.clone()), json!({"world": 2}));
        w.write().unwrap();
        let line = r#"{"label":"reference-shm","backend":"reference","collective":"send_recv","world":2,"bytes":8,"min_us":1,"median_us":2,"max_us":3,"wrong":0}"#;
        w.push(crate::parse_line(line).unwrap().unwrap()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let back = parse_results(&text, &path).unwrap();
        assert_eq!(back.records, w.records);
        // Sorted keys: "algbw_gbps" before "algo" before "backend" ... "world".
        let keys: Vec<usize> = ["\"algbw_gbps\"", "\"algo\"", "\"backend\"", "\"wrong\""]
            .iter()
            .map(|k| text.find(k).unwrap())
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(!path.with_extension("json.tmp").exists());
        assert!(!text.contains("figures"), "bench files keep their layout");
    }

    #[test]
    fn bench_json_leaves_no_tmp_after_a_failed_write_and_names_the_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.json");
        let mut w = ResultsWriter::new(Some(path.clone()), json!({}));
        w.write().unwrap();
        let before = std::fs::read(&path).unwrap();
        // A folder where the file should go: the rename fails after the
        // temporary file was written in full, the late failure of a full disk.
        let blocked = dir.path().join("blocked.json");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("x"), "").unwrap();
        w.path = Some(blocked.clone());
        let e = w.write().unwrap_err();
        assert!(!blocked.with_extension("json.tmp").exists(), "{e}");
        // A parent that is a file: nothing can be created at all.
        w.path = Some(path.join("sub/bench.json"));
        let e = w.write().unwrap_err();
        let msg = format!("{e}");
        assert!(msg.contains("creating"), "{msg}");
        // The cause is in the message and not repeated as a source (which
        // `anyhow`'s `{:#}` would print after it).
        assert!(std::error::Error::source(&e).is_none(), "{msg}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn figures_are_replaced_by_name_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lab.json");
        let mut w = ResultsWriter::new(Some(path.clone()), json!({}));
        let loss = |n: usize| {
            let pts = (0..n).map(|i| [i as f64, 1.0 / (1.0 + i as f64)]).collect();
            Figure::lines("loss", "Loss", "s", "loss")
                .with(crate::FigureSeries::measured("1 worker", pts))
        };
        w.set_figure(loss(2)).unwrap();
        w.set_figure(loss(3)).unwrap();
        let back = crate::read_results(&path).unwrap();
        assert_eq!(back.figures, [loss(3)]);
        let e = w
            .set_figure(Figure::lines("Bad Name", "", "", ""))
            .unwrap_err();
        assert!(e.to_string().contains("Bad Name"), "{e}");
    }

    #[test]
    fn a_file_with_an_undrawable_figure_is_refused_naming_it() {
        let text = r#"{"format":"ringside-results/1","records":[],"figures":[{"name":"x","title":"","kind":"lines","x_label":"","y_label":"","series":[]}]}"#;
        let e = parse_results(text, Path::new("lab.json")).unwrap_err();
        assert!(
            e.to_string().contains("lab.json") && e.to_string().contains("no points"),
            "{e}"
        );
    }
}
