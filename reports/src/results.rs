//! The results file contract (`ringside-results/1`, see notes/results-format.md):
//! serde types, parsing and validation of one file.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The `format` value this crate reads.
pub const FORMAT: &str = "ringside-results/1";

/// The collectives a record may describe, spelled as in the results file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// Every rank ends with the reduction of all inputs.
    AllReduce,
    /// The root's buffer is copied to every rank.
    Broadcast,
    /// The root ends with the reduction of all inputs.
    Reduce,
    /// Every rank ends with the concatenation of all inputs.
    AllGather,
    /// Every rank ends with one reduced block.
    ReduceScatter,
    /// Every rank sends a distinct block to every rank.
    AllToAll,
    /// The root ends with the concatenation of all inputs.
    Gather,
    /// The root sends a distinct block to every rank.
    Scatter,
    /// Point to point between two ranks.
    SendRecv,
    /// Synchronisation only, no payload.
    Barrier,
}

impl Collective {
    /// Every collective, in the order reports list them.
    pub const ALL: [Collective; 10] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Gather,
        Collective::Scatter,
        Collective::SendRecv,
        Collective::Barrier,
    ];

    /// The name used in results files and file names (`all_reduce`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "all_to_all",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::SendRecv => "send_recv",
            Collective::Barrier => "barrier",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `world` ranks (PERFORMANCE.md):
    /// how many times each byte of S crosses the slowest link in an optimal
    /// algorithm — the harness's own [`collectives::bench::busbw_factor`], so
    /// reports and tables cannot disagree. Zero for a barrier (no payload)
    /// and for no ranks.
    pub fn bus_factor(self, world: usize) -> f64 {
        if world == 0 {
            return 0.0;
        }
        let c = match self {
            Collective::AllReduce => collectives::Collective::AllReduce,
            Collective::Broadcast => collectives::Collective::Broadcast,
            Collective::Reduce => collectives::Collective::Reduce,
            Collective::AllGather => collectives::Collective::AllGather,
            Collective::ReduceScatter => collectives::Collective::ReduceScatter,
            Collective::AllToAll => collectives::Collective::AllToAll,
            Collective::Gather => collectives::Collective::Gather,
            Collective::Scatter => collectives::Collective::Scatter,
            Collective::SendRecv => collectives::Collective::SendRecv,
            Collective::Barrier => return 0.0,
        };
        collectives::bench::busbw_factor(c, world)
    }

    /// The factor f used in the α–β model t = α + β·S·f: the bus factor, or 1
    /// where that is 0 (barrier, one rank), so that β still means "time per
    /// byte" instead of the model losing its size term.
    pub fn model_factor(self, world: usize) -> f64 {
        let f = self.bus_factor(world);
        if f > 0.0 { f } else { 1.0 }
    }
}

impl std::fmt::Display for Collective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn minus_one() -> i64 {
    -1
}

