//! Hogwild!: several processes train one set of parameters that lives in shared
//! memory, each updating it whenever it likes, without locks (PyTorch's
//! `model.share_memory()` + `torch.multiprocessing` example).
//!
//! The parent builds a model (an MLP or the CNN), puts its trainable parameters in
//! one shared-memory region, and starts `workers` copies of a program (its own
//! executable, re-run with [`ENV_ROLE`] set; see [`WorkerProgram`] and
//! [`worker_from_env`]). Each worker maps the region, points its model's parameters
//! at it (`Tensor::from_blob` + `set_data`, so the SGD update writes straight into the
//! shared pages), trains on its shard of Fashion-MNIST (or of a small synthetic set,
//! for tests) and counts its steps and the sum of its batch losses in its own slot of
//! the region's header. The parent samples those slots while it waits (the loss
//! curve of [`HogwildReport::curve`]), then evaluates the shared parameters.
//!
//! Putting the parameters in the region and the lock-free update are a seam,
//! [`Pieces`]: [`run_with`] and [`worker_from_env_with`] take a learner's version
//! (lab 3), [`run`] and [`worker_from_env`] trainers' own ([`Reference`]).
//!
//! PyTorch's two sharing strategies are both here ([`Sharing`]):
//!
//! * **file descriptor** (`file_descriptor`, PyTorch's default on Linux): the region
//!   is an anonymous `memfd_create` file. A worker connects to the parent over a Unix
//!   socket in the abstract namespace (no file either) and receives the descriptor as
//!   `SCM_RIGHTS` ancillary data; the parent checks with `SO_PEERCRED` that the peer
//!   is one of its workers. Nothing can leak: the memory goes away when the last
//!   process holding the descriptor or a mapping ends, however it ends.
//! * **file system** (`file_system`): the region is a named file,
//!   `/dev/shm/ringside-hogwild-<parent pid>-<n>`, that workers open by name. The
//!   parent unlinks it as soon as every worker has attached (or died), and on any exit
//!   path of [`run`]. If the parent itself is killed before that, the file stays: the
//!   next [`run`] (or [`remove_stale_shm`]) removes every such file whose owner pid is
//!   no longer alive.
//!
//! A worker killed mid-run (tests use [`KillWorker`] to SIGKILL one) is reported by
//! the parent with its signal and the number of steps it had done; its updates up to
//! then stay in the shared parameters.
//!
//! Region layout: a 64-byte header (`magic`, total length, parameter count, worker
//! count), one 64-byte slot per worker (attached pid, steps done, the sum of its batch
//! losses as `f64` bits: atomics, each slot on its own cache line), then the `f32`
//! parameters in name order.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

use crate::data::{self, Dataset, Split};
use crate::models::{self, Arch, MlpConfig};
use crate::train::cross_entropy;
use crate::{Error, Result};

mod check;
mod config;
mod curve;
mod fd_passing;
mod local_steps;
mod pieces;
mod region;
mod stale;
mod workers;

pub use check::{PiecesChecked, check_pieces};
pub use config::{HogwildConfig, KillWorker, Sharing};
use curve::*;
use fd_passing::*;
pub use local_steps::push_delta;
pub use pieces::{Pieces, Reference};
use region::*;
use stale::*;
pub use stale::{owner_pid, remove_stale_in, remove_stale_shm};
use workers::*;

/// Set (to the worker's rank) in a worker's environment: "you are a Hogwild worker".
pub const ENV_ROLE: &str = "RINGSIDE_HOGWILD_WORKER";
/// The run's [`HogwildConfig`], encoded by [`HogwildConfig::encode`].
pub const ENV_CONFIG: &str = "RINGSIDE_HOGWILD_CONFIG";
/// The shared-memory file name (file system) or abstract socket name (descriptor).
pub const ENV_SHARED: &str = "RINGSIDE_HOGWILD_SHARED";
/// The parent's pid: a worker stops if its parent is gone.
pub const ENV_PARENT: &str = "RINGSIDE_HOGWILD_PARENT";
/// Where named shared-memory files live (what `shm_open` uses on Linux).
pub const SHM_DIR: &str = "/dev/shm";
/// The start of every shared-memory file and socket name of this module.
pub const SHM_PREFIX: &str = "ringside-hogwild-";

