//! How long the calling thread has waited for a CPU: the second field of
//! `/proc/thread-self/schedstat`, the nanoseconds the thread spent runnable on
//! a run queue but not running.
//!
//! That is the sign that the machine has more to run than CPUs: idle, two
//! ranks of a job on a 2-core VM waited 0.4–1.4 % of the time (a store or
//! flight-recorder thread taking a turn); beside two busy loops 44 %
//! (2026-11-29, `ringside bench --transport tcp -b 8 -e 8`, every rank
//! thread's schedstat over 3 s). Read through a descriptor each thread opens
//! once and keeps, with one `pread`: a few microseconds, so callers sample it
//! now and then, not per call.

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;

thread_local! {
    /// This thread's open `schedstat` (closed when the thread ends): `None`
    /// not yet tried, `Some(None)` unreadable here (a kernel without
    /// schedstats, no `/proc`).
    static OWN: RefCell<Option<Option<File>>> = const { RefCell::new(None) };
}

/// What the kernel counted for this thread since it started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counted {
    /// Nanoseconds on a CPU.
    pub(crate) ran_ns: u64,
    /// Nanoseconds runnable but waiting on a run queue.
    pub(crate) waited_ns: u64,
}

/// What the kernel counted for this thread, or `None` where it does not say.
pub(crate) fn counted() -> Option<Counted> {
    OWN.try_with(|own| {
        let mut own = own.borrow_mut();
        let file = own
            .get_or_insert_with(|| File::open("/proc/thread-self/schedstat").ok())
            .as_ref()?;
        let mut buf = [0u8; 96];
        let n = file.read_at(&mut buf, 0).ok()?;
        parse(&buf[..n])
    })
    .ok()
    .flatten()
}

/// A `schedstat` line: "on-CPU-ns waiting-ns timeslices".
fn parse(text: &[u8]) -> Option<Counted> {
    let mut fields = std::str::from_utf8(text).ok()?.split_ascii_whitespace();
    let mut next = || fields.next()?.parse().ok();
    Some(Counted {
        ran_ns: next()?,
        waited_ns: next()?,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Runs `f` with this thread and a spinning one pinned to one CPU, so the
    /// scheduler makes this thread wait for it about half the time; this
    /// thread's CPUs are put back afterwards.
    pub(crate) fn sharing_one_cpu<R>(f: impl FnOnce() -> R) -> R {
        let allowed = crate::sys::affinity::allowed_cpus().unwrap();
        let pin = |cpus: &[usize]| {
            // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            for &c in cpus {
                unsafe { libc::CPU_SET(c, &mut set) };
            }
            // SAFETY: a live set of the size given, for the calling thread.
            let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
            assert_eq!(
                rc,
                0,
                "sched_setaffinity: {}",
                std::io::Error::last_os_error()
            );
        };
        let stop = AtomicBool::new(false);
        let result = std::thread::scope(|s| {
            s.spawn(|| {
                pin(&allowed[..1]);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            pin(&allowed[..1]);
            let result = f();
            stop.store(true, Ordering::Relaxed);
            result
        });
        pin(&allowed);
        result
    }

    #[test]
    fn the_wait_is_the_second_of_the_three_fields() {
        let c = parse(b"123456 7890 12\n").unwrap();
        assert_eq!((c.ran_ns, c.waited_ns), (123456, 7890));
        assert!(parse(b"123456\n").is_none());
        assert!(parse(b"a b c").is_none());
    }

    #[test]
    fn a_thread_that_waits_behind_others_sees_its_wait_grow() {
        let Some(before) = counted() else {
            eprintln!("skipped: this kernel has no /proc/thread-self/schedstat");
            return;
        };
        let after = sharing_one_cpu(|| {
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_millis(200) {
                std::hint::spin_loop();
            }
            counted().unwrap()
        });
        // Two spinning threads on one CPU for 200 ms: each waits about half
        // the time; 20 ms is far below that and far above an idle thread's.
        let waited = after.waited_ns - before.waited_ns;
        assert!(
            waited > 20_000_000,
            "waited {waited} ns more, sharing one CPU with a spinning thread for 200 ms"
        );
    }
}
