//! The parent's side of the worker processes: start them, reap them as they
//! end, kill the rest on an early error, and say how each ended. The process
//! mechanics are the launcher's ([`collectives::launch::Group`]: own process
//! group, killed with the parent, reaped without blocking); what is Hogwild's
//! here is which worker got the descriptor and what each wrote to stderr.

use collectives::launch::{Exit, Group};

use super::*;

/// How the parent shares the region while workers attach.
pub(super) enum Shared {
    /// The memory file's descriptor and the socket that hands it out.
    Fd { fd: OwnedFd, listener: UnixListener },
    /// The named file (its guard is kept separately, until unlinked).
    Named,
}

/// The worker processes (worker `k` is the group's child `k`), reaped as they end.
/// Dropping it kills and reaps the workers still running: on an early error, no
/// worker outlives the run.
pub(super) struct Children {
    group: Group,
    pub(super) procs: Vec<WorkerProc>,
}

pub(super) struct WorkerProc {
    pub(super) pid: u32,
    /// Whether this worker already received the descriptor.
    pub(super) served: bool,
    stderr: Option<JoinHandle<String>>,
}

impl Children {
    pub(super) fn spawn(
        config: &HogwildConfig,
        launcher: &WorkerProgram,
        name: &str,
    ) -> Result<Children> {
        let encoded = config.encode();
        let mut children = Children {
            group: Group::new(),
            procs: Vec::new(),
        };
        for rank in 0..config.workers {
            let mut cmd = Command::new(&launcher.program);
            cmd.args(&launcher.args)
                .env(ENV_ROLE, rank.to_string())
                .env(ENV_CONFIG, &encoded)
                .env(ENV_SHARED, name)
                .env(ENV_PARENT, std::process::id().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            // A worker must not outlive the run (a parent killed mid-run would
            // leave workers writing into a region nobody reads).
            let k = children
                .group
                .spawn(&mut cmd)
                .map_err(|e| os(&format!("starting {}", launcher.program.display()), e))?;
            let stderr = children.group.child_mut(k).stderr.take().map(|mut err| {
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let _ = err.read_to_end(&mut buf);
                    String::from_utf8_lossy(&buf).into_owned()
                })
            });
            children.procs.push(WorkerProc {
                pid: children.group.pid(k),
                served: false,
                stderr,
            });
        }
        Ok(children)
    }

    /// Reaps the workers that have ended (never blocks).
    pub(super) fn poll(&mut self) {
        self.group.reap();
    }

    pub(super) fn exited(&self, rank: usize) -> bool {
        rank >= self.group.len() || self.group.exit(rank).is_some()
    }

    pub(super) fn all_exited(&self) -> bool {
        self.group.all_exited()
    }

    /// SIGKILLs the workers still running (only processes this run started) and
    /// reaps them.
    pub(super) fn kill_all(&mut self) {
        self.group.kill_all();
    }

    pub(super) fn outcomes(
        &mut self,
        region: &Mapping,
        timed_out: bool,
    ) -> Result<Vec<WorkerOutcome>> {
        let mut out = Vec::new();
        for (rank, p) in self.procs.iter_mut().enumerate() {
            let stderr = p
                .stderr
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_default();
            let tail: String = {
                let chars: Vec<char> = stderr.chars().collect();
                chars[chars.len().saturating_sub(1500)..].iter().collect()
            };
            let failure = match self.group.exit(rank) {
                Some(Exit::Signal(libc::SIGKILL)) if timed_out => {
                    Some("did not finish in time and was killed".to_owned())
                }
                Some(e) if e.success() => None,
                Some(e) => Some(e.to_string()),
                None => Some("could not be waited for".to_owned()),
            };
            out.push(WorkerOutcome {
                rank,
                pid: p.pid,
                attached: region.attached(rank)? != 0,
                steps: region.slot(rank, 8)?.load(Ordering::SeqCst),
                failure,
                stderr_tail: tail,
            });
        }
        Ok(out)
    }
}
