//! Binding the calling thread to CPUs of its own, as `mpirun` binds each
//! rank to a core when the ranks fit the cores, and undoing it.
//!
//! Why the shared-memory transport wants it: two ranks that wake each other
//! through a futex look to Linux's scheduler like one task handing work to
//! another, and its wake-affine placement can put both on one CPU, where they
//! stay (neither ever needs more than that CPU). Measured in `ringside tour`
//! on 2 cores: in 2 runs of 6 both ranks shared a CPU for the whole sweep,
//! and every small all_reduce took 6 µs (each wait ended in a futex sleep,
//! since spinning would only delay the peer on the same CPU) instead of
//! 0.6 µs; with that fallback disabled, 104 µs (spinning against the peer).
//!
//! Why a share of the CPUs and not one, and why it is undone: threads a
//! rank starts while bound inherit the mask. Bound to one CPU, libtorch's
//! intra-op pool on a 16-core machine would get one core per rank, and a
//! Gloo communicator created in the same process (the tour measures Gloo
//! after the reference backend) put its network thread on the rank's CPU,
//! where every hand-off waited for a scheduler tick: 4 ms per all_reduce
//! instead of 0.3 ms (Gloo's loop spinning on a lock held by a thread on its
//! core, which `backends::gloo::loop_yield` has since mended). So each rank
//! gets an equal, disjoint share of the allowed CPUs, and the previous mask
//! comes back when the binding is dropped.
//!
//! Who binds: the shared-memory transport, and the Gloo backend once its loop
//! is mended and where its ranks share a scheduling group (its module docs,
//! "Placement", have the measurements), each through [`bind_local_rank`].

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

/// Restricts the calling thread (and the threads it starts afterwards) to
/// `cpus`.
pub(crate) fn bind_to(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "CPU out of range",
            ));
        }
        // SAFETY: CPU_SET on a live set, `cpu` checked against CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 = this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A binding in force, undone when dropped on the thread that made it
/// ([`super::OnThisThread`]).
#[derive(Debug)]
pub(crate) struct Binding {
    /// Held for its drop, which puts the setting back.
    _before: super::OnThisThread<Vec<usize>>,
}

impl Binding {
    /// Binds the calling thread to `cpus`, remembering `previous`, its mask
    /// now (as [`allowed_cpus`] read it).
    pub(crate) fn new(cpus: &[usize], previous: Vec<usize>) -> io::Result<Binding> {
        bind_to(cpus)?;
        Ok(Binding {
            _before: super::OnThisThread::new(previous, |cpus| bind_to(cpus)),
        })
    }
}

/// Binds this thread (and the threads it starts from now on) to local rank
/// `rank`'s share of the CPUs when the `world` ranks on this host fit its
/// CPUs ([`cpus_for`]), until the returned binding is restored;
/// `RINGSIDE_BIND=none` leaves placement to the scheduler. Best effort: a
/// refusal (a container's seccomp policy) leaves the thread where it is.
pub(crate) fn bind_local_rank(rank: usize, world: usize) -> Option<Binding> {
    let allowed = allowed_cpus().ok()?;
    let cpus = cpus_for(rank, world, &allowed, opted_out())?;
    Binding::new(&cpus, allowed).ok()
}

/// Whether `RINGSIDE_BIND=none` leaves placement to the scheduler.
pub(crate) fn opted_out() -> bool {
    std::env::var("RINGSIDE_BIND").is_ok_and(|v| v == "none")
}

/// For tests of a binding: the CPUs this thread may use, where two ranks can
/// be bound to shares of them here (two CPUs or more, binding on, and with
/// `in_shared_group`, a process that shares its session as `mpirun`'s ranks
/// do), else why not.
#[cfg(test)]
pub(crate) fn cpus_to_test_binding(in_shared_group: bool) -> Result<Vec<usize>, String> {
    let allowed = allowed_cpus().map_err(|e| e.to_string())?;
    if allowed.len() < 2 || opted_out() {
        return Err(format!(
            "needs 2 allowed CPUs and binding on (have {allowed:?})"
        ));
    }
    if in_shared_group && super::autogroup::own_group() {
        return Err("this test process leads a session of its own".into());
    }
    Ok(allowed)
}

