//! The results format (`ringside-results/1`, see the book's benchmarking
//! chapter): one [`Record`] per measured size and form, in a [`ResultsFile`]
//! with a manifest. Peer programs print the same records one per line
//! ([`parse_line`]).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::collective::Collective;
use crate::error::{Error, Result};

/// The `format` value of a results file.
pub const FORMAT: &str = "ringside-results/1";

fn minus_one() -> i64 {
    -1
}

/// One measured size of one label (a row of the nccl-tests table).
///
/// Fields the charts and the model need are required; descriptive ones default
/// so that an older or hand-written file, or a C peer's shorter line, still reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What was measured: a backend + transport + algorithm combination,
    /// e.g. `reference-shm` or `torch-gloo` (the series name in charts).
    /// The C and C++ peers print it as `impl`.
    #[serde(alias = "impl")]
    pub label: String,
    /// reference | gloo | mpi | nccl | torch (empty in a peer's line).
    #[serde(default)]
    pub backend: String,
    /// Algorithm as selected.
    #[serde(default)]
    pub algo: String,
    /// True for records measured by the torch peer.
    #[serde(default)]
    pub peer: bool,
    /// Which collective.
    pub collective: Collective,
    /// Number of ranks.
    pub world: usize,
    /// Message size S in bytes (nccl-tests "size").
    pub bytes: u64,
    /// Element count (nccl-tests "count").
    #[serde(default)]
    pub count: u64,
    /// Element type, e.g. `f32`.
    #[serde(default)]
    pub dtype: String,
    /// Reduction, or `none`.
    #[serde(default)]
    pub op: String,
    /// Root rank, -1 when the collective has none.
    #[serde(default = "minus_one")]
    pub root: i64,
    /// In-place variant.
    #[serde(default)]
    pub in_place: bool,
    /// Timed iterations.
    #[serde(default)]
    pub iters: u64,
    /// Fastest iteration (µs).
    pub min_us: f64,
    /// Median iteration (µs).
    pub median_us: f64,
    /// Mean iteration (µs).
    #[serde(default)]
    pub mean_us: Option<f64>,
    /// 99th percentile iteration (µs).
    #[serde(default)]
    pub p99_us: Option<f64>,
    /// Slowest iteration (µs).
    pub max_us: f64,
    /// bytes / median / 1e9.
    #[serde(default)]
    pub algbw_gbps: Option<f64>,
    /// algbw × bus factor.
    #[serde(default)]
    pub busbw_gbps: Option<f64>,
    /// Wrong elements, -1 when not checked.
    #[serde(default = "minus_one")]
    pub wrong: i64,
}

impl Record {
    /// `bytes / median` in GB/s, computed rather than read back: a printed
    /// value may be rounded (0.0000 at 4 decimals for small messages).
    pub fn computed_algbw(&self) -> f64 {
        if self.median_us > 0.0 {
            self.bytes as f64 / (self.median_us * 1e-6) / 1e9
        } else {
            0.0
        }
    }

    /// [`Record::computed_algbw`] times the collective's bus factor.
    pub fn computed_busbw(&self) -> f64 {
        self.computed_algbw() * self.collective.bus_factor(self.world)
    }

    /// Bus bandwidth in GB/s: the file's value, or computed from the median
    /// when the writer left it out.
    pub fn busbw(&self) -> f64 {
        match self.busbw_gbps {
            Some(b) if b.is_finite() => b,
            _ => self.computed_busbw(),
        }
    }

    /// Algorithm bandwidth in GB/s (file value or computed).
    pub fn algbw(&self) -> f64 {
        match self.algbw_gbps {
            Some(b) if b.is_finite() => b,
            _ => self.computed_algbw(),
        }
    }

