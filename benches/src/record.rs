//! The one-JSON-line-per-size result format every implementation prints.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One size's result, as printed by rank 0 of a peer or of `ringside sweep`:
///
/// ```json
/// {"impl":"mpi","collective":"all_reduce","world":2,"bytes":1048576,"dtype":"float",
///  "iters":50,"min_us":80.1,"median_us":82.0,"max_us":95.3,"algbw_gbps":12.8,
///  "busbw_gbps":12.8,"wrong":0}
/// ```
///
/// Times are per-iteration maxima over ranks (the slowest rank), then
/// min/median/max over iterations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Who produced it, as the program itself says (`mpi`, `gloo-ring`, ...).
    #[serde(rename = "impl")]
    pub impl_name: String,
    /// Always `all_reduce` here.
    pub collective: String,
    /// Number of ranks.
    pub world: usize,
    /// Message size in bytes (per rank).
    pub bytes: u64,
    /// Element type (`float`).
    pub dtype: String,
    /// Timed iterations.
    pub iters: u64,
    /// Fastest iteration, microseconds.
    pub min_us: f64,
    /// Median iteration, microseconds.
    pub median_us: f64,
    /// Slowest iteration, microseconds.
    pub max_us: f64,
    /// `bytes / median` in GB/s (1e9).
    pub algbw_gbps: f64,
    /// `algbw · 2(n-1)/n` in GB/s.
    pub busbw_gbps: f64,
    /// Elements that differ from the exact expected sum, over all ranks.
    pub wrong: u64,
    /// What the runner launched (e.g. `ringside-shm`); added by the runner,
    /// since a program's own `impl` name need not say which transport it used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// nccl-tests' bus-bandwidth factor for all_reduce: `2(n-1)/n`.
pub fn allreduce_bus_factor(world: usize) -> f64 {
    if world == 0 {
        return 0.0;
    }
    2.0 * (world as f64 - 1.0) / world as f64
}

/// Parses one stdout line. `Ok(None)` for lines that are not result records
/// (log output, other JSON); an error for a line that claims to be a record
/// (a JSON object with `median_us`) but is malformed, so a peer that changes
/// its format is noticed rather than silently dropped.
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
        .map_err(|source| Error::BadRecord {
            line: line.chars().take(200).collect(),
            source,
        })
}

impl Record {
    /// The name to show: the runner's label if set, else the program's.
    pub fn name(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.impl_name)
    }

    /// `bytes / median` in GB/s, computed here rather than read back: the
    /// printed value may be rounded (ringside prints 4 decimals, which is
    /// 0.0000 for small messages).
    pub fn algbw(&self) -> f64 {
        if self.median_us > 0.0 {
            self.bytes as f64 / (self.median_us * 1e-6) / 1e9
        } else {
            0.0
        }
    }

    /// [`Record::algbw`] times `2(n-1)/n`: the busbw tables and ratios use.
    pub fn busbw(&self) -> f64 {
        self.algbw() * allreduce_bus_factor(self.world)
    }

    /// Problems with the numbers themselves: wrong elements, bandwidths that
    /// do not follow from bytes and median (a peer computing them
    /// differently would make the comparison meaningless), unordered times.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.wrong > 0 {
            out.push(format!("{} wrong elements", self.wrong));
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
        let (algbw, busbw) = (self.algbw(), self.busbw());
        // 1% slack, plus the rounding of a median printed with 3 decimals
        // (which matters for sub-microsecond shared-memory latencies), plus
        // the rounding of a bandwidth printed with 4 decimals (ringside's
        // format; tiny at small sizes).
        let tol = 0.01 + 0.0006 / self.median_us;
        let close = |a: f64, b: f64| (a - b).abs() <= tol * b.abs() + 0.00006;
        if !close(self.algbw_gbps, algbw) {
            out.push(format!(
                "algbw {} GB/s but bytes/median gives {algbw:.6}",
                self.algbw_gbps
            ));
        }
        if !close(self.busbw_gbps, busbw) {
            out.push(format!(
                "busbw {} GB/s but algbw*2(n-1)/n gives {busbw:.6}",
                self.busbw_gbps
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MPI_LINE: &str = r#"{"impl":"mpi","collective":"all_reduce","world":2,"bytes":1048576,"dtype":"float","iters":50,"min_us":80.000,"median_us":100.000,"max_us":120.000,"algbw_gbps":10.4858,"busbw_gbps":10.4858,"wrong":0}"#;

    #[test]
    fn parses_peer_line() {
        let r = parse_line(MPI_LINE).unwrap().unwrap();
        assert_eq!(r.impl_name, "mpi");
        assert_eq!(r.world, 2);
        assert_eq!(r.bytes, 1 << 20);
        assert_eq!(r.median_us, 100.0);
        assert_eq!(r.label, None);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
    }

    #[test]
    fn parses_exponent_bandwidths() {
        // %.6g in the peers prints tiny bandwidths with an exponent.
        let line = r#"{"impl":"gloo-ring","collective":"all_reduce","world":2,"bytes":8,"dtype":"float","iters":20,"min_us":73.189,"median_us":97.390,"max_us":4014.507,"algbw_gbps":8.21435e-05,"busbw_gbps":8.21435e-05,"wrong":0}"#;
        let r = parse_line(line).unwrap().unwrap();
        assert!((r.busbw_gbps - 8.21435e-05).abs() < 1e-12);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
    }

    #[test]
    fn ignores_non_records() {
        assert_eq!(parse_line("").unwrap(), None);
        assert_eq!(parse_line("# ringside sweep, world 2").unwrap(), None);
        assert_eq!(parse_line(r#"{"event":"start"}"#).unwrap(), None);
        assert_eq!(parse_line("{not json").unwrap(), None);
    }

    #[test]
    fn malformed_record_is_an_error() {
        let line = MPI_LINE.replace(r#""wrong":0"#, r#""wrong":"zero""#);
        assert!(parse_line(&line).is_err());
    }

    #[test]
    fn ringside_four_decimal_bandwidth_is_consistent() {
        // 8 B in 97.39 us is 8.2e-5 GB/s; printed with {:.4} it reads 0.0001.
        let line = r#"{"impl":"ringside-tcp","collective":"all_reduce","world":2,"bytes":8,"dtype":"f32","iters":50,"min_us":90.000,"median_us":97.390,"max_us":120.000,"algbw_gbps":0.0001,"busbw_gbps":0.0001,"wrong":0}"#;
        let r = parse_line(line).unwrap().unwrap();
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        // Tables use the exact value, not the rounded one.
        assert!((r.busbw() - 8.0 / 97.39e-6 / 1e9).abs() < 1e-12);
    }

    #[test]
    fn label_round_trips_and_is_optional() {
        let mut r = parse_line(MPI_LINE).unwrap().unwrap();
        assert!(!serde_json::to_string(&r).unwrap().contains("label"));
        r.label = Some("mpi".into());
        let back = parse_line(&serde_json::to_string(&r).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn problems_catch_wrong_and_inconsistent_bandwidth() {
        let mut r = parse_line(MPI_LINE).unwrap().unwrap();
        r.wrong = 3;
        r.busbw_gbps = 2.0 * r.algbw_gbps; // as if factor 2 instead of 2(n-1)/n
        let p = r.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("3 wrong"));
        assert!(p[1].contains("busbw"));
    }

    #[test]
    fn bus_factor_matches_nccl_tests() {
        assert_eq!(allreduce_bus_factor(2), 1.0);
        assert_eq!(allreduce_bus_factor(4), 1.5);
        assert_eq!(allreduce_bus_factor(1), 0.0);
    }
}
