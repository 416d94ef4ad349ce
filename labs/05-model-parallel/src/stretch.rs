//! Lab 5's stretch goal, the file you edit (optional: lab 5 is done when
//! `cargo lab check 5` passes): **the 1F1B schedule** (PipeDream-flush, the
//! schedule Megatron-LM trains with).
//!
//! GPipe closed most of the bubble, at a price: every stage runs all `M`
//! forwards before its first backward, so it holds the activations of all `M`
//! micro-batches at once. More micro-batches shrink the bubble and grow that
//! memory. 1F1B keeps GPipe's bubble and caps the memory: a stage starts a
//! micro-batch's backward as soon as its gradient can be there, and from then
//! on runs one forward, then one backward, then one forward…
//!
//! **Contract.** As the exercise's schedules: stage `stage`'s list (of
//! `stages`) for one step of `micro_batches` micro-batches, holding
//! `Action::Forward(m)` and `Action::Backward(m)` once for every micro-batch,
//! each forward before its backward, in an order that fits the other stages'
//! lists (no stage waits for something its neighbour sends only after waiting
//! for it). On equal stages it idles no more than GPipe, `(S − 1)/(M + S − 1)`,
//! and stage `s` never holds more than `S − s` micro-batches' activations
//! (a forward takes one on, its backward frees it). `micro_batches` may be
//! smaller than `stages`.
//!
//! **To think through.** The last stage can run a micro-batch's backward right
//! after its forward. How many forwards must stage `s` have sent before the
//! first gradient can come back to it, and how many micro-batches is it then
//! holding? When the forwards run out, what is left?
//!
//! **What the check proves** (`cargo lab check 5 --stretch`): on 1 to 4
//! stages with 1 to 8 micro-batches your lists are complete and fit together,
//! replayed on equal stages they idle as GPipe does, and each stage's peak of
//! micro-batches held is at most `S − s` (printed beside GPipe's `M`); then
//! ringside's pipeline trains the MLP with your schedule on 2 and 3 CPU stages,
//! each of 10 SGD steps equal to the unsplit model's (|Δ| ≤ 1e-5). It names a
//! backward before its forward, a warm-up that deadlocks or has the wrong
//! length (which stage, how many), no warm-up at all, and GPipe's order.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use labkit::LabError;
use trainers::pipeline::Action;

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/05-model-parallel/src/stretch.rs";

// ANCHOR: one_f_one_b
/// 1F1B: stage `stage` (of `stages`) warms up with a few forwards, then runs
/// one forward and one backward in turn, then the backwards left over.
pub fn one_f_one_b(
    stage: usize,
    stages: usize,
    micro_batches: usize,
) -> Result<Vec<Action>, LabError> {
    // TODO(lab 05 stretch): 1F1B. Stuck? `cargo lab hint 5 --stretch`.
    Err(labkit::stretch_todo(5, "the 1F1B schedule", FILE))
}
// ANCHOR_END: one_f_one_b
