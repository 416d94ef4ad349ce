//! Single-process data parallelism with PyTorch's `nn.DataParallel` semantics, one
//! step at a time so that each of its costs can be seen:
//!
//! 1. **replicate**: the module on the first device is the master; every other device
//!    holds a replica whose parameters are overwritten from the master's
//!    ([`Replication::Copy`], PyTorch's `Broadcast` of the parameters to each GPU), or
//!    share the master's storage ([`Replication::Share`], possible when all replicas
//!    live on one device, e.g. CPU replicas);
//! 2. **scatter**: the batch is cut along dimension 0 with `chunk` (as `scatter` does:
//!    `ceil(B/N)` rows each, the last smaller, fewer replicas used if `B < N`) and each
//!    piece moved to its replica's device;
//! 3. **parallel apply**: one thread per replica runs its forward;
//! 4. **gather**: the outputs are moved to the first device and concatenated; the loss
//!    is computed there on the whole batch;
//! 5. **backward**: the gradient of the loss with respect to each replica's output
//!    (gather's backward is a scatter) goes back to the replica, whose thread runs its
//!    part of the backward pass;
//! 6. **reduce**: the replicas' parameter gradients are summed onto the master's
//!    (replica 0 *is* the master, so its gradients are already in place), and the
//!    optimizer steps the master's parameters.
//!
//! With a loss that averages over the batch, the summed gradients equal the single
//! device's gradient of the same batch, up to float rounding: [`check::equivalence`]
//! (the tests' and lab 4's one check) compares each of 10 SGD steps with the
//! one-device step from the same parameters.
//!
//! Replicate, scatter, parallel apply, gather and reduce go through the [`Pieces`]
//! seam ([`Standard`] by default, [`DataParallel::with_pieces`] to plug in another
//! implementation: lab 4's exercise).
//!
//! On CPU the "devices" are N replicas on the CPU, each run by its own thread: the
//! arithmetic is the same as on N GPUs, only the copies are cheap (and the threads
//! share the cores, so it is no faster).
//!
//! **Batch norm caveat** (PyTorch behaves the same): in training mode each replica
//! normalises its chunk with the chunk's own statistics, so a model with batch norm is
//! *not* equivalent to one device on the whole batch (`SyncBatchNorm` is the fix), and
//! the running statistics the replicas update are thrown away: they are overwritten
//! from the master's at the next step, so only replica 0 (the master) accumulates them.
//!
//! ```no_run
//! use tch::nn::OptimizerConfig;
//! use trainers::data_parallel::{self, DataParallel, Replication};
//! use trainers::models::{self, MlpConfig};
//! let devices = data_parallel::devices(2); // all GPUs, or 2 CPU replicas
//! let mut dp = DataParallel::new(|| models::mlp(&MlpConfig::default()), &devices, Replication::Copy)?;
//! let mut opt = tch::nn::Sgd::default().build(dp.var_store(), 0.1)?;
//! let data = trainers::data::synthetic(64, 1)?;
//! let t = dp.step(&data.images, &data.labels, data_parallel::cross_entropy, &mut opt)?;
//! println!("loss {:.3}, replicate {:?}, threading {:?}", t.loss_value, t.replicate, t.threading());
//! # Ok::<(), trainers::Error>(())
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tch::nn;
use tch::{Cuda, Device, Tensor};

use crate::autograd::backward_with_grad;
use crate::models::{Blueprint, Stage};
use crate::{Error, Result};

pub mod check;
mod pieces;

pub use pieces::{Pieces, Standard};
// The learner's threads in lab 4 call these through this module.
pub use crate::threads::{inherit_num_threads, panic_message};
pub use crate::train::{LossFn, cross_entropy};

