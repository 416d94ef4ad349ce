//! Whether this process is a CPU scheduling group of its own.
//!
//! With Linux's autogroup scheduling on (`/proc/sys/kernel/sched_autogroup_enabled`,
//! the default in Debian's kernels) the scheduler shares the CPUs fairly
//! between *sessions* first, then between the threads of each. A rank that
//! leads a session of its own (as torchrun starts its ranks, and ringside's
//! launcher after it: [`crate::launch::supervised`]) is then one group
//! beside every other program on the machine, with a fair share of its own;
//! ranks that share their launcher's session (`mpirun`'s) are one group
//! together.
//!
//! Why a backend asks: where a thread may run changes how much of that share
//! it can use. The Gloo backend's placement depends on it (its module docs,
//! "Placement", have the measurements).
//!
//! Not seen from here: a `cpu` cgroup holding the process (a container's CPU
//! limit, systemd's `CPUWeight=`), under which autogroup does not apply.

/// Whether autogroup scheduling is on and this process leads its own session,
/// so that the scheduler shares the CPUs with it as with a program of its own.
pub(crate) fn own_group() -> bool {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .is_ok_and(|s| s.trim() == "1");
    enabled && leads_session()
}

/// Whether this process leads its session (`setsid` made it). The Gloo
/// backend's tests check it in a child that `launch::supervised` started.
pub(crate) fn leads_session() -> bool {
    // SAFETY: getsid(0) and getpid() have no preconditions.
    unsafe { libc::getsid(0) == libc::getpid() }
}