const MAGIC: u64 = u64::from_le_bytes(*b"RSHOGWLD");
const SLOT: usize = 64;
/// The most workers a region has slots for.
pub const MAX_WORKERS: usize = 256;

/// The program the parent starts as workers: usually its own executable, whose
/// `main` calls [`worker_from_env`] first. A test binary passes libtest arguments
/// that select a test which does the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerProgram {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl WorkerProgram {
    /// This process's executable, without arguments.
    pub fn current_exe() -> Result<WorkerProgram> {
        Ok(WorkerProgram {
            program: std::env::current_exe().map_err(|e| os("finding this executable", e))?,
            args: Vec::new(),
        })
    }

    /// This process's executable with `args`.
    pub fn current_exe_with<I, S>(args: I) -> Result<WorkerProgram>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut l = WorkerProgram::current_exe()?;
        l.args = args.into_iter().map(Into::into).collect();
        Ok(l)
    }
}

/// How one worker process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOutcome {
    /// Its rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// Whether it attached to the shared memory (wrote its pid into its slot).
    pub attached: bool,
    /// Steps it counted in shared memory.
    pub steps: u64,
    /// `None`: exited with status 0; else what went wrong ("killed by signal 9
    /// (SIGKILL)", "exited with code 101", "did not finish in time").
    pub failure: Option<String>,
    /// The end of its standard error.
    pub stderr_tail: String,
}

/// One sample of a run's training loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossPoint {
    /// Seconds since the region was created (the workers' start-up included).
    pub seconds: f64,
    /// Steps all workers had done by then.
    pub steps: u64,
    /// Mean batch loss of the steps done since the previous sample, over all
    /// workers (each worker adds its batch loss to its slot after every step).
    pub loss: f64,
}

/// What a [`run`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct HogwildReport {
    /// One per worker, by rank.
    pub workers: Vec<WorkerOutcome>,
    /// Mean loss of the initial parameters on the evaluation set
    /// ([`HogwildConfig::eval_set`]).
    pub initial_loss: f64,
    /// Mean loss of the shared parameters after the workers ended.
    pub final_loss: f64,
    /// Accuracy (0..=1) of the shared parameters after the workers ended.
    pub final_accuracy: f64,
    /// Examples in the evaluation set.
    pub evaluated_on: usize,
    /// The training loss as the workers went, sampled by the parent every
    /// [`HogwildConfig::sample_every`].
    pub curve: Vec<LossPoint>,
    /// Trainable scalars shared.
    pub parameters: usize,
    /// The largest change of any shared parameter.
    pub max_change: f64,
    /// The named file used (file system sharing), already removed.
    pub shm_path: Option<PathBuf>,
    /// The region's name: its file in [`SHM_DIR`] (file system sharing) or its
    /// abstract socket's name (descriptor sharing, where no file is ever made).
    pub region_name: String,
    /// Stale files of dead parents removed before starting.
    pub stale_removed: Vec<PathBuf>,
    /// From creating the region to the last worker's end.
    pub elapsed: Duration,
}

impl HogwildReport {
    /// The report if every worker finished, else an error describing each failure.
    pub fn into_result(self) -> Result<HogwildReport> {
        let failures: Vec<String> = self
            .workers
            .iter()
            .filter_map(|w| {
                w.failure.as_ref().map(|f| {
                    let tail = w.stderr_tail.trim();
                    let tail = if tail.is_empty() {
                        String::new()
                    } else {
                        format!("; its stderr ended with: {tail}")
                    };
                    format!(
                        "worker {} (pid {}) {f} after {} steps{tail}",
                        w.rank, w.pid, w.steps
                    )
                })
            })
            .collect();
        if failures.is_empty() {
            Ok(self)
        } else {
            Err(Error::Worker(failures.join("; ")))
        }
    }
}

/// Runs a Hogwild training: creates the shared parameters, starts the workers with
/// `launcher`, waits for them, evaluates. Fails if any worker failed.
pub fn run(config: &HogwildConfig, launcher: &WorkerProgram) -> Result<HogwildReport> {
    run_with(config, launcher, &Reference)
}

