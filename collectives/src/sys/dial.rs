//! Connecting to a TCP peer that may not be listening yet: ranks start in any
//! order, so a refused connection usually means "not yet", and the dialler
//! tries again until its deadline. The TCP transport dials lower ranks this
//! way, and every rank dials the store on rank 0 this way.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::deadline::Deadline;

/// How a dial paces and judges its attempts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Redial {
    /// Pause after the first failed round; doubled after each, up to `max_pause`.
    pub first_pause: Duration,
    /// The longest pause between rounds.
    pub max_pause: Duration,
    /// The longest single connect attempt (the deadline bounds it too).
    pub attempt: Duration,
    /// Whether a failed attempt is worth another: `false` ends the dial.
    pub retry: fn(&io::Error) -> bool,
}

/// Why a dial gave up.
#[derive(Debug)]
pub(crate) enum DialError {
    /// An attempt failed in a way `Redial::retry` says trying again cannot fix.
    Failed {
        /// Where that attempt went.
        addr: SocketAddr,
        /// What it got.
        error: io::Error,
    },
    /// The deadline passed; `last` is the last failure seen, if any.
    Expired {
        /// The last attempt's (or name lookup's) error.
        last: Option<String>,
    },
}

/// Connect errors that mean "nobody there yet" or "the path is not up yet":
/// worth another try while the deadline allows.
pub(crate) fn not_there_yet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::TimedOut
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::Interrupted
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
    )
}

/// Connects with `connect` to one of the addresses `resolve` returns, round
/// after round (resolving again each round: name lookups can fail while a
/// cluster boots), until an attempt succeeds, one fails for good, or
/// `deadline` passes.
///
/// `resolve` returns the addresses to try, or why it could not name any;
/// `connect` makes one attempt bounded by the given time.
pub(crate) fn dial<S>(
    deadline: &Deadline,
    policy: &Redial,
    mut resolve: impl FnMut() -> Result<Vec<SocketAddr>, String>,
    mut connect: impl FnMut(SocketAddr, Duration) -> io::Result<S>,
) -> Result<S, DialError> {
    let mut pause = policy.first_pause;
    let mut last: Option<String> = None;
    let mut tried = false;
    loop {
        match resolve() {
            Ok(addrs) => {
                for addr in addrs {
                    // The first attempt goes out even on a spent deadline.
                    if tried && deadline.expired() {
                        break;
                    }
                    tried = true;
                    // A zero timeout would mean "block forever" to the OS.
                    let wait = deadline
                        .remaining()
                        .min(policy.attempt)
                        .max(Duration::from_millis(1));
                    match connect(addr, wait) {
                        Ok(s) => return Ok(s),
                        Err(e) if (policy.retry)(&e) => last = Some(e.to_string()),
                        Err(error) => return Err(DialError::Failed { addr, error }),
                    }
                }
            }
            Err(why) => last = Some(why),
        }
        if deadline.expired() {
            return Err(DialError::Expired { last });
        }
        std::thread::sleep(pause.min(deadline.remaining()));
        pause = (pause * 2).min(policy.max_pause);
    }
}
