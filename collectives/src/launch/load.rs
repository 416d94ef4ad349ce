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

use super::Group;
use crate::error::{Error, Result};

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

    /// [`Load::start`] in the process that starts a job's ranks (or is its
    /// only rank), `None` in a rank a launcher started: the ranks of
    /// `prog --nproc N --load 2` see the flag too, and must not start more.
    pub fn beside_this_job(n: usize) -> Result<Option<Load>> {
        if crate::rendezvous::env::RankInfo::launched_from_env()? {
            Ok(None)
        } else {
            Load::start(n).map(Some)
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
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        // Fields 14 and 15 (utime, stime) are 11 and 12 after the state.
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
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
