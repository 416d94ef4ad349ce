//! Thin wrappers over Linux `futex(2)` on a `u32` in shared memory.
//!
//! The shared-memory transport sleeps on a per-rank "doorbell" word instead of
//! spinning, so ranks that outnumber cores hand their core to the peer they are
//! waiting for. The futexes are *not* `FUTEX_PRIVATE_FLAG`: the word lives in a
//! `MAP_SHARED` file mapping and waiter and waker may be different processes,
//! which the kernel matches by (inode, offset), not by address.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, for at most `timeout`.
///
/// Returns on a wake, on a timeout, on a signal, or at once when the word no
/// longer holds `expected`; callers cannot tell which and must re-check their
/// condition, which is what makes a lost race harmless.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned u32 for the duration of the call;
    // FUTEX_WAIT only reads it and takes a relative timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread (of any process) sleeping on `word`.
pub(crate) fn wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not access it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
