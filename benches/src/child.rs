//! Running one benchmark job (one or more processes) with a deadline,
//! streaming result records as they arrive.
//!
//! The processes are supervised by the launcher's [`Group`]: each gets its own
//! process group, so a timeout or a failed rank takes down whatever it spawned
//! too (mpirun's ranks, ringside's workers) instead of leaving a rank blocked
//! in a collective forever, and none outlives this runner.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use collectives::launch::{Exit, Group};
use measure::{Record, parse_line};

/// Lines of non-record output kept per job for error reports.
const TAIL_LINES: usize = 30;
/// How long a process may take to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);
/// How often exit status and the deadline are checked.
const POLL: Duration = Duration::from_millis(25);

/// How a job ended.
#[derive(Debug)]
pub struct Outcome {
    /// Records parsed from the processes' stdout, in arrival order.
    pub records: Vec<Record>,
    /// Why the job failed (non-zero exit, timeout, spawn error, malformed
    /// record); `None` if every process exited 0.
    pub failure: Option<String>,
    /// The last lines of other output (stderr and non-record stdout), each
    /// prefixed with the process index, for showing alongside a failure.
    pub tail: Vec<String>,
    /// Wall time of the job.
    pub elapsed: Duration,
    /// CPU time (user and system, every thread) of the job's processes and
    /// the descendants they waited for, start-up included; `None` if it
    /// could not be read.
    pub cpu: Option<Duration>,
}

impl Outcome {
    /// The cores the job kept busy on average over its wall time: what it got
    /// of the machine (beside `--load`'s loops, its share of them).
    pub fn cores(&self) -> Option<f64> {
        let wall = self.elapsed.as_secs_f64();
        (wall > 0.0).then_some(self.cpu?.as_secs_f64() / wall)
    }
}

/// CPU time of this process's children that have ended and been waited for
/// (each including the descendants it waited for: mpirun's ranks, ringside's).
/// Jobs run one at a time, so the difference across one is that job's.
fn children_cpu() -> Option<Duration> {
    // SAFETY: `usage` is a valid out-pointer; getrusage only writes it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) != 0 {
            return None;
        }
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).ok()?)
            .checked_add(Duration::from_micros(u64::try_from(t.tv_usec).ok()?))
    };
    time(usage.ru_utime)?.checked_add(time(usage.ru_stime)?)
}

/// Process groups of the jobs running now, for [`terminate_running`].
static RUNNING: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<libc::pid_t>> {
    // A poisoned lock only means a panic elsewhere; the pid list is still valid.
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// SIGKILLs the process groups of every job [`run`] is currently waiting
/// on. For a Ctrl-C handler: the children live in their own process groups,
/// so the terminal's SIGINT does not reach them.
pub fn terminate_running() {
    for pgid in running().drain(..) {
        // SAFETY: kill(2) has no memory-safety preconditions; -pgid addresses
        // only a group this module created.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

enum Msg {
    Stdout(usize, String),
    Stderr(usize, String),
}

/// Spawns every command (stdin closed, stdout/stderr captured, each
/// supervised by a [`Group`]: its own process group, killed if we die), calls
/// `on_record` for each record as it arrives, and waits until all exit or
/// `timeout` passes. A process that fails (or the timeout) terminates the rest,
/// so ranks waiting on a dead peer do not sit until their own timeouts.
pub fn run(
    commands: Vec<Command>,
    timeout: Duration,
    mut on_record: impl FnMut(&Record),
) -> Outcome {
    let start = Instant::now();
    let cpu_before = children_cpu();
    let deadline = start + timeout;
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut group = Group::new();
    let mut failure: Option<String> = None;

    for (i, mut cmd) in commands.into_iter().enumerate() {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match group.spawn(&mut cmd) {
            Ok(at) => {
                let child = group.child_mut(at);
                if let Some(out) = child.stdout.take() {
                    spawn_reader(out, tx.clone(), move |l| Msg::Stdout(i, l));
                }
                if let Some(err) = child.stderr.take() {
                    spawn_reader(err, tx.clone(), move |l| Msg::Stderr(i, l));
                }
                if let Ok(pgid) = libc::pid_t::try_from(group.pid(at)) {
                    running().push(pgid);
                }
            }
            Err(e) => {
                failure = Some(format!("cannot start {:?}: {e}", cmd.get_program()));
                break;
            }
        }
    }
    // Only the reader threads hold senders now: the channel disconnects once
    // every pipe is closed.
    drop(tx);

    let mut records = Vec::new();
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut handle = |msg: Msg,
                      records: &mut Vec<Record>,
                      tail: &mut VecDeque<String>,
                      failure: &mut Option<String>| {
        let (i, line, is_stdout) = match msg {
            Msg::Stdout(i, l) => (i, l, true),
            Msg::Stderr(i, l) => (i, l, false),
        };
        if is_stdout {
            match parse_line(&line) {
                Ok(Some(rec)) => {
                    on_record(&rec);
                    records.push(rec);
                    return;
                }
                Ok(None) => {}
                Err(e) => {
                    failure.get_or_insert_with(|| format!("process {i}: {e}"));
                }
            }
        }
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(format!("[{i}] {line}"));
    };

    if failure.is_some() {
        terminate(&mut group);
    }
    loop {
        match rx.recv_timeout(POLL) {
            Ok(msg) => handle(msg, &mut records, &mut tail, &mut failure),
            Err(RecvTimeoutError::Timeout) => {}
            // All pipes closed; exit statuses are collected below.
            Err(RecvTimeoutError::Disconnected) => {}
        }
        for i in group.reap() {
            let exit = group.exit(i).unwrap_or(Exit::Unknown);
            if !exit.success() && failure.is_none() {
                failure = Some(format!("process {i} {exit}"));
            }
        }
        if group.all_exited() {
            break;
        }
        if failure.is_some() {
            terminate(&mut group);
            break;
        }
        if Instant::now() >= deadline {
            failure = Some(format!("timed out after {}s", timeout.as_secs()));
            terminate(&mut group);
            break;
        }
    }
    // Drain what the readers still hold. Bounded: a grandchild that keeps a
    // pipe open (e.g. an orphaned rank) must not keep us here.
    let drain_until = Instant::now() + Duration::from_millis(500);
    while let Some(left) = drain_until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(msg) => handle(msg, &mut records, &mut tail, &mut failure),
            Err(_) => break,
        }
    }
    let ours: Vec<u32> = (0..group.len()).map(|i| group.pid(i)).collect();
    running().retain(|p| !ours.iter().any(|&o| libc::pid_t::try_from(o) == Ok(*p)));
    // Every process was reaped above (exited, or killed and waited for).
    let elapsed = start.elapsed();
    let cpu = children_cpu()
        .zip(cpu_before)
        .and_then(|(after, before)| after.checked_sub(before));
    Outcome {
        records,
        failure,
        tail: tail.into(),
        elapsed,
        cpu,
    }
}

fn spawn_reader<R: Read + Send + 'static>(
    pipe: R,
    tx: mpsc::Sender<Msg>,
    wrap: impl Fn(String) -> Msg + Send + 'static,
) {
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(wrap(line)).is_err() {
                break;
            }
        }
    });
}

