//! Results built in memory for the crate's tests: one record builder and one
//! dataset builder instead of a copy in every test module.

use crate::dataset::Dataset;
use crate::results::{Collective, FORMAT, Record, ResultsFile};

/// A record of `label`'s f32-sum `collective` on `world` ranks at `bytes`,
/// with median `median_us` (min 0.9×, max 1.2× of it). `torch…` labels are
/// peers, as the tour writes them.
pub(crate) fn record(
    label: &str,
    collective: Collective,
    world: usize,
    bytes: u64,
    median_us: f64,
) -> Record {
    Record {
        label: label.into(),
        backend: "reference".into(),
        algo: "auto".into(),
        peer: label.starts_with("torch"),
        collective,
        world,
        bytes,
        count: bytes / 4,
        dtype: "f32".into(),
        op: "sum".into(),
        root: -1,
        in_place: false,
        iters: 10,
        min_us: median_us * 0.9,
        median_us,
        mean_us: None,
        p99_us: None,
        max_us: median_us * 1.2,
        algbw_gbps: None,
        busbw_gbps: None,
        wrong: 0,
    }
}

/// One results file holding `records`.
pub(crate) fn file(records: Vec<Record>) -> ResultsFile {
    ResultsFile {
        format: FORMAT.into(),
        manifest: serde_json::Value::Null,
        records,
        figures: vec![],
    }
}

/// A dataset of one file, `r.json`, holding `records`.
pub(crate) fn dataset(records: Vec<Record>) -> Dataset {
    match Dataset::from_files(vec![("r.json".into(), file(records))]) {
        Ok(ds) => ds,
        Err(e) => panic!("test records do not make a dataset: {e}"),
    }
}
