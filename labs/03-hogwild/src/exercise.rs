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
        // TODO(lab 03): for each pair, copy `p` into `s` in place. Tensors are
        // handles: `s.shallow_clone()` gives a mutable handle to the same
        // numbers, and `.f_copy_(p)?` overwrites them. Do it inside
        // `tch::no_grad(|| ...)`: the parameters require gradients, and this copy
        // is not part of training.
        Err(labkit::todo!(3, "fill"))
    }
    // ANCHOR_END: fill

    // ANCHOR: attach
    /// In each worker: make every parameter use its shared tensor's numbers, so
    /// that what the update writes lands in the region, where every worker sees
    /// it.
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        // TODO(lab 03): a copy is not enough (the worker would train a private
        // copy). `p.shallow_clone().f_set_data(s)?` swaps the tensor's storage
        // for `s`'s while `p` stays the same parameter (the model and autograd
        // still use it).
        Err(labkit::todo!(3, "attach"))
    }
    // ANCHOR_END: attach

    // ANCHOR: update
    /// In each worker, after `loss.backward()`: one SGD step `p ← p − lr·∇p` on
    /// every parameter, in place, without any lock; then zero the gradients.
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()> {
        // TODO(lab 03): inside `tch::no_grad`, for every `p`: `let mut g =
        // p.f_grad()?` (skip it when `!g.defined()`), subtract
        // `g.f_mul_scalar(lr)?` from `p` in place (`p.shallow_clone().f_sub_(..)?`),
        // then `g.f_zero_()?`. What happens if another worker writes the same
        // numbers at the same moment?
        Err(labkit::todo!(3, "update"))
    }
    // ANCHOR_END: update
}
