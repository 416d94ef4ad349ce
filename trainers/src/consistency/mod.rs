//! Consistency models: how up to date the parameters a worker computes its
//! gradient on must be. Four trainers of the same model on the same data:
//!
//! * [`Consistency::SyncPs`]: a synchronous parameter server. Every worker
//!   pushes its gradient for step t, the server applies their average once all
//!   are in, and every worker pulls the result before step t + 1;
//! * [`Consistency::AsyncPs`]: an asynchronous parameter server. A push is
//!   applied as it arrives (scaled by 1/workers, so a round of pushes moves as
//!   far as one synchronous step), and a worker pulls whatever the parameters
//!   are when it starts a step: nobody waits, and gradients are computed on
//!   parameters other workers have moved since. With
//!   [`Job::staleness_lr`] a push's rate is divided by how many versions old
//!   its parameters are ([`staleness_lr`], lab 11's stretch goal);
//! * [`Consistency::Ddp`]: synchronous decentralized training, each worker a
//!   replica, the gradients averaged by an all-reduce;
//! * [`Consistency::Ssp`]: stale-synchronous decentralized training (Ho et al.
//!   2013, "More Effective Distributed ML via a Stale Synchronous Parallel
//!   Parameter Server"). Each worker keeps a replica and publishes its
//!   gradient of step t to every other; a *round* t is complete when all have.
//!   A worker starting step t first applies every complete round it has not
//!   applied, and may start only while t is at most `staleness` ahead of the
//!   slowest worker's completed steps ([`StalenessBound`], the seam of lab
//!   11). With staleness 0 it waits for every round before its own: the
//!   synchronous trainer, to the bit.
//!
//! The workers are threads of one process. The parameter server and the
//! published gradients are memory the threads share behind a lock (a push or
//! a pull is a copy, not a message), so these trainers compare *when* workers
//! wait, not what a network costs; DDP's all-reduce goes through the
//! communicator. What a network costs is [`sharded_ps`]'s part: a synchronous
//! parameter server whose pushes and pulls are messages, for processes on
//! different hosts. A straggler ([`Straggler`]) sleeps after each step for
//! (slowdown − 1) times the time the step took.

pub mod check;
pub mod network;
pub mod sharded_ps;
pub mod staleness_lr;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use collectives::{Communicator, Input, ReduceOp};
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

use crate::comm::buffer_mut;
use crate::data::Dataset;
use crate::models::{self, MlpConfig};
use crate::thread_ranks::with_data_ranks;
use crate::{Error, Result};
pub use staleness_lr::{StalenessLr, staleness_aware_lr};

/// How up to date the parameters of a gradient must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    /// Synchronous parameter server.
    SyncPs,
    /// Asynchronous parameter server.
    AsyncPs,
    /// Synchronous all-reduce (DDP).
    Ddp,
    /// Stale-synchronous, decentralized, with this bound.
    Ssp {
        /// How many steps a worker may run ahead of the slowest.
        staleness: u64,
    },
}

impl Consistency {
    /// A short name for tables and charts.
    pub fn name(self) -> String {
        match self {
            Consistency::SyncPs => "sync PS".into(),
            Consistency::AsyncPs => "async PS".into(),
            Consistency::Ddp => "DDP (all-reduce)".into(),
            Consistency::Ssp { staleness } => format!("SSP s={staleness}"),
        }
    }
}

/// One worker slower than the others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Straggler {
    /// Which worker.
    pub worker: usize,
    /// How many times slower (≥ 1).
    pub slowdown: f64,
}

/// The staleness bound: the seam of lab 11.
pub trait StalenessBound: Send + Sync {
    /// May a worker that has completed `step` steps start its next one, when
    /// `completed[w]` is how many steps worker w has completed, and workers
    /// may run at most `staleness` steps ahead of the slowest?
    /// (An error stops the training: an unsolved exercise says so.)
    fn may_start(&self, step: u64, completed: &[u64], staleness: u64) -> Result<bool>;
}

/// trainers' own bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bounded;

impl StalenessBound for Bounded {
    // ANCHOR: may_start
    fn may_start(&self, step: u64, completed: &[u64], staleness: u64) -> Result<bool> {
        // The slowest worker has completed `slowest` steps; starting step
        // `step` puts this worker `step − slowest` ahead of it.
        let slowest = completed.iter().copied().min().unwrap_or(step);
        Ok(step <= slowest + staleness)
    }
    // ANCHOR_END: may_start
}

