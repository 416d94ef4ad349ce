//! [`Load`]: busy loops beside a measurement (`--load N` of `ringside bench`
//! and `peers`), so anyone can reproduce "a laptop busy with other work".
//!
//! Each loop is a CPU-bound process at the caller's priority in a session of
//! its own (a program started elsewhere, as a build in another terminal is):
//! under Linux's autogroup scheduling that is the harder case for the ranks,
//! which then share the cores with one more group per loop. The loops die with
//! the [`Load`] (and with the thread that started them, should the process be
//! killed: see [`super::supervised`]).

use std::process::{Command, Stdio};

use super::{Group, SELF_LAUNCHED};
use crate::error::{Error, Result};
use crate::rendezvous::env::{Overrides, RankInfo};

/// Whether this process starts the host's loops: `launched` is `None` for a
/// process no launcher started, else (started by [`super::init`] as a copy
/// of its parent, its local rank).
fn starts_here(launched: Option<(bool, usize)>) -> bool {
    match launched {
        None => true,
        Some((self_launched, local_rank)) => !self_launched && local_rank == 0,
    }
}

/// N busy loops, running until dropped.
pub struct Load {
    group: Group,
}

impl Load {
    /// Starts `n` busy loops (none for 0). Start it from a thread that lives
    /// as long as the measurement: the loops die with that thread.
    pub fn start(n: usize) -> Result<Load> {
        let mut group = Group::new();
        for _ in 0..n {
            // `:` is the shell's no-op builtin: the loop never leaves user
            // space, as a compute-bound program would not.
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            group
                .spawn(&mut cmd)
                .map_err(|e| Error::io("starting a busy loop for --load (sh)", e))?;
        }
        Ok(Load { group })
    }

    /// [`Load::start`] once per host of a job, `None` in its other processes:
    /// in the process that starts the ranks as copies of itself (`prog
    /// --nproc N --load 2`: its ranks see the flag too, and must not start
    /// more) or is the only rank; under any other launcher (`mpirun`,
    /// torchrun, srun, `ringside launch`) in the first rank on each host.
    /// Until 2026-11-27 no rank a launcher started ran any: `cargo xtask tour
    /// --load 2`, which runs the tour under `mpirun`, measured an idle
    /// machine while saying that two busy loops ran beside it.
    pub fn beside_this_job(n: usize) -> Result<Option<Load>> {
        let launched = if RankInfo::launched_from_env()? {
            let info = RankInfo::from_env(&Overrides::default())?;
            Some((std::env::var_os(SELF_LAUNCHED).is_some(), info.local_rank))
        } else {
            None
        };
        if starts_here(launched) {
            Load::start(n).map(Some)
        } else {
            Ok(None)
        }
    }

    /// How many loops run.
    pub fn len(&self) -> usize {
        self.group.len()
    }

    /// Whether no loop runs.
    pub fn is_empty(&self) -> bool {
        self.group.is_empty()
    }

    /// One line for a results table's header: what `--load n` ran beside it.
    pub fn describe(n: usize) -> String {
        match n {
            0 => "no load added (--load 0)".into(),
            n => format!(
                "--load {n}: {n} busy loop{} (nice 0, own sessions) ran beside this measurement",
                if n == 1 { "" } else { "s" }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// CPU time (user + system, clock ticks) of process `pid`.
    fn cpu_ticks(pid: u32) -> u64 {
        let path = format!("/proc/{pid}/stat");
        let field = |n| -> u64 {
            crate::testing::proc_stat_field(&path, n)
                .unwrap()
                .parse()
                .unwrap()
        };
        field(14) + field(15)
    }

    /// `cargo xtask tour --load 2` runs under `mpirun`, and no rank started
    /// the loops there: the tour timed an idle machine and said it was busy.
    #[test]
    fn ranks_of_another_launcher_start_one_load_per_host() {
        // A program that starts its ranks itself, or runs alone.
        assert!(starts_here(None));
        // Its own copies: the parent runs the loops.
        assert!(!starts_here(Some((true, 0))));
        assert!(!starts_here(Some((true, 1))));
        // mpirun, torchrun, srun, `ringside launch`: the host's first rank.
        assert!(starts_here(Some((false, 0))));
        assert!(!starts_here(Some((false, 1))));
    }

    #[test]
    fn load_runs_busy_loops_that_stop_when_dropped() {
        let load = Load::start(2).unwrap();
        assert_eq!(load.len(), 2);
        let pids: Vec<u32> = (0..2).map(|i| load.group.pid(i)).collect();
        // A busy loop accumulates CPU time; give it up to 5 s on a loaded
        // machine to show one tick.
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids.iter().any(|&p| cpu_ticks(p) == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        for &p in &pids {
            assert!(cpu_ticks(p) > 0, "loop {p} used no CPU");
        }
        assert!(
            Load::describe(2).contains("2 busy loops"),
            "{}",
            Load::describe(2)
        );
        drop(load);
        for p in pids {
            // SAFETY: signal 0 only probes; the group reaped the child, so the
            // pid names no process of ours.
            assert_ne!(
                unsafe { libc::kill(p as i32, 0) },
                0,
                "loop {p} outlived the Load"
            );
        }
        assert!(Load::start(0).unwrap().is_empty());
    }
}
