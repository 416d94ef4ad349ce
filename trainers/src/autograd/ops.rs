//! How many ops a piece of code dispatches, and how many autograd nodes its
//! backward passes run: libtorch's RecordFunction callbacks (what its profiler is
//! built on), counted on this thread. The CPU proxy for a GPU step's kernel
//! launches, and the witness that a step runs one backward.

use std::ffi::c_char;

use super::shim;
use crate::{Error, Result};

/// What [`count`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpCount {
    /// Ops dispatched (every `aten::` call, nested ones included).
    pub ops: u64,
    /// Autograd nodes run by backward (`AccumulateGrad` included).
    pub backward_nodes: u64,
}

/// Runs `f` and counts what it dispatched on this thread (and on the autograd
/// threads its backward passes use; work sent to other threads is not counted).
pub fn count<R>(f: impl FnOnce() -> R) -> Result<(R, OpCount)> {
    let mut err = [0 as c_char; shim::ERR_LEN];
    // SAFETY: `err` is a writable buffer of the length given.
    let c = unsafe { shim::ringside_op_counter_new(err.as_mut_ptr(), err.len()) };
    if c.is_null() {
        return Err(Error::Model(format!(
            "cannot count libtorch ops: {}",
            shim::message(&err)
        )));
    }
    let r = f();
    // SAFETY: `c` is the live counter made above on this thread (its callback
    // is this thread's), read and freed here once.
    let n = unsafe {
        let n = OpCount {
            ops: shim::ringside_op_counter_ops(c),
            backward_nodes: shim::ringside_op_counter_nodes(c),
        };
        shim::ringside_op_counter_free(c);
        n
    };
    Ok((r, n))
}