/// The devices to replicate over: every CUDA device when there is one, otherwise
/// `cpu_replicas` CPU replicas (at least one).
pub fn devices(cpu_replicas: usize) -> Vec<Device> {
    let gpus = if Cuda::is_available() {
        Cuda::device_count().max(0) as usize
    } else {
        0
    };
    if gpus > 0 {
        (0..gpus).map(Device::Cuda).collect()
    } else {
        vec![Device::Cpu; cpu_replicas.max(1)]
    }
}

/// How replicas get the master's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Replication {
    /// Each replica has its own parameter tensors, overwritten from the master's before
    /// every step: what PyTorch's `replicate` does across GPUs. Works for any devices.
    Copy,
    /// The replicas' trainable parameters share the master's storage (set once, when
    /// the replicas are made), so a step copies only the buffers (batch-norm running
    /// statistics). Needs every replica on the master's device: CPU replicas.
    /// Correct because the forward only reads the parameters and the optimizer updates
    /// them in place, which every replica then sees.
    Share,
}

/// Where one training step's time went, as seen from the calling thread.
///
/// The three overheads of data parallelism are [`replicate`](Self::replicate),
/// [`scatter_gather`](Self::scatter_gather) and [`threading`](Self::threading); the
/// gradient [`reduce`](Self::reduce) is the price of keeping one master copy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimings {
    /// Replicas used this step (fewer than the devices when the batch is smaller).
    pub replicas: usize,
    /// Copying the master's parameters and buffers to the replicas.
    pub replicate: Duration,
    /// Cutting the batch and moving the pieces to the devices.
    pub scatter: Duration,
    /// Moving the outputs to the first device and concatenating them.
    pub gather: Duration,
    /// From starting the forward threads to having joined them all.
    pub forward_wall: Duration,
    /// Each replica thread's own forward time.
    pub forward_busy: Vec<Duration>,
    /// The loss on the gathered outputs and its backward down to each replica's
    /// output (through gather's backward, which moves each output's gradient back to
    /// its device: a few KiB of logits' gradients, not worth its own bar).
    pub loss: Duration,
    /// From starting the backward threads to having joined them all.
    pub backward_wall: Duration,
    /// Each replica thread's own backward time.
    pub backward_busy: Vec<Duration>,
    /// Summing the replicas' gradients onto the master's.
    pub reduce: Duration,
    /// The optimizer's step (and zeroing the gradients before the step).
    pub optimizer: Duration,
    /// The whole step.
    pub total: Duration,
    /// The loss value of this step (before the update).
    pub loss_value: f64,
}

impl StepTimings {
    /// Scatter plus gather.
    pub fn scatter_gather(&self) -> Duration {
        self.scatter + self.gather
    }

    /// Time spent on threads rather than in them: for the forward and the backward,
    /// the wall time of the parallel section minus its slowest thread's own time
    /// (spawning, waking and joining threads, and waiting for a core).
    pub fn threading(&self) -> Duration {
        let over = |wall: Duration, busy: &[Duration]| {
            wall.saturating_sub(busy.iter().copied().max().unwrap_or_default())
        };
        over(self.forward_wall, &self.forward_busy) + over(self.backward_wall, &self.backward_busy)
    }

    /// The slowest replica's forward plus the slowest replica's backward: the compute
    /// on the critical path.
    pub fn compute(&self) -> Duration {
        let max = |d: &[Duration]| d.iter().copied().max().unwrap_or_default();
        max(&self.forward_busy) + max(&self.backward_busy)
    }
}

/// One replica: a built module on a device. Replica 0 is the master's own module.
#[derive(Debug)]
struct Replica {
    device: Device,
    module: Stage,
    /// The replica's own VarStore; `None` for replica 0, whose variables are the master's.
    _vs: Option<nn::VarStore>,
}

