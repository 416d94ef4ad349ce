//! Lab 13's stretch goal, the file you edit (optional: lab 13 is done when
//! `cargo lab check 13` passes): **ZeRO-3's parameter gather**.
//!
//! Under ZeRO-3 no rank keeps a unit's whole parameters between steps: rank r
//! keeps only its shard (block r of the unit's flat parameters, padded to a
//! multiple of the world size). Before a unit's forward, and again before its
//! backward, every rank needs the whole unit for a moment. This function
//! builds it.
//!
//! **Contract.** `shard` is this rank's shard (every rank's has the same
//! length). Return, on every rank, the unit's whole flat parameters, padding
//! included: `world · shard.numel()` elements, rank r's shard at
//! `r · shard.numel()`, bit for bit; send no more bytes than the cheapest
//! collective that delivers that.
//!
//! **What the check proves** (`cargo lab check 13 --stretch`): the check's
//! MLP (units of 37,680 and 490 parameters, which divide by neither 3 nor 4)
//! is cut into shards as ZeRO-3 cuts it, on 2, 3 and 4 ranks; what your gather
//! returns must equal the unsharded model's parameters exactly, on every rank;
//! it names a block that holds another rank's shard, shards that never
//! arrived, and a collective that moves twice the bytes.
//!
//! `trainers::comm::{buffer, buffer_mut}` turn tensors into buffers.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use collectives::{Communicator, Input, ReduceOp};
use tch::Tensor;
use trainers::comm::{buffer, buffer_mut};
use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/13-sharded-data-parallel/src/stretch.rs";

// ANCHOR: gather_unit
/// One unit's whole flat parameters, from every rank's `shard`.
pub fn gather_unit(comm: &dyn Communicator, shard: &Tensor) -> Result<Tensor> {
    // TODO(lab 13 stretch): the parameter gather. Stuck? `cargo lab hint 13 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        13,
        "ZeRO-3's parameter gather",
        FILE,
    ))))
}
// ANCHOR_END: gather_unit