    /// Why this record cannot be used in a results file, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.label.trim().is_empty() {
            return Some("empty label".into());
        }
        if self.backend.trim().is_empty() {
            return Some("empty backend".into());
        }
        if self.world == 0 {
            return Some("world is 0".into());
        }
        if self.bytes == 0 && self.collective != Collective::Barrier {
            return Some("bytes is 0 (zero-byte sizes are not recorded)".into());
        }
        let times = [
            ("min_us", Some(self.min_us)),
            ("median_us", Some(self.median_us)),
            ("mean_us", self.mean_us),
            ("p99_us", self.p99_us),
            ("max_us", Some(self.max_us)),
        ];
        for (name, value) in times {
            if let Some(v) = value
                && !(v.is_finite() && v >= 0.0)
            {
                return Some(format!("{name} is {v}, expected a finite time >= 0"));
            }
        }
        // Rounding when the writer prints times can flip equal values by an
        // ulp or so; a relative slack keeps that from rejecting honest files.
        let slack = 1e-9 * self.max_us.max(1.0);
        if self.min_us > self.median_us + slack || self.median_us > self.max_us + slack {
            return Some(format!(
                "times out of order: min {} / median {} / max {} µs",
                self.min_us, self.median_us, self.max_us
            ));
        }
        None
    }

    /// Problems with the numbers of a peer's record: wrong or unchecked
    /// elements, bandwidths that do not follow from bytes and median (a peer
    /// computing them differently would make a comparison meaningless),
    /// unordered times.
    pub fn inconsistencies(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.wrong > 0 {
            out.push(format!("{} wrong elements", self.wrong));
        } else if self.wrong < 0 {
            out.push("result not checked (wrong = -1)".into());
        }
        if !(self.median_us.is_finite() && self.median_us > 0.0) {
            out.push(format!(
                "median {} us is not a positive time",
                self.median_us
            ));
            return out;
        }
        if !(self.min_us <= self.median_us && self.median_us <= self.max_us) {
            out.push(format!(
                "times out of order: min {} median {} max {}",
                self.min_us, self.median_us, self.max_us
            ));
        }
        let (algbw, busbw) = (self.computed_algbw(), self.computed_busbw());
        // 1% slack, plus the rounding of a median printed with 3 decimals
        // (which matters for sub-microsecond shared-memory latencies), plus
        // the rounding of a bandwidth printed with 4 decimals.
        let tol = 0.01 + 0.0006 / self.median_us;
        let close = |a: f64, b: f64| (a - b).abs() <= tol * b.abs() + 0.00006;
        if let Some(a) = self.algbw_gbps
            && !close(a, algbw)
        {
            out.push(format!("algbw {a} GB/s but bytes/median gives {algbw:.6}"));
        }
        if let Some(b) = self.busbw_gbps
            && !close(b, busbw)
        {
            out.push(format!(
                "busbw {b} GB/s but algbw x the bus factor gives {busbw:.6}"
            ));
        }
        out
    }
}

/// One results document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// Provenance: command, versions, host, environment. Kept as free JSON
    /// because readers only display it and writers add fields over time.
    #[serde(default)]
    pub manifest: serde_json::Value,
    /// The measurements.
    pub records: Vec<Record>,
    /// A lab's other measurements, one chart each (absent from bench files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<crate::Figure>,
}

/// Only the `format` field, read first so that a file of another kind gets
/// "wrong format" rather than a confusing "missing field records".
#[derive(Deserialize)]
struct FormatProbe {
    format: Option<serde_json::Value>,
}

/// Parse and validate the text of one results file; `origin` only names the
/// file in errors.
pub fn parse_results(text: &str, origin: &Path) -> Result<ResultsFile> {
    let parse_err = |cause| Error::Parse {
        path: origin.to_path_buf(),
        cause,
    };
    let probe: FormatProbe = serde_json::from_str(text).map_err(parse_err)?;
    match &probe.format {
        Some(serde_json::Value::String(s)) if s == FORMAT => {}
        other => {
            return Err(Error::WrongFormat {
                path: origin.to_path_buf(),
                found: match other {
                    Some(v) => v.to_string(),
                    None => "no \"format\" field".into(),
                },
                expected: FORMAT,
            });
        }
    }
    let file: ResultsFile = serde_json::from_str(text).map_err(parse_err)?;
    for (index, record) in file.records.iter().enumerate() {
        if let Some(reason) = record.problem() {
            return Err(Error::InvalidRecord {
                path: origin.to_path_buf(),
                index,
                label: record.label.clone(),
                reason,
            });
        }
    }
    for figure in &file.figures {
        if let Some(reason) = figure.problem() {
            return Err(Error::InvalidFigure {
                path: origin.to_path_buf(),
                reason,
            });
        }
    }
    Ok(file)
}

/// Read, parse and validate one results file.
pub fn read_results(path: &Path) -> Result<ResultsFile> {
    let text = std::fs::read_to_string(path).map_err(|cause| Error::Read {
        path: path.to_path_buf(),
        cause,
    })?;
    parse_results(&text, path)
}

/// Parses one line of a program's stdout. `Ok(None)` for lines that are not
/// records (log output, other JSON); an error for a line that claims to be a
/// record (a JSON object with `median_us`) but is malformed, so a peer that
/// changes its format is noticed rather than silently dropped.
pub fn parse_line(line: &str) -> Result<Option<Record>> {
    let line = line.trim();
    if !line.starts_with('{') {
        return Ok(None);
    }
    let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
        return Ok(None);
    };
    if value.get("median_us").is_none() {
        return Ok(None);
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(|cause| Error::BadLine {
            line: line.chars().take(200).collect(),
            cause,
        })
}

#[cfg(test)]
mod tests;
