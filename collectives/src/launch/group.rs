//! Child processes supervised together, polled without blocking: the mechanism
//! under the launcher's ranks ([`super::spawn`]) and Hogwild's worker processes,
//! whose parent must go on serving descriptors and sampling its shared region
//! while it watches them. What to do when one ends (stop the others, after how
//! long, what to report) stays with the caller.
//!
//! Each child gets its own session (and with it its own process group) and dies
//! with its supervisor's thread ([`supervised`]); a child that ended has whatever
//! it left running in its group killed before it is reaped, so nothing it started
//! outlives it.
//!
//! Why a session and not only a process group: Linux's autogroup scheduling
//! (`/proc/sys/kernel/sched_autogroup_enabled`, on in Debian's kernels) shares
//! the CPU fairly between *sessions* first. Ranks in the launcher's session
//! compete thread by thread with every busy program started from the same
//! terminal, and a rank woken by a message waits for a busy loop's slice (a
//! scheduler tick, 4 ms) before it runs: Gloo's 130 µs all_reduce took 2–8 ms
//! with two busy loops beside it. A rank in a session of its own is scheduled
//! as a group of its own, as torchrun's ranks are (it starts each with
//! `start_new_session=True`): a woken rank then runs within tens of µs.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use super::Exit;

/// Makes `cmd` a child that cannot outlive its supervisor: its own session and
/// process group (so stopping it stops whatever it started, and the scheduler
/// shares the CPU with it as with a program of its own: see the module docs),
/// and SIGKILL when the spawning thread
/// ends (`PR_SET_PDEATHSIG`), checked against a supervisor that died before the
/// child could ask.
///
/// Spawn from a thread that lives as long as the child should: the signal fires
/// when the spawning *thread* ends.
pub fn supervised(cmd: &mut Command) -> &mut Command {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec, so it may only make
    // async-signal-safe calls and must not allocate: setsid, prctl and getppid
    // qualify, and from_raw_os_error does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            // A new session whose process group id is the child's pid (what
            // `kill(-pid)` below relies on). It cannot fail in a freshly
            // forked child, which is never a group leader.
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The supervisor died before prctl took effect: do not run orphaned.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    }
}

struct Member {
    child: Child,
    pid: u32,
    exit: Option<Exit>,
}

/// Children started with [`supervised`], each reaped once it has ended. Dropping
/// the group kills and reaps every child still running: on an early error, no
/// child outlives its supervisor's scope.
#[derive(Default)]
pub struct Group {
    members: Vec<Member>,
}

impl Group {
    /// An empty group.
    pub fn new() -> Group {
        Group::default()
    }

    /// Starts `cmd` as a supervised child; returns its index in the group.
    pub fn spawn(&mut self, cmd: &mut Command) -> std::io::Result<usize> {
        let child = supervised(cmd).spawn()?;
        let pid = child.id();
        self.members.push(Member {
            child,
            pid,
            exit: None,
        });
        Ok(self.members.len() - 1)
    }

    /// The number of children started.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether no child was started.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Child `i`, e.g. to take its pipes.
    pub fn child_mut(&mut self, i: usize) -> &mut Child {
        &mut self.members[i].child
    }

    /// Child `i`'s process id.
    pub fn pid(&self, i: usize) -> u32 {
        self.members[i].pid
    }

    /// How child `i` ended, once reaped.
    pub fn exit(&self, i: usize) -> Option<Exit> {
        self.members[i].exit
    }

    /// Whether every child has been reaped.
    pub fn all_exited(&self) -> bool {
        self.members.iter().all(|m| m.exit.is_some())
    }

    /// Reaps every child that has ended since the last call, after killing what it
    /// left running in its process group; returns their indices. Never blocks.
    pub fn reap(&mut self) -> Vec<usize> {
        let mut ended = Vec::new();
        for (i, m) in self.members.iter_mut().enumerate() {
            if m.exit.is_some() || !has_exited(m.pid) {
                continue;
            }
            // A zombie's group id is still ours to signal: clear out what it
            // started, then reap it.
            signal_group(m.pid, libc::SIGKILL);
            m.exit = Some(m.child.wait().map_or(Exit::Unknown, Exit::from));
            ended.push(i);
        }
        ended
    }