/// A model replicated over several devices of one process, trained one step at a time.
#[derive(Debug)]
pub struct DataParallel {
    replication: Replication,
    vs: nn::VarStore,
    /// The master's trainable parameters, in name order.
    master_params: Vec<Tensor>,
    /// For replicas 1, 2, ...: their trainable parameters, in the master's order.
    replica_params: Vec<Vec<Tensor>>,
    /// The master's tensors that replicate copies every step: the parameters (with
    /// [`Replication::Copy`]), then the buffers, in name order.
    master_synced: Vec<Tensor>,
    /// For replicas 1, 2, ...: their tensors matching `master_synced`.
    replica_synced: Vec<Vec<Tensor>>,
    replicas: Vec<Replica>,
    pieces: Box<dyn Pieces>,
}

impl DataParallel {
    /// Builds the master on `devices[0]` and one replica on each further device, each
    /// from a fresh `blueprint()` (the same architecture every time).
    ///
    /// The same device may appear several times (CPU replicas). [`Replication::Share`]
    /// needs all devices equal.
    pub fn new(
        blueprint: impl Fn() -> Blueprint,
        devices: &[Device],
        replication: Replication,
    ) -> Result<DataParallel> {
        let Some(&first) = devices.first() else {
            return Err(Error::InvalidArgument(
                "data parallel needs at least one device".into(),
            ));
        };
        if replication == Replication::Share && devices.iter().any(|&d| d != first) {
            return Err(Error::InvalidArgument(format!(
                "replication `share` needs every replica on one device, got {devices:?}"
            )));
        }
        let vs = nn::VarStore::new(first);
        let module = blueprint().build(&vs.root());
        let master: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
        let copy_params = replication == Replication::Copy;
        let master_params = master
            .values()
            .filter(|t| t.requires_grad())
            .map(Tensor::shallow_clone)
            .collect();
        let master_synced = master
            .values()
            .filter(|t| copy_params && t.requires_grad())
            .chain(master.values().filter(|t| !t.requires_grad()))
            .map(Tensor::shallow_clone)
            .collect();
        let mut replicas = vec![Replica {
            device: first,
            module,
            _vs: None,
        }];
        let (mut replica_params, mut replica_synced) = (Vec::new(), Vec::new());
        for (k, &device) in devices.iter().enumerate().skip(1) {
            let rvs = nn::VarStore::new(device);
            let module = blueprint().build(&rvs.root());
            let theirs: BTreeMap<String, Tensor> = rvs.variables().into_iter().collect();
            if !theirs.keys().eq(master.keys()) {
                return Err(Error::Model(format!(
                    "replica {k} has variables {:?}, the master {:?}: the blueprint must \
                     build the same model every time",
                    theirs.keys().collect::<Vec<_>>(),
                    master.keys().collect::<Vec<_>>()
                )));
            }
            let (mut params, mut buffers) = (Vec::new(), Vec::new());
            for ((name, m), r) in master.iter().zip(theirs.into_values()) {
                if m.size() != r.size() {
                    return Err(Error::Model(format!(
                        "replica {k}: {name} is {:?}, the master's {:?}",
                        r.size(),
                        m.size()
                    )));
                }
                if m.requires_grad() {
                    let mut r = r;
                    if replication == Replication::Share {
                        // The replica's leaf keeps its own `.grad` but now reads the
                        // master's numbers: no copy per step.
                        r.f_set_data(m)?;
                    }
                    params.push(r);
                } else {
                    buffers.push(r);
                }
            }
            let copied = params.iter().filter(|_| copy_params);
            replica_synced.push(copied.chain(&buffers).map(Tensor::shallow_clone).collect());
            replica_params.push(params);
            replicas.push(Replica {
                device,
                module,
                _vs: Some(rvs),
            });
        }
        Ok(DataParallel {
            replication,
            vs,
            master_params,
            replica_params,
            master_synced,
            replica_synced,
            replicas,
            pieces: Box::new(Standard),
        })
    }

    /// Uses `pieces` for replicate, scatter, parallel apply, gather and reduce
    /// instead of [`Standard`]: lab 4 plugs in the learner's.
    pub fn with_pieces(mut self, pieces: Box<dyn Pieces>) -> DataParallel {
        self.pieces = pieces;
        self
    }

