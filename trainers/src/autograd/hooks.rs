//! Gradient readiness during one backward: a hook per parameter that runs once
//! libtorch's `AccumulateGrad` has written the parameter's `.grad`, as PyTorch's
//! DDP `Reducer` registers them. DDP uses it to start a bucket's all-reduce while
//! the rest of backward still runs, without cutting backward into stages.

use std::ffi::{c_char, c_void};

use tch::Tensor;

use super::shim;
use crate::{Error, Result};

/// What a hook calls: shared by every hook of one [`GradReadyHooks`].
type Sink = Box<dyn Fn(usize) + Send + Sync>;

/// Hooks on some parameters' gradients; dropping it removes them.
pub struct GradReadyHooks {
    /// The C++ hooks (never null).
    hooks: *mut c_void,
    /// The context every hook calls with: a `Box<Sink>` turned into a pointer,
    /// freed after the hooks.
    sink: *mut Sink,
}

// SAFETY: the hooks and the sink are only touched by libtorch's backward (the
// sink is `Send + Sync`) and by `drop`, which removes the hooks first; the
// owner (`Ddp`) drops them only when no backward through them runs.
unsafe impl Send for GradReadyHooks {}

impl std::fmt::Debug for GradReadyHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GradReadyHooks")
    }
}

/// The hooks' entry into Rust. A panic must not unwind into C++ (that aborts
/// the process): it is caught, and the parameter counts as not announced,
/// which leaves its bucket to the launch after backward.
extern "C" fn ready(ctx: *mut c_void, index: usize) {
    // SAFETY: `ctx` is the `*mut Sink` of a live GradReadyHooks: the hooks are
    // removed before the sink is freed.
    let sink = unsafe { &*(ctx as *const Sink) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(index)));
}

impl GradReadyHooks {
    /// Calls `on_ready(i)` whenever a backward has finished accumulating the
    /// gradient of `params[i]` (once per backward that reaches it), on the thread
    /// that runs that part of backward. Every parameter must be a leaf that
    /// requires grad; otherwise nothing is hooked and the error says which.
    ///
    /// `on_ready` runs inside libtorch's backward: it may run tensor ops, but it
    /// must not start another backward while holding a lock that its own next
    /// call would take.
    pub fn register(
        params: &[Tensor],
        on_ready: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<GradReadyHooks> {
        let ptrs: Vec<*const c_void> = params.iter().map(|p| p.as_ptr().cast()).collect();
        let sink: *mut Sink = Box::into_raw(Box::new(Box::new(on_ready) as Sink));
        let mut err = [0 as c_char; shim::ERR_LEN];
        // SAFETY: each pointer is a live `at::Tensor` borrowed from `params`
        // for the whole call (tch's C_tensor is an `at::Tensor*`); `sink` lives
        // until the hooks are removed (see Drop).
        let hooks = unsafe {
            shim::ringside_ready_hooks(
                ptrs.as_ptr(),
                ptrs.len(),
                ready,
                sink.cast(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if hooks.is_null() {
            // SAFETY: nothing was hooked, so nothing else holds `sink`.
            drop(unsafe { Box::from_raw(sink) });
            return Err(Error::Model(format!(
                "cannot hook the parameters' gradients: {}",
                shim::message(&err)
            )));
        }
        Ok(GradReadyHooks { hooks, sink })
    }
}

impl Drop for GradReadyHooks {
    fn drop(&mut self) {
        // SAFETY: `hooks` came from ringside_ready_hooks and is freed once;
        // after it no hook calls `sink`, which is then freed once.
        unsafe {
            shim::ringside_ready_hooks_free(self.hooks);
            drop(Box::from_raw(self.sink));
        }
    }
}

#[cfg(test)]
mod tests;
