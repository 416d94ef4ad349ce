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
        // TODO(lab 04): replicate. Contract: afterwards every replica's tensors
        // hold the master's numbers, in the replica's own tensors (its module
        // holds them: a new tensor is invisible to it), on the replica's device.
        // These are trainable leaves: may autograd record this write?
        Err(labkit::todo!(4, "replicate"))
    }
    // ANCHOR_END: replicate

    // ANCHOR: scatter
    /// Cuts `x` along dimension 0 into one piece per device, `ceil(B/N)` rows each
    /// (the last smaller, fewer pieces when B < N), and moves piece `k` to
    /// `devices[k]`.
    fn scatter(&self, x: &Tensor, devices: &[Device]) -> Result<Vec<Tensor>> {
        // TODO(lab 04): scatter. Contract as in the doc comment above: B = 31 rows
        // on 3 devices give pieces of 11, 11 and 9; B = 2 on 3 devices gives two
        // pieces of 1. Is there a tensor method that cuts exactly like that?
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
        // TODO(lab 04): parallel_apply. Contract: one thread per (module, input)
        // pair, all running at once; outputs returned in the inputs' order with
        // each thread's own time; a panic in a thread (libtorch reports errors
        // that way) becomes an `Error`, naming the replica (`panic_message`).
        // libtorch's thread count and grad mode belong to a thread: what must each
        // new thread set before its forward (`inherit_num_threads`)?
        Err(labkit::todo!(4, "parallel_apply"))
    }
    // ANCHOR_END: parallel_apply

    // ANCHOR: gather
    /// Moves `outputs` to `device` and concatenates them along dimension 0, keeping
    /// them in the autograd graph: the loss's gradient must flow back through the
    /// result to each output on its own device.
    fn gather(&self, outputs: &[Tensor], device: Device) -> Result<Tensor> {
        // TODO(lab 04): gather. Contract: one tensor on `device`, the outputs'
        // rows in order, through which the loss's gradient flows back to each
        // output on its own device. What would `detach` or `no_grad` cut?
        Err(labkit::todo!(4, "gather"))
    }
    // ANCHOR_END: gather

    // ANCHOR: reduce
    /// Adds each replica's parameter gradients into the master's: `master[i].grad()
    /// += replicas[k][i].grad()`, on the master's device. A replica's parameter with
    /// no gradient (`!g.defined()`) adds nothing.
    fn reduce(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()> {
        // TODO(lab 04): reduce. Contract: afterwards the master's gradient of
        // each parameter equals the one-device gradient over the whole batch;
        // the loss was computed on the gathered outputs, as a mean over the whole
        // batch. Add the replicas' gradients, or average them? Stuck? `cargo lab
        // hint 4`.
        Err(labkit::todo!(4, "reduce"))
    }
    // ANCHOR_END: reduce
}
