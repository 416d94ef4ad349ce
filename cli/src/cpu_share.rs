//! How much CPU a job's ranks used while they were timed: on a busy machine a
//! backend's large sizes follow its share of the cores as much as its design,
//! and the share differs between backends beside the same load (2026-11-28,
//! 2-core VM, 2 busy loops, both under `mpirun`: the reference backend's shm
//! ranks got 0.63 of the 2 cores at 64 MiB, the busy loops 1.37; Gloo's
//! ranks 1.64, the loops 0.36). The tour prints it beside its table, and
//! `bench` after each backend's tables, so that a ranking measured under load
//! is read with it. The job-wide sum is one small all_reduce after the timed
//! sweep, outside every timed call. The torch peer meters its ranks the same
//! way (`torch_peer.py`'s `job_cores`), so both sides' shares sit side by side.

use std::time::{Duration, Instant};

use collectives::{BufferMut, Communicator, Input, ReduceOp};

/// This process's CPU time so far, every thread's (user and system).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The cores of this host when every rank of the job runs on it (`world`
/// ranks, `local_world` of them here); `None` otherwise, since a multi-host
/// job's sum covers every host.
pub fn host_cores(world: usize, local_world: usize) -> Option<usize> {
    if world != local_world {
        return None;
    }
    // The host's online CPUs, not this thread's affinity mask
    // (`available_parallelism`): a rank bound to its share of the CPUs would
    // read 1 on a 2-core host.
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// ` (this host has N)` after a job's cores, or nothing without [`host_cores`].
pub fn of_host(host: Option<usize>) -> String {
    host.map_or_else(String::new, |n| format!(" (this host has {n})"))
}

/// A window of wall time and of this process's CPU time.
pub struct Meter {
    wall: Instant,
    cpu: Duration,
}

impl Meter {
    /// Starts the window now.
    pub fn start() -> Meter {
        Meter {
            wall: Instant::now(),
            cpu: process_cpu(),
        }
    }

    /// Cores this process used on average since [`Meter::start`].
    pub fn cores(&self) -> f64 {
        let wall = self.wall.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        process_cpu().saturating_sub(self.cpu).as_secs_f64() / wall
    }

    /// Cores the whole job used since [`Meter::start`]: every rank's own
    /// figure, summed over `comm` (a collective: every rank calls it).
    pub fn job_cores(&self, comm: &dyn Communicator) -> collectives::Result<f64> {
        let mut cores = [self.cores()];
        comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut cores),
            ReduceOp::Sum,
        )?;
        Ok(cores[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_named_only_when_every_rank_runs_on_it() {
        let n = host_cores(2, 2).expect("an online CPU count");
        assert!(n >= 1);
        assert_eq!(of_host(Some(n)), format!(" (this host has {n})"));
        assert_eq!(host_cores(4, 2), None);
        assert_eq!(of_host(None), "");
    }

    #[test]
    fn a_busy_thread_shows_as_about_one_core_and_a_sleeping_one_as_none() {
        let idle = Meter::start();
        std::thread::sleep(Duration::from_millis(200));
        // Nothing ran: a little for the test harness at most.
        assert!(idle.cores() < 0.3, "{}", idle.cores());
        let busy = Meter::start();
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        // At most one core (this thread) plus the harness; at least a share of
        // one on a machine as busy as CI's.
        let c = busy.cores();
        assert!((0.1..1.5).contains(&c), "{c}");
    }
}
