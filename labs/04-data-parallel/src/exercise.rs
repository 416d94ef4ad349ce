//! Lab 4, the file you edit: the five pieces of PyTorch's `nn.DataParallel`.
//!
//! One process, several devices (GPUs, or CPU replicas run by threads). Each
//! training step `trainers::data_parallel::DataParallel` calls your pieces in this
//! order: **replicate** the master's weights onto the other replicas, **scatter**
//! the batch, **parallel_apply** (each replica's forward on its own thread),
//! **gather** the outputs onto the first device, where the loss and its backward
//! run, then each replica's backward on its thread, and **reduce** the replicas'
//! gradients onto the master's, which the optimizer steps. Everything around
//! your pieces is trainers' real step, which runs them through its
//! `data_parallel::Pieces` seam: [`YourPieces`] implements it.
//!
//! Check it with `cargo lab check 4`, run it with `cargo lab 4`.

// Until the TODOs are done the imports and arguments below are unused; delete this
// line when you have finished, and the compiler will tell you what is left over.
#![allow(unused_imports, unused_variables)]

use std::time::{Duration, Instant};

use tch::nn::ModuleT;
use tch::{Device, Tensor};
use trainers::data_parallel::{Pieces, inherit_num_threads, panic_message};
use trainers::models::Stage;
use trainers::{Error, Result};

/// Your pieces, as trainers' `DataParallel` runs them.
#[derive(Debug, Clone, Copy, Default)]
pub struct YourPieces;

impl Pieces for YourPieces {
    // ANCHOR: replicate
    /// Makes every replica's tensors equal to the master's: `replicas[k][i]` becomes a
    /// copy of `master[i]` (same variable, maybe another device). `replicas` holds
    /// replicas 1, 2, ... (replica 0 *is* the master).
    fn replicate(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()> {
        // TODO(lab 04): copy each master tensor into the replica's tensor *in place*
        // (`dst.shallow_clone().f_copy_(src)?` copies across devices too), so the
        // replica's module, which holds the same tensor, sees the new values. Do it
        // inside `tch::no_grad(|| ...)`: these are trainable leaves, and autograd
        // refuses an in-place change to a leaf that requires grad.
        Err(labkit::todo!(4, "replicate"))
    }
    // ANCHOR_END: replicate

    // ANCHOR: scatter
    /// Cuts `x` along dimension 0 into one piece per device, `ceil(B/N)` rows each
    /// (the last smaller, fewer pieces when B < N), and moves piece `k` to
    /// `devices[k]`.
    fn scatter(&self, x: &Tensor, devices: &[Device]) -> Result<Vec<Tensor>> {
        // TODO(lab 04): `x.f_chunk(n, 0)?` cuts exactly like that; `f_to_device(d)?`
        // moves a piece (on CPU replicas it is free).
        Err(labkit::todo!(4, "scatter"))
    }
    // ANCHOR_END: scatter

    // ANCHOR: parallel_apply
    /// Runs `modules[k]` on `inputs[k]`, each pair on its own thread, and returns
    /// every output with the time its thread spent, in order.
    ///
    /// `train`: `forward_t(&x, true)` with autograd recording; otherwise
    /// `forward_t(&x, false)` inside `tch::no_grad`. Autograd's grad mode belongs to a
    /// thread, so the thread itself has to switch it off.
    fn parallel_apply(
        &self,
        modules: Vec<&mut Stage>,
        inputs: Vec<Tensor>,
        train: bool,
    ) -> Result<Vec<(Tensor, Duration)>> {
        // TODO(lab 04): in `std::thread::scope(|s| ...)`, spawn one thread per
        // (module, input) pair with `s.spawn(move || ...)`, then join them all, in
        // order. In each thread, first `inherit_num_threads(threads)` with `threads =
        // tch::get_num_threads()` read before spawning (libtorch's thread count is per
        // thread), then time the forward with `Instant::now()` / `elapsed()`.
        // A libtorch error inside `forward_t` is a panic in that thread: `join()`
        // returns it as `Err(payload)`; turn it into an error
        // (`Error::Worker(format!("replica {k}: {}", panic_message(payload.as_ref())))`).
        Err(labkit::todo!(4, "parallel_apply"))
    }
    // ANCHOR_END: parallel_apply

    // ANCHOR: gather
    /// Moves `outputs` to `device` and concatenates them along dimension 0, keeping
    /// them in the autograd graph: the loss's gradient must flow back through the
    /// result to each output on its own device.
    fn gather(&self, outputs: &[Tensor], device: Device) -> Result<Tensor> {
        // TODO(lab 04): `f_to_device` each output, then `Tensor::f_cat(&moved, 0)?`.
        // Both are differentiable (a move's backward moves the gradient back), so no
        // `no_grad` and no `detach` here.
        Err(labkit::todo!(4, "gather"))
    }
    // ANCHOR_END: gather

    // ANCHOR: reduce
    /// Adds each replica's parameter gradients into the master's: `master[i].grad()
    /// += replicas[k][i].grad()`, on the master's device. A replica's parameter with
    /// no gradient (`!g.defined()`) adds nothing.
    fn reduce(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()> {
        // TODO(lab 04): inside `tch::no_grad`, for every replica and parameter `i`:
        // `let g = replicas[k][i].f_grad()?;` and, if defined, add it (moved to the
        // master's device) into `master[i].f_grad()?` with `f_add_` (the master's
        // `grad()` is a handle on its gradient, so adding in place updates it). Why a
        // sum and not a mean? What does the loss already average over?
        Err(labkit::todo!(4, "reduce"))
    }
    // ANCHOR_END: reduce
}
