//! A shorter scheduler time slice for the calling thread (and the threads it
//! starts while it holds one), and putting the old one back.
//!
//! Linux's fair scheduler (EEVDF, since 6.6) lets a running task keep the CPU
//! for its slice before a task just woken, with no more right to the CPU than
//! it, may take over. The default slice grows with the number of CPUs: 1.4 ms
//! on a 2-core VM here, about 2.8 ms on a 16-core node, where the scheduler
//! tick (4 ms) is what ends it. A rank woken for data beside busy programs
//! waits that out at every hand-off. Since Linux 6.12 a thread may ask for a
//! shorter slice (`sched_setattr`'s `sched_runtime`, 0.1 to 100 ms, no
//! privileges needed): woken, its deadline comes sooner, so it runs at once.
//! Its share of the CPU stays what its weight gives: it runs more often, for
//! less each time, which is what latency-bound work wants and takes nothing
//! from the other programs.
//!
//! A new thread inherits its creator's slice, so a slice set before a
//! library starts its threads covers them too.

use std::io;
use std::time::Duration;

/// `struct sched_attr` (`include/uapi/linux/sched/types.h`, the
/// `SCHED_ATTR_SIZE_VER1` layout).
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

impl SchedAttr {
    /// Whether these are a fair-class thread's (`SCHED_OTHER`, `SCHED_BATCH`),
    /// the only ones whose `sched_runtime` is a slice.
    fn fair(&self) -> bool {
        self.sched_policy == libc::SCHED_OTHER as u32
            || self.sched_policy == libc::SCHED_BATCH as u32
    }
}

/// The shortest slice the kernel takes (it clamps requests to 0.1–100 ms).
pub(crate) const SHORTEST: Duration = Duration::from_micros(100);

fn get() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is a live, writable sched_attr of the size passed;
    // pid 0 = this thread, flags 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as libc::c_uint,
            0,
        )
    };
    super::cvt(rc as isize)?;
    Ok(attr)
}

fn set(attr: &SchedAttr) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        ..*attr
    };
    // SAFETY: `attr` is a live sched_attr whose `size` says its size; pid 0 =
    // this thread, flags 0.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    super::cvt(rc as isize).map(|_| ())
}

/// The calling thread's slice now (the kernel's default where none was asked
/// for), or `None` where it is not a fair-class thread or the kernel has no
/// `sched_getattr`.
#[cfg(test)]
pub(crate) fn current() -> Option<Duration> {
    let attr = get().ok()?;
    attr.fair()
        .then(|| Duration::from_nanos(attr.sched_runtime))
}

/// A slice in force on the thread that asked, put back when dropped there
/// ([`super::OnThisThread`]).
#[derive(Debug)]
pub(crate) struct Slice {
    /// Held for its drop, which puts the setting back.
    _before: super::OnThisThread<SchedAttr>,
}

impl Slice {
    /// Gives the calling thread (and the threads it starts from now on) a
    /// slice of `slice`. Only fair-class threads (`SCHED_OTHER`,
    /// `SCHED_BATCH`) are changed; policy, nice value and the rest stay. An
    /// error where the kernel refuses (before 6.12 a fair thread's
    /// `sched_runtime` was ignored, not refused: then nothing changes).
    pub(crate) fn shorten(slice: Duration) -> io::Result<Slice> {
        let previous = get()?;
        if !previous.fair() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "not a fair-class thread",
            ));
        }
        let mut attr = previous;
        attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
        set(&attr)?;
        // Put back as read: where no slice was asked for, the kernel's
        // default as a slice of the same length, which behaves alike.
        Ok(Slice {
            _before: super::OnThisThread::new(previous, set),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shorter_slice_covers_threads_started_under_it_and_goes_when_dropped() {
        // On a thread of its own: the test harness's threads are shared.
        std::thread::spawn(|| {
            let Some(before) = current() else {
                eprintln!("skipped: sched_getattr unavailable here");
                return;
            };
            let guard = match Slice::shorten(SHORTEST) {
                Ok(g) => g,
                Err(e) => {
                    eprintln!("skipped: sched_setattr refused here: {e}");
                    return;
                }
            };
            if current() == Some(before) && before != SHORTEST {
                // A kernel before 6.12 takes the call and ignores the slice.
                eprintln!("skipped: this kernel ignores a fair thread's slice");
                return;
            }
            assert_eq!(current(), Some(SHORTEST));
            let child = std::thread::spawn(current).join().unwrap();
            assert_eq!(child, Some(SHORTEST), "a thread started under it");
            drop(guard);
            assert_eq!(current(), Some(before));
        })
        .join()
        .unwrap();
    }
}
