//! Whether this machine can host the ranks a launch asks for, checked before
//! any rank starts: `ringside bench --nproc 1000` on a 2-core laptop used to
//! fail after 84 s with one rank's bare exit code. Now the launch is refused at
//! once, naming the limit that would be exceeded: threads (`ulimit -u`, the
//! kernel's `threads-max`), open files (`ulimit -n`) or memory.
//!
//! The needs are estimates from what a rank holds, stated in the message so
//! a learner can judge them; a limit the system does not report is not
//! checked (never a refusal on a guess).

use crate::error::{Error, Result};

/// Threads a rank runs at most: its main thread, the flight recorder's
/// responder, a TCP transport's progress thread, and one to spare (the store
/// server on rank 0 uses a small bounded pool, counted in `SLACK_THREADS`).
pub const THREADS_PER_RANK: u64 = 4;
/// Threads the launcher and rank 0's store pool need beyond the per-rank ones.
const SLACK_THREADS: u64 = 64;
/// Open files any process needs beyond those counted (libraries, stdio,
/// shared-memory segments while they are mapped).
const SLACK_FILES: u64 = 64;

/// What `nproc` local ranks of a `world`-rank job need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// Local ranks.
    pub nproc: u64,
    /// Threads: [`THREADS_PER_RANK`] per rank, the launcher's stderr reader
    /// per rank, and some slack.
    pub threads: u64,
    /// Open files in the busiest process: rank 0 holds two store
    /// connections per rank (its rendezvous and its flight recorder's) and,
    /// over TCP, one socket per peer; the launcher holds one pipe per rank.
    pub files: u64,
    /// Memory: each rank at least this process's own resident size.
    pub memory: u64,
}

impl Needs {
    /// The needs of `nproc` local ranks of `world`, each at least `rss` bytes.
    pub fn of(nproc: usize, world: usize, rss: u64) -> Needs {
        let (n, w) = (nproc as u64, world as u64);
        Needs {
            nproc: n,
            threads: n
                .saturating_mul(THREADS_PER_RANK + 1)
                .saturating_add(SLACK_THREADS),
            files: w.saturating_mul(3).max(n).saturating_add(SLACK_FILES),
            memory: n.saturating_mul(rss),
        }
    }
}

/// What the machine allows now (`None`: not known, not checked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Have {
    /// Threads this user may still start (`ulimit -u` less those running),
    /// and the kernel's room (`threads-max` less every thread running).
    pub threads: Option<u64>,
    /// The open-file limit a process can reach (`ulimit -Hn`): the launcher
    /// raises its soft limit to what the ranks need, up to it.
    pub files: Option<u64>,
    /// `MemAvailable`.
    pub memory: Option<u64>,
}

/// Refuses `needs` that `have` cannot meet, naming every limit exceeded.
pub fn judge(needs: &Needs, have: &Have) -> Result<()> {
    let mut over = Vec::new();
    if let Some(t) = have.threads.filter(|&t| t < needs.threads) {
        over.push(format!(
            "threads: about {} ({} per rank and the launcher's), but only {t} more may \
             start (`ulimit -u`, /proc/sys/kernel/threads-max)",
            needs.threads,
            THREADS_PER_RANK + 1
        ));
    }
    if let Some(f) = have.files.filter(|&f| f < needs.files) {
        over.push(format!(
            "open files: about {} in rank 0 (two store connections per rank and a \
             socket per peer), but the limit is {f} (`ulimit -Hn`)",
            needs.files
        ));
    }
    if let Some(m) = have.memory.filter(|&m| m < needs.memory) {
        over.push(format!(
            "memory: at least {} MiB (each rank at least {} MiB, this program's own \
             size), but {} MiB are available",
            needs.memory >> 20,
            (needs.memory / needs.nproc.max(1)) >> 20,
            m >> 20
        ));
    }
    if over.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "this machine cannot host {} ranks; nothing was started. Too many for {}. \
         Use fewer ranks (--nproc), or raise the limit",
        needs.nproc,
        over.join("; and for ")
    )))
}