/// What the workers train and how.
#[derive(Clone)]
pub struct Job {
    /// The consistency model.
    pub consistency: Consistency,
    /// Workers.
    pub workers: usize,
    /// Rows per worker per step.
    pub batch: usize,
    /// Steps per worker.
    pub steps: u64,
    /// SGD's learning rate (no momentum: its state would be one more thing
    /// each model keeps differently).
    pub lr: f64,
    /// The MLP's hidden widths.
    pub hidden: Vec<i64>,
    /// A slow worker, if any.
    pub straggler: Option<Straggler>,
    /// Keep the parameters every this many of worker 0's steps, with the time.
    pub snapshot_every: u64,
    /// The bound SSP enforces.
    pub bound: Arc<dyn StalenessBound>,
    /// The longest any wait may last before the training fails (a bound
    /// that never lets anyone start would otherwise wait for ever).
    pub timeout: Duration,
    /// The asynchronous server's learning rate for a stale gradient
    /// ([`staleness_aware_lr`], the seam of lab 11's stretch goal); `None`
    /// applies every push at the same rate, as the trainer always did.
    pub staleness_lr: Option<StalenessLr>,
}

/// A worker starting a step: what the log of [`Trained`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// Which worker.
    pub worker: usize,
    /// The step it started (its completed steps).
    pub step: u64,
    /// The fewest steps any worker had completed at that moment.
    pub slowest: u64,
}

/// A push the asynchronous server applied: what the log of pushes of
/// [`Trained`] holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Push {
    /// Which worker.
    pub worker: usize,
    /// The server's version (pushes applied) the worker read its parameters at.
    pub read: u64,
    /// The server's version when the push was applied.
    pub current: u64,
    /// The learning rate it was applied with.
    pub lr: f64,
}

/// What a training measured.
pub struct Trained {
    /// (seconds since the start, worker 0's view of the parameters), every
    /// [`Job::snapshot_every`] of its steps and at the end.
    pub snapshots: Vec<(f64, Tensor)>,
    /// Every step start, in the order they happened.
    pub log: Vec<Start>,
    /// Every push the asynchronous server applied, in order (empty for the
    /// other trainers).
    pub pushes: Vec<Push>,
    /// Wall time until every worker finished.
    pub seconds: f64,
    /// The parameters at the end (the server's, or worker 0's replica).
    pub params: Tensor,
}

/// What the workers share: the parameter server, the published gradients,
/// the step counts and the log.
struct Shared {
    /// The server's parameters (PS trainers).
    params: Tensor,
    /// Gradients of each round not yet complete: `rounds[t][w]`.
    rounds: Vec<Vec<Option<Tensor>>>,
    /// Complete rounds (their gradients in worker order), kept for the
    /// replicas that have not applied them yet (decentralized trainers).
    complete: Vec<Vec<Tensor>>,
    /// Steps each worker has completed.
    completed: Vec<u64>,
    log: Vec<Start>,
    /// Pushes the asynchronous server has applied: its parameters' version.
    version: u64,
    pushes: Vec<Push>,
}

struct Table {
    state: Mutex<Shared>,
    changed: Condvar,
}

impl Table {
    fn lock(&self) -> Result<MutexGuard<'_, Shared>> {
        self.state
            .lock()
            .map_err(|_| Error::InvalidArgument("a worker panicked".into()))
    }

    /// Waits (at most `timeout`) until `ready` holds.
    fn wait<'a>(
        &'a self,
        mut g: MutexGuard<'a, Shared>,
        timeout: Duration,
        what: &str,
        ready: impl Fn(&Shared) -> Result<bool>,
    ) -> Result<MutexGuard<'a, Shared>> {
        let deadline = Instant::now() + timeout;
        while !ready(&g)? {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::InvalidArgument(format!(
                    "waited {timeout:?} for {what}; steps completed per worker: {:?}",
                    g.completed
                )));
            }
            g = self
                .changed
                .wait_timeout(g, left)
                .map_err(|_| Error::InvalidArgument("a worker panicked".into()))?
                .0;
        }
        Ok(g)
    }
}

/// One synchronous round's update: the average of `grads` (in worker order,
/// so every replica and the server compute the same bits), times `lr`.
fn apply_round(params: &mut Tensor, grads: &[Tensor], lr: f64) -> Result<()> {
    let mut sum = grads
        .first()
        .ok_or_else(|| Error::InvalidArgument("an empty round".into()))?
        .copy();
    for g in &grads[1..] {
        let _ = sum.f_add_(g)?;
    }
    let _ = params.f_sub_(&sum.f_mul_scalar(lr / grads.len() as f64)?)?;
    Ok(())
}

/// Handles on complete rounds, to apply outside the lock (nobody writes a
/// complete round's tensors again).
fn share(rounds: &[Vec<Tensor>]) -> Vec<Vec<Tensor>> {
    rounds
        .iter()
        .map(|r| r.iter().map(Tensor::shallow_clone).collect())
        .collect()
}

