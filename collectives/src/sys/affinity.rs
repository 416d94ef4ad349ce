//! Binding the calling thread to one CPU, as `mpirun` binds each rank to a
//! core when the ranks fit the cores.
//!
//! Why the shared-memory transport wants it: two ranks that wake each other
//! through a futex look to Linux's scheduler like one task handing work to
//! another, and its wake-affine placement can put both on one CPU, where they
//! stay (neither ever needs more than that CPU). Measured in `ringside tour`
//! on 2 cores: in 2 runs of 6 both ranks shared a CPU for the whole sweep,
//! and every small all_reduce took 6 µs (each wait ended in a futex sleep,
//! since spinning would only delay the peer on the same CPU) instead of
//! 0.6 µs; with that fallback disabled, 104 µs (spinning against the peer).

use std::io;

/// The CPUs this thread may run on, in increasing order.
pub(crate) fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 = this thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE and `set` is initialised.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Restricts the calling thread (and the threads it starts afterwards) to `cpu`.
pub(crate) fn bind_to(cpu: usize) -> io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET on a live set; `cpu` is checked against CPU_SETSIZE.
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU out of range",
        ));
    }
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 = this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPU local rank `rank` of `world` binds to, or `None` when it should not
/// bind: one rank alone, more ranks than the CPUs this thread may use (they
/// must share, and the scheduler should be free to move them), or
/// `RINGSIDE_BIND=none`. A thread already bound by a launcher (`mpirun
/// --bind-to core`, `taskset`) sees fewer CPUs than ranks and is left alone.
pub(crate) fn cpu_for(
    rank: usize,
    world: usize,
    allowed: &[usize],
    opt_out: bool,
) -> Option<usize> {
    if opt_out || world < 2 || allowed.len() < world {
        return None;
    }
    allowed.get(rank).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_bind_to_distinct_allowed_cpus_only_when_they_fit() {
        let allowed = [0, 2, 5];
        assert_eq!(cpu_for(0, 2, &allowed, false), Some(0));
        assert_eq!(cpu_for(1, 2, &allowed, false), Some(2));
        assert_eq!(cpu_for(2, 3, &allowed, false), Some(5));
        // More ranks than CPUs: nobody binds.
        assert_eq!(cpu_for(0, 4, &allowed, false), None);
        // One rank, or opted out.
        assert_eq!(cpu_for(0, 1, &allowed, false), None);
        assert_eq!(cpu_for(1, 2, &allowed, true), None);
    }

    #[test]
    fn a_thread_bound_to_one_allowed_cpu_runs_there() {
        std::thread::spawn(|| {
            let allowed = allowed_cpus().unwrap();
            let cpu = *allowed.last().unwrap();
            bind_to(cpu).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
            // SAFETY: no preconditions.
            assert_eq!(unsafe { libc::sched_getcpu() }, cpu as i32);
        })
        .join()
        .unwrap();
    }
}
