//! The C interface of `shim.cc`: libtorch's autograd hooks, its
//! RecordFunction callbacks, `add_` with `alpha` and the Kineto profiler, which
//! tch 0.24 does not bind. Only [`super::hooks`], [`super::ops`],
//! [`super::add_scaled_`] and [`super::profile`] use it; they give the safe
//! interfaces.

use std::ffi::{CStr, c_char, c_void};

/// Called by the hook of parameter `index` with the context it was registered with.
pub(super) type ReadyFn = extern "C" fn(ctx: *mut c_void, index: usize);

unsafe extern "C" {
    pub(super) fn ringside_ready_hooks(
        tensors: *const *const c_void,
        n: usize,
        f: ReadyFn,
        ctx: *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> *mut c_void;
    pub(super) fn ringside_ready_hooks_free(hooks: *mut c_void);
    pub(super) fn ringside_op_counter_new(err: *mut c_char, err_len: usize) -> *mut c_void;
    pub(super) fn ringside_op_counter_ops(c: *const c_void) -> u64;
    pub(super) fn ringside_op_counter_nodes(c: *const c_void) -> u64;
    pub(super) fn ringside_op_counter_free(c: *mut c_void);
    pub(super) fn ringside_add_scaled_(
        a: *mut c_void,
        b: *const c_void,
        alpha: f64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    pub(super) fn ringside_profiler_start(cuda: i32, err: *mut c_char, err_len: usize) -> i32;
    pub(super) fn ringside_profiler_stop(
        path: *const c_char,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
}

/// Room for the C++ side's error message.
pub(super) const ERR_LEN: usize = 512;

/// The message the C++ side wrote into `buf`.
pub(super) fn message(buf: &[c_char; ERR_LEN]) -> String {
    // SAFETY: the buffer starts zeroed and the C++ side writes at most
    // ERR_LEN - 1 bytes and a terminating zero, so it holds a C string.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    s.to_string_lossy().into_owned()
}