/// SIGTERM every child's process group (mpirun forwards it to its ranks),
/// then SIGKILL whatever is left after a grace period, and reap.
fn terminate(group: &mut Group) {
    group.signal_running(libc::SIGTERM);
    let until = Instant::now() + TERM_GRACE;
    while Instant::now() < until {
        group.reap();
        if group.all_exited() {
            return;
        }
        thread::sleep(POLL);
    }
    group.kill_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    const LINE: &str = r#"{"impl":"x","collective":"all_reduce","world":2,"bytes":8,"dtype":"float","iters":1,"min_us":1,"median_us":1,"max_us":1,"algbw_gbps":0.008,"busbw_gbps":0.008,"wrong":0}"#;

    #[test]
    fn collects_records_and_tail() {
        let mut seen = 0;
        let out = run(
            vec![sh(&format!("echo hello; echo '{LINE}'; echo oops >&2"))],
            Duration::from_secs(10),
            |_| seen += 1,
        );
        assert!(out.failure.is_none(), "{:?}", out.failure);
        assert_eq!(out.records.len(), 1);
        assert_eq!(seen, 1);
        assert!(out.tail.iter().any(|l| l == "[0] hello"), "{:?}", out.tail);
        assert!(out.tail.iter().any(|l| l == "[0] oops"), "{:?}", out.tail);
    }

    #[test]
    fn a_job_is_metered_with_the_descendants_it_waited_for() {
        // Two processes, one of which spins in a grandchild it waits for:
        // about 0.3 s of CPU in about 0.3 s of wall time.
        let spin =
            "end=$(($(date +%s%N) + 300000000)); while [ $(date +%s%N) -lt $end ]; do :; done";
        let out = run(
            vec![sh(&format!("sh -c '{spin}'")), sh("sleep 0.3")],
            Duration::from_secs(20),
            |_| {},
        );
        assert!(out.failure.is_none(), "{:?}", out.failure);
        let cpu = out.cpu.unwrap().as_secs_f64();
        // The spinner's 0.3 s, less whatever a loaded machine took from it;
        // well below the two processes' 0.6 s of wall time.
        assert!((0.05..0.5).contains(&cpu), "{cpu} s");
        let cores = out.cores().unwrap();
        assert!(cores > 0.0 && cores <= 1.5, "{cores}");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        // The grandchild `sleep` holds the stdout pipe open: run must still return.
        let out = run(
            vec![sh("sleep 30 & sleep 30")],
            Duration::from_millis(300),
            |_| {},
        );
        assert!(out.failure.unwrap().contains("timed out"));
        assert!(out.elapsed < Duration::from_secs(6), "{:?}", out.elapsed);
    }

    #[test]
    fn a_failed_process_stops_its_peers() {
        let out = run(
            vec![sh("sleep 30"), sh("exit 3")],
            Duration::from_secs(20),
            |_| {},
        );
        let why = out.failure.unwrap();
        assert!(why.contains("process 1") && why.contains('3'), "{why}");
        assert!(out.elapsed < Duration::from_secs(6), "{:?}", out.elapsed);
    }

    #[test]
    fn missing_program_is_a_failure_not_a_panic() {
        let out = run(
            vec![Command::new("/nonexistent/ringside-peer")],
            Duration::from_secs(5),
            |_| {},
        );
        assert!(out.failure.unwrap().contains("cannot start"));
    }

    #[test]
    fn malformed_record_fails_the_job() {
        let bad = LINE.replace(r#""wrong":0"#, r#""wrong":"none""#);
        let out = run(
            vec![sh(&format!("echo '{bad}'"))],
            Duration::from_secs(5),
            |_| {},
        );
        assert!(out.failure.unwrap().contains("bad result line"));
    }
}