/// Flat copy of the model's parameters, in `vs.trainable_variables()` order.
fn flatten(tensors: &[Tensor]) -> Result<Tensor> {
    let parts = tensors
        .iter()
        .map(|t| t.f_reshape([-1]))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Tensor::f_cat(&parts, 0)?)
}

/// Copies `flat` into `vars` (same order and sizes as [`flatten`]).
fn unflatten(flat: &Tensor, vars: &[Tensor]) -> Result<()> {
    tch::no_grad(|| -> Result<()> {
        let mut offset = 0;
        for v in vars {
            let n = v.numel() as i64;
            v.shallow_clone()
                .f_copy_(&flat.f_narrow(0, offset, n)?.f_view(v.size().as_slice())?)?;
            offset += n;
        }
        Ok(())
    })
}

/// The MLP of `hidden`, its parameters from seed 11 (the same start for
/// every trainer), under a lock: libtorch's generator is global.
pub fn model(hidden: &[i64]) -> Result<(nn::VarStore, impl ModuleT)> {
    Ok(crate::seed::seeded(11, || {
        let vs = nn::VarStore::new(Device::Cpu);
        let m = models::mlp(&MlpConfig {
            hidden: hidden.to_vec(),
            ..MlpConfig::default()
        })
        .build(&vs.root());
        (vs, m)
    }))
}

/// `job` on `data` (worker w's step t reads rows `(t·workers + w)·batch`
/// onward, wrapping around).
pub fn train(job: &Job, data: &Dataset) -> Result<Trained> {
    if job.workers == 0 || job.batch == 0 || data.len() < job.batch * job.workers {
        return Err(Error::InvalidArgument(format!(
            "{} workers of {} rows need at least that many rows; the data has {}",
            job.workers,
            job.batch,
            data.len()
        )));
    }
    let (vs, _) = model(&job.hidden)?;
    let start_params = flatten(&vs.trainable_variables())?;
    let table = Table {
        state: Mutex::new(Shared {
            params: start_params.copy(),
            rounds: Vec::new(),
            complete: Vec::new(),
            completed: vec![0; job.workers],
            log: Vec::new(),
            version: 0,
            pushes: Vec::new(),
        }),
        changed: Condvar::new(),
    };
    let timeout = job.timeout;
    let t0 = Instant::now();
    let per_worker = with_data_ranks(job.workers, data, timeout, |w, comm, d| {
        worker(job, &table, w, comm.as_ref(), &d, t0, timeout)
    })?;
    let seconds = t0.elapsed().as_secs_f64();
    let mut snapshots = Vec::new();
    let mut last = None;
    for (w, r) in per_worker.into_iter().enumerate() {
        let (snaps, params) = r?;
        if w == 0 {
            snapshots = snaps;
            last = Some(params);
        }
    }
    let state = table.lock()?;
    let params = match job.consistency {
        Consistency::SyncPs | Consistency::AsyncPs => state.params.copy(),
        _ => last.ok_or_else(|| Error::InvalidArgument("no workers".into()))?,
    };
    Ok(Trained {
        snapshots,
        log: state.log.clone(),
        pushes: state.pushes.clone(),
        seconds,
        params,
    })
}

type Snapshots = Vec<(f64, Tensor)>;