    /// The master's variables under the names PyTorch's `nn.DataParallel` gives them
    /// in its `state_dict()`: each with a `module.` prefix
    /// ([`checkpoint::DDP_PREFIX`](crate::checkpoint::DDP_PREFIX)), because the
    /// wrapper holds the model as its attribute `module`. Saved as they are, they do
    /// not load into the plain model (lab 4's checkpoint gotcha).
    pub fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut named: Vec<(String, Tensor)> = self
            .vs
            .variables()
            .into_iter()
            .map(|(n, t)| (format!("{}{n}", crate::checkpoint::DDP_PREFIX), t))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    }

    /// The master's variables (on the first device): build the optimizer on these,
    /// save and load checkpoints through them.
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// The master's variables, mutably (to load a checkpoint).
    pub fn var_store_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    /// The master's module.
    pub fn module(&self) -> &Stage {
        &self.replicas[0].module
    }

    /// The replicas' devices; the first holds the master.
    pub fn devices(&self) -> Vec<Device> {
        self.replicas.iter().map(|r| r.device).collect()
    }

    /// How replicas get the master's parameters.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// One training step on `(x, y)`: replicate, scatter `x`, parallel forward, gather
    /// to the first device, `loss(outputs, y)` there, backward through every replica in
    /// parallel, sum the gradients onto the master, `opt.step()`.
    ///
    /// `opt` must have been built on [`var_store`](Self::var_store). Gradients are
    /// zeroed here, before the step.
    pub fn step(
        &mut self,
        x: &Tensor,
        y: &Tensor,
        loss: LossFn,
        opt: &mut nn::Optimizer,
    ) -> Result<StepTimings> {
        let start = Instant::now();
        let mut t = StepTimings::default();

        let clock = Instant::now();
        tch::no_grad(|| -> Result<()> {
            for p in &self.master_params {
                zero_grad(p)?;
            }
            for p in self.replica_params.iter().flatten() {
                zero_grad(p)?;
            }
            Ok(())
        })?;
        t.optimizer += clock.elapsed();

        let clock = Instant::now();
        self.replicate()?;
        t.replicate = clock.elapsed();

        let clock = Instant::now();
        let pieces = self.scatter(x)?;
        let first = self.replicas[0].device;
        let y0 = y.f_to_device(first)?;
        t.scatter = clock.elapsed();
        t.replicas = pieces.len();

        let clock = Instant::now();
        let outputs = self.parallel_apply(pieces, true)?;
        t.forward_wall = clock.elapsed();
        let (outputs, busy): (Vec<Tensor>, Vec<Duration>) = outputs.into_iter().unzip();
        t.forward_busy = busy;

        // Each output is cut from its replica's graph by a leaf on the same device:
        // the loss's backward (on this thread) stops at the leaves, and each
        // replica's thread then runs its own part of the backward from its leaf's
        // gradient, in parallel.
        let clock = Instant::now();
        let leaves = outputs
            .iter()
            .map(|o| Ok(o.f_detach()?.f_set_requires_grad(true)?))
            .collect::<Result<Vec<_>>>()?;
        let gathered = self.pieces.gather(&leaves, first)?;
        t.gather = clock.elapsed();

        let clock = Instant::now();
        let l = loss(&gathered, &y0)?;
        l.f_backward()?;
        t.loss_value = l.f_double_value(&[])?;
        let jobs = outputs
            .into_iter()
            .zip(&leaves)
            .enumerate()
            .map(|(k, (out, leaf))| {
                let grad = leaf.f_grad()?;
                if !grad.defined() {
                    return Err(Error::Model(format!(
                        "replica {k}'s output got no gradient from the loss: gather must \
                         keep the outputs in the autograd graph (move and concatenate \
                         them, no detach or no_grad)"
                    )));
                }
                Ok((out, grad))
            })
            .collect::<Result<Vec<_>>>()?;
        t.loss = clock.elapsed();

        let clock = Instant::now();
        let backward = parallel(jobs, "backward", |(out, grad)| {
            backward_with_grad(&out, &grad)
        })?;
        t.backward_wall = clock.elapsed();
        t.backward_busy = backward.into_iter().map(|((), d)| d).collect();

        let clock = Instant::now();
        let used = t.replicas.saturating_sub(1);
        self.pieces
            .reduce(&self.master_params, &self.replica_params[..used])?;
        t.reduce = clock.elapsed();

        let clock = Instant::now();
        opt.step();
        t.optimizer += clock.elapsed();
        t.total = start.elapsed();
        Ok(t)
    }

    /// Inference over the replicas: replicate, scatter, parallel forward in eval mode
    /// without gradients, gather. Returns the outputs on the first device.
    pub fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        self.replicate()?;
        let pieces = self.scatter(x)?;
        let outs = self.parallel_apply(pieces, false)?;
        let outs: Vec<Tensor> = outs.into_iter().map(|(o, _)| o).collect();
        self.pieces.gather(&outs, self.replicas[0].device)
    }

    fn replicate(&self) -> Result<()> {
        self.pieces
            .replicate(&self.master_synced, &self.replica_synced)
    }

    /// Scatters `x` over the devices and checks that the pieces fit them.
    fn scatter(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        let rows = x.size().first().copied().unwrap_or(0);
        if rows == 0 {
            return Err(Error::InvalidArgument(format!(
                "data parallel needs a batch of at least one row, got shape {:?}",
                x.size()
            )));
        }
        let devices = self.devices();
        let pieces = self.pieces.scatter(x, &devices)?;
        let sizes: Vec<i64> = pieces
            .iter()
            .map(|p| p.size().first().copied().unwrap_or(0))
            .collect();
        if pieces.is_empty()
            || pieces.len() > devices.len()
            || sizes.iter().sum::<i64>() != rows
            || pieces.iter().zip(&devices).any(|(p, &d)| p.device() != d)
        {
            return Err(Error::Model(format!(
                "scatter cut {rows} rows into pieces of {sizes:?} rows on {:?}; wanted at \
                 most one piece per device ({devices:?}), each on its device, {rows} rows \
                 in all",
                pieces.iter().map(Tensor::device).collect::<Vec<_>>()
            )));
        }
        Ok(pieces)
    }

    /// Runs the first `pieces.len()` replicas on the pieces, in parallel.
    fn parallel_apply(
        &mut self,
        pieces: Vec<Tensor>,
        train: bool,
    ) -> Result<Vec<(Tensor, Duration)>> {
        let n = pieces.len();
        let modules = self.replicas[..n]
            .iter_mut()
            .map(|r| &mut r.module)
            .collect();
        let outs = self.pieces.parallel_apply(modules, pieces, train)?;
        if outs.len() != n {
            return Err(Error::Model(format!(
                "parallel_apply returned {} outputs for {n} inputs",
                outs.len()
            )));
        }
        Ok(outs)
    }
}

