//! "Queued on the device": the moment a collective on device buffers is ordered
//! before every later kernel on the device's default stream, which comes before
//! the moment it has finished.
//!
//! Every [`Communicator`](crate::Communicator) call returns once the collective
//! is complete, so a caller may read, reuse or free its buffers at once. On a GPU
//! that means the host waits for the device. A caller whose next use of the
//! result is itself device work (DDP copying averaged gradients back, then the
//! optimizer) does not need that wait: work queued on the default stream after the
//! collective is queued already runs after it (the NCCL backend's stream is a
//! blocking one, which the legacy default stream waits for). PyTorch's
//! `ProcessGroupNCCL` gives the same guarantee with `work.wait()`, which makes the
//! current stream wait rather than the host.
//!
//! [`when_queued`] runs a call with a notice that a backend gives as soon as its
//! collective is queued (the NCCL backend, on device buffers, before it waits).
//! The call still returns only when the collective is complete, with its result:
//! the notice lets another thread start the dependent device work meanwhile.
//! Backends whose collectives run on the host never give it.

use std::cell::RefCell;

thread_local! {
    static NOTICE: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

/// Runs `call` on this thread; if a collective inside it is queued on a device
/// before it completes, `notice` runs then, once, on this thread. Returns
/// `call`'s result, and whether the notice ran.
pub fn when_queued<R>(notice: impl FnOnce() + 'static, call: impl FnOnce() -> R) -> (R, bool) {
    /// Clears the notice however `call` ends (a panic included), so that it
    /// never fires for a later, unrelated call.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            NOTICE.with(|n| n.borrow_mut().take());
        }
    }
    NOTICE.with(|n| *n.borrow_mut() = Some(Box::new(notice)));
    let clear = Clear;
    let out = call();
    let pending = NOTICE.with(|n| n.borrow().is_some());
    drop(clear);
    (out, !pending)
}

/// For backends (and test doubles): the collective this thread is running is
/// queued on the device (every later kernel on the default stream runs after
/// it). Runs the notice of [`when_queued`], if any, once, and returns whether
/// one ran: a caller who was told does not wait on the collective's end to
/// go on, so the backend need not watch for it as eagerly.
pub fn queued() -> bool {
    // Taken out before it runs: the notice may itself call into this module.
    match NOTICE.with(|n| n.borrow_mut().take()) {
        Some(notice) => {
            notice();
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_notice_runs_once_when_the_backend_says_queued_and_never_after() {
        let (tx, rx) = mpsc::channel();
        let (out, ran) = when_queued(
            move || tx.send("queued").unwrap(),
            || {
                assert!(queued(), "the first notice runs");
                assert!(!queued(), "and only once");
                7
            },
        );
        assert_eq!((out, ran), (7, true));
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), ["queued"]);
        // A call on the host (no backend notice) reports that none ran, and the
        // leftover notice does not fire for a later call.
        let (tx, rx) = mpsc::channel();
        let ((), ran) = when_queued(move || tx.send(()).unwrap(), || ());
        assert!(!ran);
        queued();
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_call_that_panics_leaves_no_notice_behind() {
        let (tx, rx) = mpsc::channel::<()>();
        let r = std::panic::catch_unwind(|| {
            when_queued(move || tx.send(()).unwrap(), || panic!("learner's bug"))
        });
        assert!(r.is_err());
        queued();
        assert!(rx.try_recv().is_err());
    }
}