/// [`run`] with other [`Pieces`] (the workers must use the same ones: see
/// [`worker_from_env_with`]).
pub fn run_with(
    config: &HogwildConfig,
    launcher: &WorkerProgram,
    pieces: &dyn Pieces,
) -> Result<HogwildReport> {
    run_report_with(config, launcher, pieces)?.into_result()
}

/// [`run`], but returns the report even when workers failed (errors only for what
/// stops the parent itself).
pub fn run_report(config: &HogwildConfig, launcher: &WorkerProgram) -> Result<HogwildReport> {
    run_report_with(config, launcher, &Reference)
}

/// [`run_report`] with other [`Pieces`].
pub fn run_report_with(
    config: &HogwildConfig,
    launcher: &WorkerProgram,
    pieces: &dyn Pieces,
) -> Result<HogwildReport> {
    config.validate()?;
    let stale_removed = remove_stale_shm()?;

    // The parent's copy of the model: initial parameters, then evaluation.
    let vs = nn::VarStore::new(Device::Cpu);
    let model = config.blueprint().build(&vs.root());
    let params = trainable(&vs)?;
    let floats: usize = params.iter().map(|(_, t)| t.numel()).sum();
    let len = params_offset(config.workers) + 4 * floats;
    let data = config.eval_set()?;
    let (initial_loss, _) = evaluate(&model, &data)?;

    let start = Instant::now();
    let name = unique_name();
    let (region, shared, mut named) = match config.sharing {
        Sharing::FileDescriptor => {
            let fd = memfd(len)?;
            let region = Mapping::new(fd.as_raw_fd(), len)?;
            let addr = SocketAddr::from_abstract_name(name.as_bytes())
                .map_err(|e| os("naming the abstract socket", e))?;
            let listener =
                UnixListener::bind_addr(&addr).map_err(|e| os("binding the abstract socket", e))?;
            listener
                .set_nonblocking(true)
                .map_err(|e| os("making the socket non-blocking", e))?;
            (region, Shared::Fd { fd, listener }, None)
        }
        Sharing::FileSystem => {
            let (file, guard) = create_named(&name, len)?;
            let region = Mapping::new(file.as_raw_fd(), len)?;
            (region, Shared::Named, Some(guard))
        }
    };
    let mut shared = Some(shared);
    region.init(config.workers, floats)?;
    {
        let (names, tensors) = split_names(&params);
        let views = region.param_views(&params)?;
        pieces.fill(&tensors, &views)?;
        pieces::check_filled(&names, &tensors, &views)?;
    }
    let initial: Vec<Tensor> = tch::no_grad(|| {
        params
            .iter()
            .map(|(_, p)| {
                let mut copy = p.f_empty_like()?;
                copy.f_copy_(p)?;
                Ok(copy)
            })
            .collect::<Result<_>>()
    })?;

    let mut children = Children::spawn(config, launcher, &name)?;
    let deadline = start + config.timeout;
    let mut timed_out = false;
    let mut curve = LossCurve::new(start, config.sample_every);
    loop {
        children.poll();
        curve.sample(&region, config.workers, false)?;
        if let Some(Shared::Fd { fd, listener }) = &shared {
            serve_descriptors(listener, &mut children, fd.as_raw_fd(), len);
        }
        let all_attached_or_gone =
            (0..config.workers).all(|r| region.attached(r).unwrap_or(0) != 0 || children.exited(r));
        if all_attached_or_gone {
            // Nobody else will open the memory by name or ask for its descriptor.
            if let Some(guard) = named.as_mut() {
                guard.unlink()?;
            }
            shared = None;
        }
        if children.all_exited() {
            break;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            children.kill_all();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let elapsed = start.elapsed();
    curve.sample(&region, config.workers, true)?;
    drop(shared);
    if let Some(guard) = named.as_mut() {
        guard.unlink()?;
    }

    // Read the shared parameters back into the parent's model.
    tch::no_grad(|| -> Result<()> {
        for (view, (_, p)) in region.param_views(&params)?.into_iter().zip(&params) {
            p.shallow_clone().f_copy_(&view)?;
        }
        Ok(())
    })?;
    let (final_loss, final_accuracy) = evaluate(&model, &data)?;
    let mut max_change: f64 = 0.0;
    for ((_, p), p0) in params.iter().zip(&initial) {
        let d = p.f_sub(p0)?.f_abs()?.f_max()?.f_double_value(&[])?;
        // NaN (diverged) must show, and f64::max would drop it.
        if d.is_nan() || d > max_change {
            max_change = d;
        }
    }
    let workers = children.outcomes(&region, timed_out)?;
    Ok(HogwildReport {
        workers,
        initial_loss,
        final_loss,
        final_accuracy,
        evaluated_on: data.len(),
        curve: curve.points,
        parameters: floats,
        max_change,
        shm_path: named.map(|g| g.path.clone()),
        region_name: name,
        stale_removed,
        elapsed,
    })
}

/// What one worker did.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerReport {
    /// Its rank.
    pub rank: usize,
    /// Steps done.
    pub steps: usize,
    /// The loss of its last batch.
    pub last_loss: f64,
}

/// In a process started by [`run`] ([`ENV_ROLE`] set): attaches to the shared
/// memory, trains, and returns `Some(report)`; the caller should then exit (with a
/// failure status on error). In any other process: `None`, and nothing happens.
pub fn worker_from_env() -> Option<Result<WorkerReport>> {
    worker_from_env_with(&Reference)
}

/// [`worker_from_env`] with other [`Pieces`] (the parent's, see [`run_with`]).
pub fn worker_from_env_with(pieces: &dyn Pieces) -> Option<Result<WorkerReport>> {
    let rank = std::env::var(ENV_ROLE).ok()?;
    Some(worker(&rank, pieces))
}

fn worker(rank: &str, pieces: &dyn Pieces) -> Result<WorkerReport> {
    let env = |key: &str| {
        std::env::var(key).map_err(|_| Error::InvalidArgument(format!("{key} is not set")))
    };
    let rank: usize = rank
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("{ENV_ROLE}={rank} is not a rank")))?;
    let config = HogwildConfig::decode(&env(ENV_CONFIG)?)?;
    let name = env(ENV_SHARED)?;
    let parent: i32 = env(ENV_PARENT)?
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("{ENV_PARENT} is not a pid")))?;
    if rank >= config.workers {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} of {} workers",
            config.workers
        )));
    }
    // Die with the parent rather than train on as an orphan. The parent may have
    // died before the call: then our parent is already someone else.
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; getppid cannot fail.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    if unsafe { libc::getppid() } != parent {
        return Err(Error::Worker(format!("parent {parent} is gone")));
    }
    let kill_after = config
        .kill_worker
        .filter(|k| k.rank == rank)
        .map(|k| k.after_steps);
    if kill_after == Some(0) {
        kill_self();
    }

    let region = match config.sharing {
        Sharing::FileDescriptor => {
            let (fd, len) = receive_descriptor(&name, rank, config.timeout)?;
            Mapping::new(fd.as_raw_fd(), len)?
            // `fd` closes here; the mapping keeps the memory.
        }
        Sharing::FileSystem => {
            let path = Path::new(SHM_DIR).join(&name);
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
            let len = file
                .metadata()
                .map_err(|source| Error::Io { path, source })?
                .len() as usize;
            Mapping::new(file.as_raw_fd(), len)?
        }
    };
    tch::set_num_threads(1);
    // The model, the views into the region and the optimizer must go before the
    // region is unmapped: they live in this inner function.
    let report = train_worker(&config, rank, &region, kill_after, pieces)?;
    drop(region);
    Ok(report)
}

