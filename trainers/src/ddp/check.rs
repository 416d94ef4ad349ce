//! The checks that DDP trains like one process, shared by trainers' tests and
//! the workshop's lab 7 (whose learner plugs a [`GradSync`] in).
//!
//! Ranks are threads, each with its own reference-backend communicator over
//! shared memory, its own VarStore and its own optimizer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use collectives::Communicator;
use collectives::transport::TransportKind;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Tensor};

use super::{Ddp, DdpOptions, GradSync};
use crate::data::Dataset;
use crate::traffic::{Counted, Metered, Traffic};
use crate::{Error, Result, models};

/// Learning rate of the checks' SGD (momentum 0.9): large enough that 10
/// steps move every parameter well beyond the tolerance.
pub const LR: f64 = 0.05;

/// What an equivalence check measured (this module's [`equivalence`], and
/// the ZeRO and SyncBatchNorm checks').
#[derive(Debug, Clone, Copy)]
pub struct Equivalence {
    /// Largest |Δ| between any rank's parameters and the reference run's.
    pub max_diff: f64,
    /// Largest |Δ| between the reference run's parameters and the start: a
    /// check that moved nothing would prove nothing.
    pub moved: f64,
}

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
        let mut opt = sgd(&vs)?;
        for s in 0..steps {
            let (x, y) = rows(&data, s * world * b + rank * b, b)?;
            opt.zero_grad();
            let _ = ddp.forward_backward(&x, |logits| logits.cross_entropy_for_logits(&y))?;
            opt.step();
        }
        Ok(snapshot(&vs))
    })?;
    let mut max = 0f64;
    for g in got {
        max = max.max(max_diff(&g?, &want)?);
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
        let mut opt = sgd(&vs)?;
        let mut per_step = Vec::with_capacity(steps);
        for s in 0..steps {
            let before = traffic.calls(Counted::AllReduce);
            opt.zero_grad();
            for m in 0..k {
                let from = ((s * world + rank) * k + m) * b;
                let (x, y) = rows(&data, from, b)?;
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
    let mut opt = sgd(&vs)?;
    for s in 0..steps {
        opt.zero_grad();
        for p in 0..world {
            let (x, y) = rows(data, (s * world + p) * b, b)?;
            let loss = model.forward_t(&x, true).cross_entropy_for_logits(&y) / world as f64;
            loss.f_backward()?;
        }
        opt.step();
    }
    Ok(snapshot(&vs))
}

/// The equivalence checks' optimizer: libtorch's SGD, momentum 0.9, rate
/// [`LR`].
pub fn sgd(vs: &nn::VarStore) -> Result<nn::Optimizer> {
    Ok(nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(vs, LR)?)
}

fn rows(data: &Dataset, from: usize, n: usize) -> Result<(Tensor, Tensor)> {
    let (from, n) = (from as i64, n as i64);
    Ok((
        data.images.f_narrow(0, from, n)?,
        data.labels.f_narrow(0, from, n)?,
    ))
}

fn copies(v: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    v.iter().map(|(n, t)| (n.clone(), t.copy())).collect()
}

fn load(vs: &nn::VarStore, params: &[(String, Tensor)]) -> Result<()> {
    let vars = vs.variables();
    tch::no_grad(|| {
        for (n, t) in params {
            let v = vars
                .get(n)
                .ok_or_else(|| Error::Model(format!("no variable {n}")))?;
            v.shallow_clone().f_copy_(t)?;
        }
        Ok(())
    })
}

/// Copies of `vs`'s variables, sorted by name (the map order is per process).
pub fn snapshot(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<_> = vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The largest |a − b| over two [`snapshot`]s of the same model.
pub fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> Result<f64> {
    let mut max = 0f64;
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        if na != nb {
            return Err(Error::Model(format!("{na} against {nb}")));
        }
        max = max.max(ta.f_sub(tb)?.f_abs()?.f_max()?.f_double_value(&[])?);
    }
    Ok(max)
}

/// `body(rank, comm, data)` on `world` thread ranks (reference backend over
/// shared memory, every wait bounded by `timeout`, at most 60 s), each with its
/// own handle on `data` (a `Tensor` is `Send` but not `Sync`).
pub fn with_data_ranks<T: Send>(
    world: usize,
    data: &Dataset,
    timeout: Duration,
    body: impl Fn(usize, Box<dyn Communicator>, Dataset) -> Result<T> + Sync,
) -> Result<Vec<Result<T>>> {
    let handles = Mutex::new(
        (0..world)
            .map(|_| Some(data.shallow_clone()))
            .collect::<Vec<_>>(),
    );
    // Below DDP's own bound, so a lost peer fails in the communicator first.
    let timeout = timeout.min(Duration::from_secs(60));
    Ok(collectives::thread_ranks::with_ranks(
        world,
        TransportKind::Shm,
        timeout,
        |rank, comm| {
            let data = handles.lock().ok().and_then(|mut h| h[rank].take());
            let data = data.ok_or_else(|| Error::InvalidArgument("no data handle".into()))?;
            body(rank, Box::new(comm), data)
        },
    )?)
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
            tch::manual_seed(rank as i64 + 1);
            let g = Tensor::f_randn([len], tch::kind::FLOAT_CPU)? * scale;
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
