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
//! "Placement", have the measurements), and the TCP transport's (its module
//! docs, "Placement").
//!
//! Not seen from here: a `cpu` cgroup holding the process (a container's CPU
//! limit, systemd's `CPUWeight=`), under which autogroup does not apply.

/// Whether autogroup scheduling is on and this process leads its own session,
/// so that the scheduler shares the CPUs with it as with a program of its own.
pub(crate) fn own_group() -> bool {
    enabled() && leads_session()
}

/// Whether autogroup scheduling is on.
fn enabled() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .is_ok_and(|s| s.trim() == "1")
}

/// Whether this process leads its session (`setsid` made it).
fn leads_session() -> bool {
    // SAFETY: getsid(0) and getpid() have no preconditions.
    unsafe { libc::getsid(0) == libc::getpid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHILD: &str = "RINGSIDE_AUTOGROUP_TEST_CHILD";

    /// A rank the launcher started (in a session of its own,
    /// `launch::supervised`) knows it is a group of its own where autogroup
    /// is on; this test process, which cargo started inside its session, is
    /// not. Runs [`session_leader_child`] in such a child.
    #[test]
    fn a_process_the_launcher_started_is_a_group_of_its_own() {
        if leads_session() {
            return eprintln!("skipped: this test process leads a session of its own");
        }
        assert!(!own_group());
        crate::testing::run_alone_in_child("sys::autogroup::tests::session_leader_child", CHILD);
    }

    #[test]
    #[ignore = "run in a session of its own by a_process_the_launcher_started_is_a_group_of_its_own"]
    fn session_leader_child() {
        if std::env::var_os(CHILD).is_none() {
            return eprintln!("skipped: only meaningful as the child of its parent test");
        }
        assert!(leads_session(), "setsid did not make a session");
        assert_eq!(own_group(), enabled());
    }
}