fn train_worker(
    config: &HogwildConfig,
    rank: usize,
    region: &Mapping,
    kill_after: Option<usize>,
    pieces: &dyn Pieces,
) -> Result<WorkerReport> {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = config.blueprint().build(&vs.root());
    let params = trainable(&vs)?;
    region.check(config.workers, params.iter().map(|(_, t)| t.numel()).sum())?;
    let (names, tensors) = split_names(&params);
    let views = region.param_views(&params)?;
    pieces.attach(&tensors, &views)?;
    pieces::check_attached(&names, &tensors, &views)?;
    region
        .slot(rank, 0)?
        .store(u64::from(std::process::id()), Ordering::SeqCst);

    let data = config.train_set()?;
    let shard: Vec<usize> = (rank..data.len()).step_by(config.workers).collect();
    let steps = region.slot(rank, 8)?;
    let loss_sum = region.slot(rank, 16)?;
    let mut sum = 0.0f64;
    let mut last_loss = f64::NAN;
    // Local SGD (k > 1): the parameters leave the region for private copies, which
    // the update trains; every k steps their delta goes into the region.
    let local = config.local_steps > 1;
    let snapshot = if local {
        for (p, copy) in tensors.iter().zip(local_steps::private_copies(&views)?) {
            p.shallow_clone().f_set_data(&copy)?;
        }
        local_steps::private_copies(&views)?
    } else {
        Vec::new()
    };
    for step in 0..config.steps {
        let idx: Vec<usize> = (0..config.batch)
            .map(|j| shard[(step * config.batch + j) % shard.len()])
            .collect();
        let (x, y) = data.batch(&idx)?;
        let loss = cross_entropy(&model.forward_t(&x, true), &y)?;
        loss.f_backward()?;
        pieces.update(&tensors, config.lr)?;
        if local && ((step + 1) % config.local_steps == 0 || step + 1 == config.steps) {
            push_delta(&views, &tensors, &snapshot)?;
        }
        last_loss = loss.f_double_value(&[])?;
        // Only this worker writes its slot; the loss sum goes first, so a parent that
        // reads the step count first never sees a step without its loss.
        sum += last_loss;
        loss_sum.store(sum.to_bits(), Ordering::SeqCst);
        steps.fetch_add(1, Ordering::SeqCst);
        if kill_after == Some(step + 1) {
            kill_self();
        }
    }
    Ok(WorkerReport {
        rank,
        steps: config.steps,
        last_loss,
    })
}

