//! The checks that DDP trains like one process, shared by trainers' tests and
//! the workshop's lab 7 (whose learner plugs a [`GradSync`] in).
//!
//! Ranks are threads, each with its own reference-backend communicator over
//! shared memory, its own VarStore and its own optimizer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use collectives::transport::TransportKind;
use tch::nn::{self, ModuleT};
use tch::{Device, Tensor};

use super::{Ddp, DdpOptions, GradSync};
use crate::data::Dataset;
use crate::parity::{Equivalence, copies, load, max_diff, reference_sgd, snapshot, worst};
use crate::thread_ranks::with_data_ranks;
use crate::traffic::{Counted, Metered, Traffic};
use crate::{Error, Result, models};

/// `world` ranks with batch `b` each against one process with batch
/// `world · b`, `steps` SGD steps from the same start (only rank 0 starts
/// from it: the others start from their own random parameters, which the
/// constructor's broadcast must replace). Rank r's batch is rows r·b..(r+1)·b
/// of each global batch of `data` (which needs `world · b · steps` rows).
///
/// The one process accumulates its step's gradient over the same `world`
/// pieces of `b` rows, each loss divided by `world`: the gradient of the mean
/// over `world · b` rows, computed on the same shapes as the ranks' forwards.
/// One forward on all rows would be the same mathematics but not the same
/// rounding: libtorch's CPU sgemm picks its kernel by row count, and a ReLU or
/// max-pool input within rounding of its kink then takes the other branch,
/// which training amplifies by a CPU-dependent amount. With equal shapes what
/// is left is the order of the gradient average: exact for 2 ranks (halving
/// is exact), one rounding per step for 3.
pub fn equivalence(
    world: usize,
    b: usize,
    steps: usize,
    data: &Dataset,
    sync: Arc<dyn GradSync>,
    opts: DdpOptions,
) -> Result<Equivalence> {
    let need = (world * b * steps) as i64;
    if data.labels.size()[0] < need {
        return Err(Error::InvalidArgument(format!(
            "the equivalence check needs {need} rows, the data has {}",
            data.labels.size()[0]
        )));
    }
    tch::set_num_threads(1);
    let init = crate::seed::seeded(1234, || {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = models::cnn().build(&vs.root());
        snapshot(&vs)
    });
    let want = single_process(&init, data, world, b, steps)?;
    let moved = max_diff(&want, &init)?;
    let start = Mutex::new(Some(copies(&init)));
    let got = with_data_ranks(world, data, opts.timeout, |rank, comm, data| {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        if rank == 0 {
            let init = start.lock().ok().and_then(|mut s| s.take());
            load(&vs, &init.unwrap_or_default())?;
        }
        let mut ddp = Ddp::with_sync(model, &vs, comm, opts.clone(), sync.clone())?;
        let mut opt = reference_sgd(&vs)?;
        for s in 0..steps {
            let (x, y) = data.rows(s * world * b + rank * b, b)?;
            opt.zero_grad();
            let _ = ddp.forward_backward(&x, |logits| logits.cross_entropy_for_logits(&y))?;
            opt.step();
        }
        Ok(snapshot(&vs))
    })?;
    let mut max = 0f64;
    for g in got {
        max = worst(max, max_diff(&g?, &want)?);
    }
    Ok(Equivalence {
        max_diff: max,
        moved,
    })
}

/// The all_reduce calls of each optimizer step of `world` ranks that
/// accumulate gradients over `k` micro-batches of `b` rows (the first k − 1
/// inside [`Ddp::no_sync`]), for `steps` steps, and the bucket count: one
/// round of all-reduces per step, one call per bucket, is what DDP promises.
pub fn all_reduces_per_step(
    world: usize,
    k: usize,
    b: usize,
    steps: usize,
    data: &Dataset,
    sync: Arc<dyn GradSync>,
    opts: DdpOptions,
) -> Result<(Vec<usize>, usize)> {
    tch::set_num_threads(1);
    let got = with_data_ranks(world, data, opts.timeout, |rank, comm, data| {
        let traffic = Traffic::new();
        let comm = Box::new(Metered::new(comm, traffic.clone()));
        let vs = nn::VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        let mut ddp = Ddp::with_sync(model, &vs, comm, opts.clone(), sync.clone())?;
        let mut opt = reference_sgd(&vs)?;
        let mut per_step = Vec::with_capacity(steps);
        for s in 0..steps {
            let before = traffic.calls(Counted::AllReduce);
            opt.zero_grad();
            for m in 0..k {
                let from = ((s * world + rank) * k + m) * b;
                let (x, y) = data.rows(from, b)?;
                let loss = |l: &Tensor| l.cross_entropy_for_logits(&y) / k as f64;
                if m + 1 < k {
                    let _ = ddp.no_sync(|d| d.forward_backward(&x, loss))?;
                } else {
                    let _ = ddp.forward_backward(&x, loss)?;
                }
            }
            opt.step();
            per_step.push((traffic.calls(Counted::AllReduce) - before) as usize);
        }
        Ok((per_step, ddp.bucket_bytes().len()))
    })?;
    got.into_iter()
        .next()
        .unwrap_or_else(|| Err(Error::InvalidArgument("no ranks".into())))
}

