//! The conformance suite: every collective × dtype × op × size × in/out-of-place
//! × root, checked exactly against a sequential reference.
//!
//! It runs on any [`Communicator`], so one suite serves every backend: the
//! tests run it on threads and on real processes over each transport, and
//! `ringside conformance` runs it under any launcher (mpirun, torchrun, srun).
//! Inputs are small integers, so float sums and products are exact and results
//! compare bit for bit.

use crate::collective::{self, expected::Case};
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::{Collective, Communicator};

/// What to cover.
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    /// Collectives to run.
    pub collectives: Vec<Collective>,
    /// Element types.
    pub dtypes: Vec<DType>,
    /// Reduction ops (for the reducing collectives).
    pub ops: Vec<ReduceOp>,
    /// Per-rank sizes; [`Size::Bytes`] becomes a count by dtype.
    pub sizes: Vec<Size>,
    /// Also run the in-place forms.
    pub in_place: bool,
}

/// A per-rank message size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// This many elements.
    Count(usize),
    /// `world · k + 1` elements: never divides evenly into per-rank blocks.
    WorldTimes(usize),
    /// This many bytes' worth of elements.
    Bytes(usize),
}

impl Size {
    fn count(self, world: usize, dtype: DType) -> usize {
        match self {
            Size::Count(c) => c,
            Size::WorldTimes(k) => world * k + 1,
            Size::Bytes(b) => b / dtype.size(),
        }
    }
}

impl SuiteConfig {
    /// The full matrix the issue asks for: sizes {0, 1, 7, 1000, world·k+1, 4 MiB}.
    pub fn full() -> Self {
        SuiteConfig {
            collectives: Collective::ALL.to_vec(),
            dtypes: DType::ALL.to_vec(),
            ops: ReduceOp::ALL.to_vec(),
            sizes: vec![
                Size::Count(0),
                Size::Count(1),
                Size::Count(7),
                Size::Count(1000),
                Size::WorldTimes(37),
                Size::Bytes(4 << 20),
            ],
            in_place: true,
        }
    }

    /// A quick subset (tens of milliseconds) for smoke tests and the tour.
    pub fn quick() -> Self {
        SuiteConfig {
            dtypes: vec![DType::F32, DType::I64, DType::BF16],
            ops: vec![ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg],
            sizes: vec![
                Size::Count(0),
                Size::Count(7),
                Size::WorldTimes(37),
                Size::Bytes(64 << 10),
            ],
            ..SuiteConfig::full()
        }
    }
}

/// What a run found.
#[derive(Debug, Default)]
pub struct SuiteReport {
    /// Cases run.
    pub cases: usize,
    /// One line per failing case.
    pub failures: Vec<String>,
    /// Cases the backend declined with [`crate::Error::Unsupported`] (for
    /// example bfloat16 on a library without it), one line each.
    pub unsupported: Vec<String>,
}

/// Runs `collective` once on fresh integer inputs and returns how many
/// elements of this rank's result are wrong (0 when exact). Benchmarks use it
/// for nccl-tests' `#wrong` column; every rank must call it with the same
/// arguments. `count` is the per-rank count of the buffer-shape table in the
/// crate docs.
pub fn check_once(
    comm: &dyn Communicator,
    collective: Collective,
    dtype: DType,
    op: Option<ReduceOp>,
    count: usize,
    in_place: bool,
    root: usize,
) -> Result<usize> {
    let case = Case {
        collective,
        dtype,
        op,
        count,
        in_place,
        root,
        salt: 0,
    };
    Ok(match (collective::of(collective).check)(comm, &case)? {
        Ok(()) => 0,
        Err(w) => w.elements.max(1),
    })
}

/// Runs the suite. A wrong result is recorded and the run goes on; a
/// communicator error stops it (the communicator is unusable afterwards).
/// `progress` is called after every case with (cases done, case name).
pub fn run(
    comm: &dyn Communicator,
    cfg: &SuiteConfig,
    mut progress: impl FnMut(usize, &str),
) -> Result<SuiteReport> {
    let n = comm.world_size();
    let mut report = SuiteReport::default();
    let mut salt = 0;
    for &collective in &cfg.collectives {
        let d = collective::of(collective);
        let ops: Vec<Option<ReduceOp>> = if d.reducing {
            cfg.ops.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        // Without a payload, size and dtype mean nothing: one case.
        let (sizes, dtypes): (&[Size], &[DType]) = if d.payload {
            (&cfg.sizes, &cfg.dtypes)
        } else {
            (&[Size::Count(0)], &[DType::U8])
        };
        for &dtype in dtypes {
            for &op in &ops {
                for &size in sizes {
                    for in_place in [false, true] {
                        if in_place && !(cfg.in_place && d.in_place) {
                            continue;
                        }
                        salt += 1;
                        // Roots other than 0 get most of the coverage; rotate so
                        // every rank is root for some case.
                        let root = if d.rooted { (n - 1 + salt) % n } else { 0 };
                        let case = Case {
                            collective,
                            dtype,
                            op,
                            count: size.count(n, dtype),
                            in_place,
                            root,
                            salt,
                        };
                        let name = case.name();
                        match (d.check)(comm, &case) {
                            Ok(Ok(())) => report.cases += 1,
                            Ok(Err(wrong)) => {
                                report.failures.push(format!("{name}: {wrong}"));
                                report.cases += 1;
                            }
                            // A backend declines a case identically on every
                            // rank, before communicating: record it and go on.
                            Err(crate::Error::Unsupported { what, .. }) => {
                                report.unsupported.push(format!("{name}: {what}"))
                            }
                            Err(e) => return Err(e),
                        }
                        progress(report.cases, &name);
                    }
                }
            }
        }
    }
    Ok(report)
}
