//! How a process ended, in the launcher's words: an exit code or a signal,
//! and whether the launcher itself stopped it.

use std::fmt;
use std::os::unix::process::ExitStatusExt;

/// How a rank's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// Its status could not be read.
    Unknown,
}

impl Exit {
    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// The shell's view: the code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
            Exit::Unknown => 1,
        }
    }
}

/// How any child process ended (for programs that supervise children of
/// their own, such as Hogwild's workers), in the launcher's words.
impl From<std::process::ExitStatus> for Exit {
    fn from(st: std::process::ExitStatus) -> Exit {
        match (st.code(), st.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            (None, None) => Exit::Unknown,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Exit::Code(c) => write!(f, "exited with code {c}"),
            Exit::Signal(s) => write!(f, "was killed by signal {s} ({})", signal_name(s)),
            Exit::Unknown => f.write_str("ended with an unknown status"),
        }
    }
}

/// The name of a signal number (`SIGKILL`), or `signal N`.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// How the launcher ended a rank that was still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It exited after SIGTERM.
    Terminated,
    /// It outlived the grace period (or a second Ctrl-C) and got SIGKILL.
    Killed,
}