fn single_process(
    init: &[(String, Tensor)],
    data: &Dataset,
    world: usize,
    b: usize,
    steps: usize,
) -> Result<Vec<(String, Tensor)>> {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = models::cnn().build(&vs.root());
    load(&vs, init)?;
    let mut opt = reference_sgd(&vs)?;
    for s in 0..steps {
        opt.zero_grad();
        for p in 0..world {
            let (x, y) = data.rows((s * world + p) * b, b)?;
            let loss = model.forward_t(&x, true).cross_entropy_for_logits(&y) / world as f64;
            loss.f_backward()?;
        }
        opt.step();
    }
    Ok(snapshot(&vs))
}

/// What [`compression`] measured, the worst over the ranks.
#[derive(Debug, Clone, Copy)]
pub struct Compression {
    /// Largest |Δ| between the compressed mean and the f32 mean.
    pub max_diff: f64,
    /// Largest |gradient| any rank started from.
    pub max_grad: f64,
    /// Payload bytes of the compressed all-reduce calls (one rank).
    pub wire_bytes: u64,
    /// Payload bytes the same gradients take as f32.
    pub f32_bytes: u64,
}

/// Each of `world` thread ranks averages the same `len` random gradients of
/// magnitude about `scale` (rank r's own seed) twice: with [`Standard`](super::Standard)
/// (f32, `ReduceOp::Avg`) and with `sync`, whose all-reduce calls are metered.
/// An error from `sync` on any rank is the result.
pub fn compression(
    world: usize,
    sync: Arc<dyn GradSync>,
    len: i64,
    scale: f64,
) -> Result<Compression> {
    let out = collectives::thread_ranks::with_ranks(
        world,
        TransportKind::Shm,
        Duration::from_secs(30),
        |rank, comm| -> Result<Compression> {
            let traffic = Traffic::new();
            let comm = Metered::new(Box::new(comm), traffic.clone());
            let g = crate::seed::seeded(rank as i64 + 1, || {
                Tensor::f_randn([len], tch::kind::FLOAT_CPU)
            })? * scale;
            let mut exact = g.copy();
            super::Standard.all_reduce_mean(&comm, &mut exact)?;
            let f32_bytes = traffic.bytes(Counted::AllReduce);
            let mut small = g.copy();
            sync.all_reduce_mean(&comm, &mut small)?;
            let diff = small.f_sub(&exact)?.f_abs()?.f_max()?;
            Ok(Compression {
                max_diff: diff.f_double_value(&[])?,
                max_grad: g.f_abs()?.f_max()?.f_double_value(&[])?,
                wire_bytes: traffic.bytes(Counted::AllReduce) - f32_bytes,
                f32_bytes,
            })
        },
    )?;
    let mut worst: Option<Compression> = None;
    for r in out {
        let c = r?;
        worst = Some(match worst {
            None => c,
            Some(w) => Compression {
                // NaN (an unchecked overflow) must not hide behind max().
                max_diff: if c.max_diff.is_nan() || c.max_diff > w.max_diff {
                    c.max_diff
                } else {
                    w.max_diff
                },
                max_grad: w.max_grad.max(c.max_grad),
                wire_bytes: w.wire_bytes.max(c.wire_bytes),
                f32_bytes: w.f32_bytes.max(c.f32_bytes),
            },
        });
    }
    worst.ok_or_else(|| Error::InvalidArgument("no ranks".into()))
}
