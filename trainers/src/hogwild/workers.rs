//! The parent's side of the worker processes: start them, reap them as they
//! end, kill the rest on an early error, and say how each ended (in
//! [`collectives::launch::Exit`]'s words, the launcher's).

use collectives::launch::Exit;

use super::*;

/// How the parent shares the region while workers attach.
pub(super) enum Shared {
    /// The memory file's descriptor and the socket that hands it out.
    Fd { fd: OwnedFd, listener: UnixListener },
    /// The named file (its guard is kept separately, until unlinked).
    Named,
}

/// The worker processes, reaped as they end.
pub(super) struct Children {
    pub(super) procs: Vec<ChildProc>,
}

pub(super) struct ChildProc {
    pub(super) child: Child,
    pub(super) exit: Option<ExitStatus>,
    /// Whether this worker already received the descriptor.
    pub(super) served: bool,
    pub(super) stderr: Option<JoinHandle<String>>,
}

impl Children {
    pub(super) fn spawn(
        config: &HogwildConfig,
        launcher: &Launcher,
        name: &str,
    ) -> Result<Children> {
        let encoded = config.encode();
        let mut children = Children { procs: Vec::new() };
        for rank in 0..config.workers {
            let mut cmd = Command::new(&launcher.program);
            // A worker must not outlive the run (a parent killed mid-run would
            // leave workers writing into a region nobody reads): the launcher's
            // rule for its ranks.
            collectives::launch::supervised(&mut cmd);
            let mut child = cmd
                .args(&launcher.args)
                .env(ENV_ROLE, rank.to_string())
                .env(ENV_CONFIG, &encoded)
                .env(ENV_SHARED, name)
                .env(ENV_PARENT, std::process::id().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| os(&format!("starting {}", launcher.program.display()), e))?;
            let stderr = child.stderr.take().map(|mut err| {
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let _ = err.read_to_end(&mut buf);
                    String::from_utf8_lossy(&buf).into_owned()
                })
            });
            children.procs.push(ChildProc {
                child,
                exit: None,
                served: false,
                stderr,
            });
        }
        Ok(children)
    }

    pub(super) fn poll(&mut self) -> Result<()> {
        for p in self.procs.iter_mut().filter(|p| p.exit.is_none()) {
            p.exit = p
                .child
                .try_wait()
                .map_err(|e| os("waiting for a worker", e))?;
        }
        Ok(())
    }

    pub(super) fn exited(&self, rank: usize) -> bool {
        self.procs.get(rank).is_none_or(|p| p.exit.is_some())
    }

    pub(super) fn all_exited(&self) -> bool {
        self.procs.iter().all(|p| p.exit.is_some())
    }

    /// SIGKILLs the workers still running (only processes this run started) and
    /// reaps them.
    pub(super) fn kill_all(&mut self) {
        for p in self.procs.iter_mut().filter(|p| p.exit.is_none()) {
            let _ = p.child.kill();
            p.exit = p.child.wait().ok();
        }
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
            let failure = match p.exit {
                _ if timed_out && p.exit.is_some_and(|s| s.signal() == Some(libc::SIGKILL)) => {
                    Some("did not finish in time and was killed".to_owned())
                }
                Some(s) if s.success() => None,
                Some(s) => Some(describe(s)),
                None => Some("could not be waited for".to_owned()),
            };
            out.push(WorkerOutcome {
                rank,
                pid: p.child.id(),
                attached: region.attached(rank)? != 0,
                steps: region.slot(rank, 8)?.load(Ordering::SeqCst),
                failure,
                stderr_tail: tail,
            });
        }
        Ok(out)
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // On an early error: no worker outlives the run.
        self.kill_all();
    }
}

pub(super) fn describe(s: ExitStatus) -> String {
    Exit::from(s).to_string()
}
