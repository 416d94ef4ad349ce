//! Lab 3, the file you edit: Hogwild!, parameters in shared memory.
//!
//! The program starts N worker processes (itself, re-run). The parent has mapped one
//! shared-memory region and made `shared`: one tensor per model parameter, same
//! shape, whose numbers *are* the region's bytes. Every worker maps the same region
//! and gets its own `shared` tensors over it. Three pieces are yours:
//!
//! 1. `fill` (parent): put the model's initial numbers into the region;
//! 2. `attach` (each worker): make the model's parameters use the region's numbers;
//! 3. `update` (each worker, after `backward`): the SGD step, in place, no lock.
//!
//! Everything else (the region, the processes, Fashion-MNIST, the model, the loop,
//! the loss curve) is trainers' real Hogwild, which calls your pieces through its
//! `hogwild::Pieces` seam: [`YourPieces`] implements it. Check with
//! `cargo lab check 3`, run with `cargo lab 3`.

// Until the TODOs are done the imports and arguments below are unused; delete this
// line when you have finished, and the compiler will tell you what is left over.
#![allow(unused_imports, unused_variables)]

use tch::Tensor;
use trainers::hogwild::Pieces;
use trainers::{Error, Result};

/// Your pieces, as trainers' Hogwild runs them.
#[derive(Debug, Clone, Copy, Default)]
pub struct YourPieces;

impl Pieces for YourPieces {
    // ANCHOR: fill
    /// In the parent, before the workers start: copy every parameter's numbers
    /// into its shared tensor (`params[i]` into `shared[i]`).
    fn fill(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        // TODO(lab 03): fill. Contract: afterwards `shared[i]` holds the numbers
        // of `params[i]`, written into the region (the `shared` tensors' own
        // memory), and the parameters are unchanged. This is not a training
        // step: should autograd see it?
        Err(labkit::todo!(3, "fill"))
    }
    // ANCHOR_END: fill

    // ANCHOR: attach
    /// In each worker: make every parameter use its shared tensor's numbers, so
    /// that what the update writes lands in the region, where every worker sees
    /// it.
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        // TODO(lab 03): attach. Contract: afterwards `params[i]` and `shared[i]`
        // are the same numbers, not equal numbers: a write to one is seen by the
        // other, and by every worker. `params[i]` must stay the tensor the model
        // and its optimizer hold. A copy gives equal numbers: what gives the same?
        Err(labkit::todo!(3, "attach"))
    }
    // ANCHOR_END: attach

    // ANCHOR: update
    /// In each worker, after `loss.backward()`: one SGD step `p ← p − lr·∇p` on
    /// every parameter, in place, without any lock; then zero the gradients.
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()> {
        // TODO(lab 03): update. Contract: p ← p − lr·∇p for every parameter with
        // a gradient, written into p's own memory (so into the region), outside
        // autograd; then the gradients are zero. What would `p - lr * g`, a new
        // tensor, leave in the region? And what happens if another worker writes
        // the same numbers at the same moment? Stuck? `cargo lab hint 3`.
        Err(labkit::todo!(3, "update"))
    }
    // ANCHOR_END: update
}