/// Binds this thread as [`bind_local_rank`] does where its place on the host
/// is known (`place`: local rank, ranks on the host) and the host's ranks
/// share a scheduling group (`mpirun`'s share its session). A rank that is a
/// scheduling group of its own (ringside's launcher's, torchrun's:
/// [`super::autogroup`]) stays unbound: the kernel gives it a fair share of
/// the machine beside every other program, and bound it could spend that
/// share on its own CPUs only (the Gloo backend and the TCP transport have
/// the runs, under "Placement").
pub(crate) fn bind_in_shared_group(place: Option<(usize, usize)>) -> Option<Binding> {
    let (rank, world) = unless_own_group(place, super::autogroup::own_group())?;
    bind_local_rank(rank, world)
}

fn unless_own_group(place: Option<(usize, usize)>, own_group: bool) -> Option<(usize, usize)> {
    place.filter(|_| !own_group)
}

/// The CPUs local rank `rank` of `world` binds to, or `None` when it should
/// not bind: one rank alone, more ranks than the CPUs this thread may use
/// (they must share, and the scheduler should be free to move them), or
/// `RINGSIDE_BIND=none`. A thread already bound by a launcher (`mpirun
/// --bind-to core`, `taskset`) sees fewer CPUs than ranks and is left alone.
/// Each rank gets an equal contiguous share of the allowed CPUs (the first
/// `len % world` ranks one more), disjoint from the others'.
pub(crate) fn cpus_for(
    rank: usize,
    world: usize,
    allowed: &[usize],
    opt_out: bool,
) -> Option<Vec<usize>> {
    if opt_out || world < 2 || rank >= world || allowed.len() < world {
        return None;
    }
    let (share, extra) = (allowed.len() / world, allowed.len() % world);
    let start = rank * share + rank.min(extra);
    let len = share + usize::from(rank < extra);
    Some(allowed[start..start + len].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank that leads a session of its own, as torchrun's and ringside's
    /// launcher's ranks do, is a scheduling group of its own and stays where
    /// it was: bound, its Gloo calls measured 1.24–1.64× torch's gloo at
    /// 4–64 MiB beside two busy loops, unbound 0.84–1.36, and its 64 MiB TCP
    /// calls 112–170 ms against 84–130. (`sys::autogroup`'s test checks that
    /// such a rank knows it.)
    #[test]
    fn a_rank_in_a_scheduling_group_of_its_own_stays_unbound() {
        assert_eq!(unless_own_group(Some((1, 2)), false), Some((1, 2)));
        assert_eq!(unless_own_group(Some((1, 2)), true), None);
        assert_eq!(unless_own_group(None, false), None);
    }

    #[test]
    fn ranks_get_disjoint_shares_of_the_allowed_cpus_only_when_they_fit() {
        let allowed = [0, 2, 5];
        assert_eq!(cpus_for(0, 2, &allowed, false), Some(vec![0, 2]));
        assert_eq!(cpus_for(1, 2, &allowed, false), Some(vec![5]));
        assert_eq!(cpus_for(2, 3, &allowed, false), Some(vec![5]));
        let sixteen: Vec<usize> = (0..16).collect();
        assert_eq!(cpus_for(1, 2, &sixteen, false), Some((8..16).collect()));
        // More ranks than CPUs: nobody binds.
        assert_eq!(cpus_for(0, 4, &allowed, false), None);
        // One rank, or opted out.
        assert_eq!(cpus_for(0, 1, &allowed, false), None);
        assert_eq!(cpus_for(1, 2, &allowed, true), None);
    }

    #[test]
    fn a_binding_holds_until_dropped_and_threads_started_meanwhile_inherit_it() {
        std::thread::spawn(|| {
            let allowed = allowed_cpus().unwrap();
            let cpu = *allowed.last().unwrap();
            let b = Binding::new(&[cpu], allowed.clone()).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
            // SAFETY: no preconditions.
            assert_eq!(unsafe { libc::sched_getcpu() }, cpu as i32);
            let child = std::thread::spawn(|| allowed_cpus().unwrap())
                .join()
                .unwrap();
            assert_eq!(child, vec![cpu]);
            drop(b);
            assert_eq!(allowed_cpus().unwrap(), allowed);
        })
        .join()
        .unwrap();
    }
}