/// One worker's loop; its snapshots (worker 0's) and its final replica.
fn worker(
    job: &Job,
    table: &Table,
    w: usize,
    comm: &dyn Communicator,
    data: &Dataset,
    t0: Instant,
    timeout: Duration,
) -> Result<(Snapshots, Tensor)> {
    let (vs, model) = model(&job.hidden)?;
    let vars = vs.trainable_variables();
    // The decentralized trainers' replica, and how many rounds it holds.
    let mut replica = flatten(&vars)?;
    let mut applied = 0usize;
    let mut snapshots = Vec::new();
    let n = data.len();
    for step in 0..job.steps {
        // 1. Wait where the model says, log the start, read the parameters.
        let mut g = table.lock()?;
        match job.consistency {
            Consistency::SyncPs => {
                g = table.wait(g, timeout, "the server's previous round", |s| {
                    Ok(s.complete.len() as u64 >= step)
                })?;
            }
            Consistency::Ssp { staleness } => {
                g = table.wait(g, timeout, "the slowest worker (staleness bound)", |s| {
                    job.bound.may_start(step, &s.completed, staleness)
                })?;
            }
            Consistency::AsyncPs | Consistency::Ddp => {}
        }
        let slowest = g.completed.iter().copied().min().unwrap_or(0);
        // The version these parameters are (the asynchronous server's).
        let read = g.version;
        g.log.push(Start {
            worker: w,
            step,
            slowest,
        });
        match job.consistency {
            Consistency::SyncPs | Consistency::AsyncPs => unflatten(&g.params, &vars)?,
            Consistency::Ssp { .. } => {
                let rounds = share(&g.complete[applied..]);
                drop(g);
                for r in rounds {
                    apply_round(&mut replica, &r, job.lr)?;
                    applied += 1;
                }
                unflatten(&replica, &vars)?;
                g = table.lock()?;
            }
            Consistency::Ddp => unflatten(&replica, &vars)?,
        }
        drop(g);

        // 2. The gradient on this worker's rows.
        let t_step = Instant::now();
        let start = ((step as usize * job.workers + w) * job.batch) % (n - job.batch + 1);
        let idx: Vec<usize> = (start..start + job.batch).collect();
        let (x, y) = data.batch(&idx)?;
        for v in &vars {
            let mut gr = v.grad();
            if gr.defined() {
                let _ = gr.f_zero_()?;
            }
        }
        let loss = model.forward_t(&x, true).f_cross_entropy_loss::<Tensor>(
            &y,
            None,
            tch::Reduction::Mean,
            -100,
            0.0,
        )?;
        loss.f_backward()?;
        let grad = flatten(&vars.iter().map(|v| v.grad()).collect::<Vec<_>>())?;

        // 3. Send it where the model says.
        match job.consistency {
            Consistency::Ddp => {
                let mut avg = grad.f_to_kind(Kind::Float)?;
                comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut avg)?, ReduceOp::Avg)?;
                let _ = replica.f_sub_(&avg.f_mul_scalar(job.lr)?)?;
            }
            Consistency::AsyncPs => {
                let mut g = table.lock()?;
                let lr = job.lr / job.workers as f64;
                let current = g.version;
                let lr = match job.staleness_lr {
                    Some(scaled) => scaled(lr, current, read)?,
                    None => lr,
                };
                let _ = g.params.f_sub_(&grad.f_mul_scalar(lr)?)?;
                g.version += 1;
                g.pushes.push(Push {
                    worker: w,
                    read,
                    current,
                    lr,
                });
            }
            Consistency::SyncPs | Consistency::Ssp { .. } => {
                let mut g = table.lock()?;
                let t = step as usize;
                while g.rounds.len() + g.complete.len() <= t {
                    g.rounds.push((0..job.workers).map(|_| None).collect());
                }
                let slot = t - g.complete.len();
                g.rounds[slot][w] = Some(grad);
                // Rounds complete in order: the oldest first.
                while g
                    .rounds
                    .first()
                    .is_some_and(|r| r.iter().all(Option::is_some))
                {
                    let round: Vec<Tensor> = g.rounds.remove(0).into_iter().flatten().collect();
                    if job.consistency == Consistency::SyncPs {
                        apply_round(&mut g.params, &round, job.lr)?;
                    }
                    g.complete.push(round);
                }
            }
        }
        if let Some(s) = job.straggler.filter(|s| s.worker == w && s.slowdown > 1.0) {
            std::thread::sleep(t_step.elapsed().mul_f64(s.slowdown - 1.0));
        }
        let mut g = table.lock()?;
        g.completed[w] += 1;
        if w == 0 && (step + 1) % job.snapshot_every.max(1) == 0 {
            let view = match job.consistency {
                Consistency::SyncPs | Consistency::AsyncPs => g.params.copy(),
                _ => replica.copy(),
            };
            snapshots.push((t0.elapsed().as_secs_f64(), view));
        }
        drop(g);
        table.changed.notify_all();
    }
    // A decentralized replica catches up with the rounds it has not applied.
    if let Consistency::Ssp { .. } = job.consistency {
        let g = table.wait(table.lock()?, timeout, "the last rounds", |s| {
            Ok(s.completed.iter().all(|&c| c == job.steps))
        })?;
        let rounds = share(&g.complete[applied..]);
        drop(g);
        for r in rounds {
            apply_round(&mut replica, &r, job.lr)?;
        }
    }
    Ok((snapshots, replica))
}

/// Test accuracy of `params` (a [`Trained`] snapshot) on `test`.
pub fn accuracy(hidden: &[i64], params: &Tensor, test: &Dataset) -> Result<f64> {
    let (vs, model) = model(hidden)?;
    unflatten(params, &vs.trainable_variables())?;
    let mut tally = crate::train::Tally::new();
    let n = test.len();
    for from in (0..n).step_by(1000) {
        let rows: Vec<usize> = (from..(from + 1000).min(n)).collect();
        let (x, y) = test.batch(&rows)?;
        let logits = tch::no_grad(|| model.forward_t(&x, false));
        tally.add_batch(&logits, &y)?;
    }
    Ok(tally.accuracy())
}