/// Fault injection: SIGKILL, exactly what an OOM killer or `kill -9` does (no
/// destructors, no clean-up).
fn kill_self() {
    // SAFETY: raise only sends a signal to this process.
    unsafe {
        libc::raise(libc::SIGKILL);
    }
}

fn os(what: &str, source: io::Error) -> Error {
    Error::Os {
        what: what.to_owned(),
        source,
    }
}

/// The trainable variables in name order: the layout of the shared parameters.
/// A model with buffers (batch-norm statistics) is refused: they would not be shared.
fn trainable(vs: &nn::VarStore) -> Result<Vec<(String, Tensor)>> {
    let (mut v, buffers): (Vec<(String, Tensor)>, Vec<_>) = vs
        .variables()
        .into_iter()
        .partition(|(_, t)| t.requires_grad());
    if let Some((name, _)) = buffers.first() {
        return Err(Error::InvalidArgument(format!(
            "the model has a buffer ({name}) that Hogwild would not share"
        )));
    }
    v.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(v)
}

/// Names and tensors apart, as [`Pieces`] takes them.
fn split_names(params: &[(String, Tensor)]) -> (Vec<String>, Vec<Tensor>) {
    params
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .unzip()
}

/// Mean loss and accuracy of `model` on `data`, in batches of 1,000 (the CNN's
/// activations for all 10,000 test images at once would take ~0.5 GB).
fn evaluate(model: &models::Stage, data: &Dataset) -> Result<(f64, f64)> {
    let n = data.len();
    let (mut loss, mut correct) = (0.0, 0.0);
    tch::no_grad(|| -> Result<()> {
        for start in (0..n).step_by(1000) {
            let len = 1000.min(n - start) as i64;
            let x = data.images.f_narrow(0, start as i64, len)?;
            let y = data.labels.f_narrow(0, start as i64, len)?;
            let logits = model.forward_t(&x, false);
            loss += cross_entropy(&logits, &y)?.f_double_value(&[])? * len as f64;
            correct += crate::train::accuracy(&logits, &y)? * len as f64;
        }
        Ok(())
    })?;
    Ok((loss / n as f64, correct / n as f64))
}

#[cfg(test)]
mod tests;