    /// Sends `sig` to the process group of every child still running; returns
    /// their indices.
    pub fn signal_running(&self, sig: libc::c_int) -> Vec<usize> {
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].exit.is_none())
            .collect();
        for &i in &running {
            signal_group(self.members[i].pid, sig);
        }
        running
    }

    /// SIGKILLs every child still running (its whole group) and reaps it.
    pub fn kill_all(&mut self) {
        for m in self.members.iter_mut().filter(|m| m.exit.is_none()) {
            signal_group(m.pid, libc::SIGKILL);
            m.exit = Some(m.child.wait().map_or(Exit::Unknown, Exit::from));
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Sends `sig` to a child's whole process group.
fn signal_group(pid: u32, sig: libc::c_int) {
    // SAFETY: kill() has no memory-safety preconditions. The group id is the
    // child's pid (setsid in `supervised`); it stays reserved while the child is
    // unreaped, and we signal it only until we reap.
    unsafe {
        libc::kill(-(pid as libc::pid_t), sig);
    }
}

/// Whether the child has exited, without reaping it (so its pid, and with it
/// the process-group id, cannot be reused before we clean up the group).
fn has_exited(pid: u32) -> bool {
    // SAFETY: a zeroed siginfo_t is valid; waitid writes into it.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        // An error (e.g. ECHILD) means there is nothing left to wait for:
        // let the caller reap and read what it can.
        rc != 0 || info.si_pid() != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    fn reap_until_done(g: &mut Group) -> Vec<usize> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut order = Vec::new();
        while !g.all_exited() && Instant::now() < deadline {
            order.extend(g.reap());
            std::thread::sleep(Duration::from_millis(10));
        }
        order
    }

    #[test]
    fn children_are_reaped_as_they_end_without_blocking() {
        let mut g = Group::new();
        g.spawn(&mut sh("sleep 0.3; exit 3")).unwrap();
        g.spawn(&mut sh("exit 0")).unwrap();
        let start = Instant::now();
        assert!(
            g.reap().len() <= 1,
            "reap blocked or reaped a running child"
        );
        assert!(start.elapsed() < Duration::from_millis(200));
        let order = reap_until_done(&mut g);
        assert_eq!(order.last(), Some(&0), "{order:?}");
        assert_eq!(
            (g.exit(0), g.exit(1)),
            (Some(Exit::Code(3)), Some(Exit::Code(0)))
        );
    }

    /// A child's own children die with it: the group is killed when it is reaped.
    #[test]
    fn what_a_child_started_does_not_outlive_it() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild");
        let mut g = Group::new();
        let script = format!("sleep 60 & echo $! > {}; exit 1", pidfile.display());
        g.spawn(&mut sh(&script)).unwrap();
        reap_until_done(&mut g);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        // SAFETY: signal 0 only probes.
        while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_ne!(
            unsafe { libc::kill(pid, 0) },
            0,
            "the grandchild {pid} outlived its parent"
        );
    }

    #[test]
    fn dropping_the_group_kills_what_still_runs() {
        let pid = {
            let mut g = Group::new();
            g.spawn(&mut sh("sleep 60")).unwrap();
            g.pid(0)
        };
        // Reaped by the drop: the pid names no child of ours any more.
        let probe = unsafe { libc::kill(pid as i32, 0) };
        assert_ne!(
            probe, 0,
            "child {pid} still runs after the group was dropped"
        );
    }

    /// Ranks stalled a scheduler tick per message under load from the same
    /// terminal while they shared its session (see the module docs): each child
    /// must lead a session of its own.
    #[test]
    fn gloo_stalled_under_load_while_ranks_shared_the_launchers_session() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ids");
        let mut g = Group::new();
        // Field 6 of /proc/self/stat is the session id; $$ is the shell's pid.
        let script = format!("echo $$ $(cut -d' ' -f6 /proc/$$/stat) > {}", out.display());
        g.spawn(&mut sh(&script)).unwrap();
        reap_until_done(&mut g);
        let text = std::fs::read_to_string(&out).unwrap();
        let ids: Vec<i32> = text
            .split_whitespace()
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(
            ids[0], ids[1],
            "the child does not lead its own session: {text}"
        );
        // SAFETY: getsid(0) has no preconditions.
        assert_ne!(
            ids[1],
            unsafe { libc::getsid(0) },
            "the child shares our session"
        );
    }
}