/// One measured size of one series (a row of the nccl-tests table).
///
/// Fields the charts and the model need are required; descriptive ones default
/// so that an older or hand-written file still reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Series name in charts, e.g. `reference-shm` or `torch-gloo`.
    pub label: String,
    /// reference | gloo | mpi | nccl | torch.
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
    /// Bus bandwidth in GB/s: the file's value, or computed from the median
    /// when the writer left it out.
    pub fn busbw(&self) -> f64 {
        match self.busbw_gbps {
            Some(b) if b.is_finite() => b,
            _ if self.median_us > 0.0 => {
                self.bytes as f64 / (self.median_us * 1e3) * self.collective.bus_factor(self.world)
            }
            _ => 0.0,
        }
    }

    /// Algorithm bandwidth in GB/s (file value or computed).
    pub fn algbw(&self) -> f64 {
        match self.algbw_gbps {
            Some(b) if b.is_finite() => b,
            _ if self.median_us > 0.0 => self.bytes as f64 / (self.median_us * 1e3),
            _ => 0.0,
        }
    }

    /// Why this record cannot be used, if it cannot.
    fn problem(&self) -> Option<String> {
        if self.label.trim().is_empty() {
            return Some("empty label".into());
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
}

/// One results document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// Provenance: command, versions, host, environment. Kept as free JSON
    /// because the report only displays it and writers add fields over time.
    #[serde(default)]
    pub manifest: serde_json::Value,
    /// The measurements.
    pub records: Vec<Record>,
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
    let parse_err = |source| Error::Parse {
        path: origin.to_path_buf(),
        source,
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
    Ok(file)
}

/// Read, parse and validate one results file.
pub fn read_results(path: &Path) -> Result<ResultsFile> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_results(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_json(extra: &str) -> String {
        format!(
            r#"{{"label":"reference-shm","backend":"reference","collective":"all_reduce",
               "world":2,"bytes":1024,"min_us":1.0,"median_us":2.0,"max_us":4.0{extra}}}"#
        )
    }

    fn doc(records: &str) -> String {
        format!(
            r#"{{"format":"ringside-results/1","manifest":{{"world":2}},"records":[{records}]}}"#
        )
    }

    #[test]
    fn parses_minimal_record_with_defaults() {
        let f = parse_results(&doc(&record_json("")), Path::new("a.json")).unwrap();
        assert_eq!(f.records.len(), 1);
        let r = &f.records[0];
        assert_eq!(r.collective, Collective::AllReduce);
        assert_eq!(r.root, -1);
        assert_eq!(r.wrong, -1);
        assert!(!r.peer);
        // busbw computed: 1024 B / 2 µs = 0.512 GB/s algbw, × 2(2-1)/2 = 1.
        assert!((r.busbw() - 0.512).abs() < 1e-12);
    }

    #[test]
    fn garbled_file_error_names_the_file_and_position() {
        let err = parse_results(
            "{\"format\": \"ringside-results/1\", \"records\": [",
            Path::new("dir/garbled.json"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Parse { .. }), "{msg}");
        assert!(msg.contains("dir/garbled.json"), "{msg}");
        assert!(msg.contains("line 1"), "{msg}");
    }

    #[test]
    fn binary_garbage_is_a_parse_error() {
        let err = parse_results("\u{1}\u{2}PNG", Path::new("x.png")).unwrap_err();
        assert!(matches!(err, Error::Parse { .. }));
    }

    #[test]
    fn other_json_is_wrong_format_not_missing_field() {
        let err =
            parse_results(r#"{"name":"package.json"}"#, Path::new("package.json")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::WrongFormat { .. }), "{msg}");
        assert!(
            msg.contains("package.json") && msg.contains("no \"format\" field"),
            "{msg}"
        );

        let err = parse_results(
            r#"{"format":"ringside-results/2","records":[]}"#,
            Path::new("new.json"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("\"ringside-results/2\""), "{err}");
    }

    #[test]
    fn unknown_collective_is_a_parse_error_naming_the_file() {
        let text = doc(&record_json("").replace("all_reduce", "allreduce"));
        let err = parse_results(&text, Path::new("typo.json")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("typo.json") && msg.contains("allreduce"),
            "{msg}"
        );
    }

    #[test]
    fn invalid_numbers_are_rejected_with_record_index() {
        let bad = record_json("").replace("\"min_us\":1.0", "\"min_us\":3.0");
        let text = doc(&format!("{},{}", record_json(""), bad));
        let err = parse_results(&text, Path::new("order.json")).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, Error::InvalidRecord { index: 1, .. }),
            "{msg}"
        );
        assert!(
            msg.contains("order.json") && msg.contains("out of order"),
            "{msg}"
        );

        // NaN is written as null by serde_json: a required time must not be null.
        let null_median = record_json("").replace("\"median_us\":2.0", "\"median_us\":null");
        assert!(parse_results(&doc(&null_median), Path::new("n.json")).is_err());

        let zero = record_json("").replace("\"bytes\":1024", "\"bytes\":0");
        let err = parse_results(&doc(&zero), Path::new("z.json")).unwrap_err();
        assert!(err.to_string().contains("bytes is 0"), "{err}");
    }

    #[test]
    fn missing_file_is_a_read_error_naming_it() {
        let err = read_results(Path::new("/nonexistent/ringside.json")).unwrap_err();
        assert!(matches!(err, Error::Read { .. }));
        assert!(err.to_string().contains("/nonexistent/ringside.json"));
    }

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(Collective::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Collective::AllGather.bus_factor(4), 0.75);
        assert_eq!(Collective::Broadcast.bus_factor(4), 1.0);
        assert_eq!(Collective::Barrier.bus_factor(4), 0.0);
        assert_eq!(Collective::Barrier.model_factor(4), 1.0);
        // One rank: all_reduce moves nothing, the model still needs a size term.
        assert_eq!(Collective::AllReduce.bus_factor(1), 0.0);
        assert_eq!(Collective::AllReduce.model_factor(1), 1.0);
        for c in Collective::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.name()));
        }
    }
}
