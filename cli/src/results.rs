//! Results files (format `ringside-results/1`, documented in the book's
//! benchmarking chapter): a manifest and one record per measured size and form.

use std::path::PathBuf;

use anyhow::Context;
use collectives::bench::Measurement;
use collectives::{Collective, DType, ReduceOp};
use serde_json::{Value, json};

/// The short dtype names results files use.
pub fn dtype_key(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "u8",
    }
}

/// The collective names results files use (`send_recv` where tables and
/// errors say nccl-tests' `sendrecv`).
pub fn collective_key(c: Collective) -> &'static str {
    match c {
        Collective::SendRecv => "send_recv",
        c => c.name(),
    }
}

/// A results-file record (format: `ringside-results/1`).
pub fn record(label: &str, backend: &str, algo: &str, m: &Measurement) -> Value {
    json!({
        "label": label,
        "backend": backend,
        "algo": algo,
        "peer": false,
        "collective": collective_key(m.collective),
        "world": m.world,
        "bytes": m.bytes,
        "count": m.count,
        "dtype": dtype_key(m.dtype),
        "op": m.op.map_or("none", ReduceOp::name),
        "root": m.root.map_or(-1, |r| r as i64),
        "in_place": m.in_place,
        "iters": m.iters,
        "min_us": m.min_us,
        "median_us": m.median_us,
        "mean_us": m.mean_us,
        "p99_us": m.p99_us,
        "max_us": m.max_us,
        "algbw_gbps": m.algbw_gbps(),
        "busbw_gbps": m.busbw_gbps(),
        "wrong": m.wrong.map_or(-1, |w| w as i64),
    })
}

/// The results file, written whole (temporary file + rename) after every
/// size, so a crash or Ctrl-C never leaves a torn file behind.
pub struct Results {
    /// Where to write (`None`: keep in memory only, e.g. on ranks other than 0).
    pub path: Option<PathBuf>,
    /// The manifest.
    pub manifest: Value,
    /// The records so far.
    pub records: Vec<Value>,
}

impl Results {
    /// Adds a record and rewrites the file.
    pub fn push(&mut self, r: Value) -> anyhow::Result<()> {
        self.records.push(r);
        self.write()
    }
    /// Writes the whole file (temporary file, then rename).
    pub fn write(&self) -> anyhow::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let doc = json!({
            "format": "ringside-results/1",
            "manifest": self.manifest,
            "records": self.records,
        });
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(())
    }
}