/// Reads what the machine allows now, raising this process's soft open-file
/// limit towards `files_needed` (the ranks inherit it).
pub fn have(files_needed: u64) -> Have {
    Have {
        threads: threads_left(),
        files: raise_files(files_needed),
        memory: meminfo_available(),
    }
}

/// Checks that this machine can host `nproc` local ranks of `world`.
pub fn check(nproc: usize, world: usize) -> Result<()> {
    let needs = Needs::of(nproc, world, own_rss().unwrap_or(0));
    judge(&needs, &have(needs.files))
}

fn rlimit(resource: libc::__rlimit_resource_t) -> Option<libc::rlimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit to write.
    (unsafe { libc::getrlimit(resource, &mut r) } == 0).then_some(r)
}

/// The hard open-file limit, after raising the soft one to `needed` (or as
/// far as the hard one allows) when it is lower.
fn raise_files(needed: u64) -> Option<u64> {
    let r = rlimit(libc::RLIMIT_NOFILE)?;
    if r.rlim_cur != libc::RLIM_INFINITY && r.rlim_cur < needed {
        let raised = libc::rlimit {
            rlim_cur: needed.min(r.rlim_max),
            rlim_max: r.rlim_max,
        };
        // SAFETY: a valid rlimit; lowering nothing, raising the soft limit
        // within the hard one is always allowed.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) };
    }
    (r.rlim_max != libc::RLIM_INFINITY).then_some(r.rlim_max)
}

/// Threads that may still start: the smaller of the user's room under
/// `ulimit -u` and the kernel's under `threads-max`, both counting every
/// thread on the machine (which /proc/loadavg gives for free; for `ulimit -u`
/// that is conservative: other users' threads do not count against it).
fn threads_left() -> Option<u64> {
    let running = std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse::<u64>()
        .ok()?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|max| max.saturating_sub(running));
    let user = rlimit(libc::RLIMIT_NPROC)
        .filter(|r| r.rlim_cur != libc::RLIM_INFINITY)
        .map(|r| r.rlim_cur.saturating_sub(running));
    match (kernel, user) {
        (Some(k), Some(u)) => Some(k.min(u)),
        (k, u) => k.or(u),
    }
}

/// This process's resident size (VmRSS), in bytes.
fn own_rss() -> Option<u64> {
    status_kib("/proc/self/status", "VmRSS:").map(|k| k * 1024)
}

fn meminfo_available() -> Option<u64> {
    status_kib("/proc/meminfo", "MemAvailable:").map(|k| k * 1024)
}

/// The number of kB on the line starting with `key` in a /proc file.
fn status_kib(path: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ringside bench --nproc 1000` on a 2-core machine with `ulimit -n
    /// 1024` failed after 84 s with "rank 866 exited with code 1 … wrote
    /// nothing to stderr": now it is refused up front, naming open files.
    #[test]
    fn bench_nproc_1000_with_1024_open_files_is_refused_up_front() {
        let needs = Needs::of(1000, 1000, 10 << 20);
        let have = Have {
            threads: Some(90_000),
            files: Some(1024),
            memory: Some(23 << 30),
        };
        let e = judge(&needs, &have).unwrap_err().to_string();
        assert!(e.contains("cannot host 1000 ranks"), "{e}");
        assert!(e.contains("open files: about 3064"), "{e}");
        assert!(e.contains("limit is 1024"), "{e}");
        assert!(!e.contains("threads:") && !e.contains("memory:"), "{e}");
    }

    #[test]
    fn every_limit_exceeded_is_named_and_unknown_limits_are_not_checked() {
        let needs = Needs::of(1000, 1000, 100 << 20);
        let tight = Have {
            threads: Some(3000),
            files: Some(1024),
            memory: Some(8 << 30),
        };
        let e = judge(&needs, &tight).unwrap_err().to_string();
        assert!(e.contains("threads: about 5064"), "{e}");
        assert!(e.contains("open files"), "{e}");
        assert!(e.contains("memory: at least 100000 MiB"), "{e}");
        assert!(judge(&needs, &Have::default()).is_ok());
        let small = Needs::of(4, 4, 100 << 20);
        assert!(judge(&small, &tight).is_ok());
    }

    #[test]
    fn this_machine_hosts_two_ranks() {
        check(2, 2).unwrap();
    }
}
