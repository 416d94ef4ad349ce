//! Ctrl-C, SIGTERM and SIGHUP while ranks run: the launcher stops its ranks
//! cleanly (SIGTERM, grace, SIGKILL) instead of dying and leaving them.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use super::exit::signal_name;
use crate::error::{Error, Result};

/// Number of `spawn` calls supervising right now.
static SUPERVISING: AtomicUsize = AtomicUsize::new(0);
/// The last interrupt signal received while supervising (0: none).
pub(super) static PENDING: AtomicI32 = AtomicI32::new(0);
/// Interrupts received while supervising; a second one skips the grace period.
pub(super) static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(sig: libc::c_int) {
    // Only async-signal-safe work here: atomics, signal(), raise().
    if SUPERVISING.load(Ordering::SeqCst) > 0 {
        PENDING.store(sig, Ordering::SeqCst);
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    } else {
        // Not launching anything: behave as if no handler were installed,
        // so a rank that shares the launcher's code still dies on SIGTERM.
        // SAFETY: signal() and raise() are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

/// Makes SIGINT (Ctrl-C), SIGTERM and SIGHUP stop the ranks of a running
/// [`super::spawn`] cleanly (SIGTERM, grace period, SIGKILL; exit code 128 +
/// signal) instead of killing the launcher outright. Outside a `spawn`
/// these signals keep their default effect. Call it once, early in a
/// launcher's `main`; calling it again does nothing. The library never
/// installs it by itself.
pub fn install_interrupt_handler() -> Result<()> {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
        // we set a handler that only touches atomics and async-signal-safe
        // calls, and pass valid pointers.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            INSTALLED.store(false, Ordering::SeqCst);
            return Err(Error::io(
                format!("installing a handler for {}", signal_name(sig)),
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// Counts this thread as supervising while alive (also on early return).
pub(super) struct Supervising;

impl Supervising {
    pub(super) fn start() -> Supervising {
        PENDING.store(0, Ordering::SeqCst);
        INTERRUPTS.store(0, Ordering::SeqCst);
        SUPERVISING.fetch_add(1, Ordering::SeqCst);
        Supervising
    }
}

impl Drop for Supervising {
    fn drop(&mut self) {
        SUPERVISING.fetch_sub(1, Ordering::SeqCst);
    }
}