// ANCHOR: parallel
/// Runs `f(job)` for each job on its own scoped thread (job `k` is replica `k`'s) and
/// returns each result with the thread's own time, in order. A panic (tch panics on
/// libtorch errors inside `forward_t`) becomes an error naming the replica.
fn parallel<J: Send, R: Send>(
    jobs: Vec<J>,
    what: &str,
    f: impl Fn(J) -> Result<R> + Sync,
) -> Result<Vec<(R, Duration)>> {
    let f = &f;
    let threads = tch::get_num_threads();
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|job| {
                s.spawn(move || {
                    inherit_num_threads(threads);
                    let clock = Instant::now();
                    let out = f(job)?;
                    Ok((out, clock.elapsed()))
                })
            })
            .collect();
        // Join them all before returning, so no thread outlives an early error.
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        joined
            .into_iter()
            .enumerate()
            .map(|(k, r)| match r {
                Ok(r) => r,
                Err(payload) => Err(Error::Worker(format!(
                    "replica {k} panicked in {what}: {}",
                    panic_message(payload.as_ref())
                ))),
            })
            .collect()
    })
}
// ANCHOR_END: parallel

/// Zeroes a tensor's gradient if it has one (keeping it allocated, unlike
/// `set_to_none`, so that gradients can be added into it in place).
pub(crate) fn zero_grad(t: &Tensor) -> Result<()> {
    let mut g = t.f_grad()?;
    if g.defined() {
        let _ = g.f_zero_()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{self, MlpConfig};
    use tch::nn::{ModuleT, OptimizerConfig};

    fn small_mlp() -> Blueprint {
        models::mlp(&MlpConfig {
            hidden: vec![32],
            ..Default::default()
        })
    }

    /// [`check::equivalence`] of trainers' own pieces on synthetic data (lab 4 runs
    /// the same check on the learner's pieces and Fashion-MNIST); panics with its
    /// verdict.
    fn equivalence(
        bp: fn() -> Blueprint,
        devices: &[Device],
        replication: Replication,
        batch: usize,
        param_tol: f64,
    ) {
        let data = crate::data::synthetic(batch * (check::STEPS + 1), 21).unwrap();
        if let Err(e) = check::equivalence(
            bp,
            Box::new(Standard),
            devices,
            replication,
            &data,
            batch,
            param_tol,
        ) {
            panic!("{e}");
        }
    }

    #[test]
    fn each_step_over_two_and_three_cpu_replicas_equals_the_one_device_step() {
        for n in [2, 3] {
            for replication in [Replication::Copy, Replication::Share] {
                // 30 splits evenly; 31 gives chunks 16+15 and 11+11+9.
                for batch in [30, 31] {
                    equivalence(
                        check::smooth_mlp,
                        &vec![Device::Cpu; n],
                        replication,
                        batch,
                        1e-6,
                    );
                }
            }
        }
    }

    /// The real CNN has ReLU and max-pool, whose gradients jump at a kink or a tie: a
    /// pre-activation within rounding of 0 (or two near-equal pool inputs) may take the
    /// other branch on the replicas. That moves one sample's path through one unit,
    /// at most lr · |input| · |upstream gradient| / batch; 1e-4 covers it (inputs are
    /// in [0, 1] and this model's upstream gradients stay below ~0.1), while a wrong
    /// reduction (a replica's gradient dropped or added twice) moves parameters by
    /// ~lr · |gradient| ≈ 1e-3.
    #[test]
    fn cnn_over_two_cpu_replicas_equals_one_device() {
        equivalence(models::cnn, &[Device::Cpu; 2], Replication::Copy, 16, 1e-4);
    }

    /// A batch smaller than the replica count uses fewer replicas, like `scatter`.
    #[test]
    fn batch_smaller_than_replicas_uses_fewer_replicas() {
        equivalence(
            check::smooth_mlp,
            &[Device::Cpu; 3],
            Replication::Copy,
            2,
            1e-6,
        );
    }

    #[test]
    fn forward_gathers_what_one_device_computes() {
        tch::set_num_threads(1);
        let mut dp = DataParallel::new(small_mlp, &[Device::Cpu; 3], Replication::Copy).unwrap();
        let x = crate::data::synthetic(7, 2).unwrap().images;
        let want = tch::no_grad(|| dp.module().forward_t(&x, false));
        let got = dp.forward(&x).unwrap();
        assert_eq!(got.size(), [7, 10]);
        // Replicas see 3+2+2 rows and libtorch's sgemm picks its kernel by row
        // count, so rows can differ in their last bits from the 7-row batch
        // (`train::evaluate`'s doc): a tolerance relative to the logits' size.
        let scale = want.abs().max().double_value(&[]);
        let diff = (got - want).abs().max().double_value(&[]);
        assert!(
            diff <= 1e-5 * scale,
            "max |Δ| {diff:e}, largest logit {scale:e}"
        );
    }

    #[test]
    fn timings_cover_the_step() {
        tch::set_num_threads(1);
        let mut dp = DataParallel::new(small_mlp, &[Device::Cpu; 2], Replication::Copy).unwrap();
        let mut opt = nn::Sgd::default().build(dp.var_store(), 0.1).unwrap();
        let d = crate::data::synthetic(32, 4).unwrap();
        let t = dp
            .step(&d.images, &d.labels, cross_entropy, &mut opt)
            .unwrap();
        assert_eq!((t.forward_busy.len(), t.backward_busy.len()), (2, 2));
        let parts = t.replicate
            + t.scatter
            + t.gather
            + t.forward_wall
            + t.loss
            + t.backward_wall
            + t.reduce
            + t.optimizer;
        assert!(parts <= t.total, "{parts:?} > {:?}", t.total);
        assert!(t.threading() <= t.forward_wall + t.backward_wall);
        assert!(t.compute() > Duration::ZERO);
    }

    #[test]
    fn share_replication_shares_storage_and_copy_does_not() {
        let share = DataParallel::new(small_mlp, &[Device::Cpu; 2], Replication::Share).unwrap();
        let copy = DataParallel::new(small_mlp, &[Device::Cpu; 2], Replication::Copy).unwrap();
        let (m, r) = (&share.master_params[0], &share.replica_params[0][0]);
        assert_eq!(m.data_ptr(), r.data_ptr());
        let (m, r) = (&copy.master_params[0], &copy.replica_params[0][0]);
        assert_ne!(m.data_ptr(), r.data_ptr());
        // Share copies no parameters per step, Copy copies them all.
        assert!(share.master_synced.is_empty());
        assert_eq!(copy.master_synced.len(), copy.master_params.len());
    }

    #[test]
    fn bad_arguments_are_errors() {
        let e = DataParallel::new(small_mlp, &[], Replication::Copy).unwrap_err();
        assert!(e.to_string().contains("at least one device"), "{e}");
        let n = std::cell::Cell::new(0);
        let e = DataParallel::new(
            || {
                n.set(n.get() + 1);
                models::mlp(&MlpConfig {
                    hidden: vec![8 * n.get()],
                    ..Default::default()
                })
            },
            &[Device::Cpu; 2],
            Replication::Copy,
        );
        assert!(e.is_err(), "different replicas were accepted");
        let mut dp = DataParallel::new(small_mlp, &[Device::Cpu; 2], Replication::Copy).unwrap();
        let e = dp
            .forward(&Tensor::zeros([0, 784], tch::kind::FLOAT_CPU))
            .unwrap_err();
        assert!(e.to_string().contains("at least one row"), "{e}");
        // A wrong input shape makes libtorch throw inside a replica thread: an error,
        // not a crash of the caller.
        let e = dp
            .forward(&Tensor::zeros([4, 5], tch::kind::FLOAT_CPU))
            .unwrap_err();
        assert!(matches!(e, Error::Worker(_)), "{e}");
    }

    #[test]
    fn share_needs_one_device() {
        let e = DataParallel::new(
            small_mlp,
            &[Device::Cpu, Device::Cuda(0)],
            Replication::Share,
        )
        .unwrap_err();
        assert!(e.to_string().contains("one device"), "{e}");
    }

    /// On a machine with 2+ GPUs: the real thing (a visible skip otherwise).
    #[test]
    fn two_gpus_equal_one_device_or_visible_skip() {
        if !Cuda::is_available() || Cuda::device_count() < 2 {
            return collectives::testing::skip(
                "two_gpus_equal_one_device_or_visible_skip",
                "fewer than 2 CUDA devices",
            );
        }
        // GPUs' kernels also block by shape; same smooth model, same bound.
        equivalence(
            check::smooth_mlp,
            &[Device::Cuda(0), Device::Cuda(1)],
            Replication::Copy,
            30,
            1e-6,
        );
    }
}
