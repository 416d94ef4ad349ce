//! The Linux system calls the transports and the store make, behind safe
//! wrappers, and the one place their failures become [`std::io::Error`]s and
//! are sorted into "timed out", "connection lost" and "something else".
//!
//! Laid out as mio's `sys/unix`: the transports say *what* they want (send
//! these two slices, wait until this socket is readable, connect before the
//! deadline), this module says how.
//!
//! - [`affinity`]: binding a rank's thread to a share of the CPUs (the
//!   shared-memory transport, the Gloo backend).
//! - [`autogroup`]: whether this process is a scheduling group of its own.
//! - [`congestion`]: connections inside the host kept off BBR (the TCP
//!   transport's and the Gloo backend's).
//! - [`futex`]: the shared-memory transport's doorbell.
//! - [`slice`]: a shorter scheduler slice, so that a woken rank runs at once.
//! - [`socket`]: non-blocking vectored `sendmsg`/`recvmsg` for the TCP transport.
//! - [`dial`]: "connect, retrying until the deadline", for the TCP transport's
//!   mesh and the store client alike.

pub(crate) mod affinity;
// Asked by the placement of the Gloo backend and the TCP transport.
pub(crate) mod autogroup;
pub(crate) mod congestion;
pub(crate) mod dial;
pub(crate) mod futex;
// Asked only by the Gloo backend, for its rank and loop threads.
#[cfg(feature = "gloo")]
pub(crate) mod slice;
pub(crate) mod socket;

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A setting of the calling thread (its CPUs, its scheduler slice) in force,
/// put back as it was when dropped on that thread. Dropped on another (a
/// communicator moved to another thread and dropped there) it leaves that
/// thread alone. Best effort: there is nobody to tell of a failure.
#[derive(Debug)]
pub(crate) struct OnThisThread<T> {
    previous: T,
    put_back: fn(&T) -> io::Result<()>,
    tid: libc::pid_t,
}

impl<T> OnThisThread<T> {
    /// Remembers `previous`, the setting before the caller changed it, and
    /// how to put it back.
    pub(crate) fn new(previous: T, put_back: fn(&T) -> io::Result<()>) -> OnThisThread<T> {
        OnThisThread {
            previous,
            put_back,
            tid: this_thread(),
        }
    }
}

impl<T> Drop for OnThisThread<T> {
    fn drop(&mut self) {
        if this_thread() == self.tid {
            let _ = (self.put_back)(&self.previous);
        }
    }
}

fn this_thread() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// The result of a system call that reports failure as a negative return
/// value with the reason in `errno`.
pub(crate) fn cvt(n: isize) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Milliseconds for `poll`, rounded up so a wait never becomes a 0 ms spin.
pub(crate) fn poll_ms(d: Duration) -> libc::c_int {
    let ms = d.as_micros().div_ceil(1000);
    ms.min(libc::c_int::MAX as u128) as libc::c_int
}

/// Waits up to `timeout` for `fd` to become readable (for a listener: for a
/// connection to arrive). `false` on a timeout, a signal or a poll error:
/// callers retry their non-blocking call either way, which reports real errors.
pub(crate) fn wait_readable(fd: RawFd, timeout: Duration) -> bool {
    wait_for(fd, libc::POLLIN, timeout)
}

/// Waits up to `timeout` for `fd` to take more bytes; `false` as for
/// [`wait_readable`].
pub(crate) fn wait_writable(fd: RawFd, timeout: Duration) -> bool {
    wait_for(fd, libc::POLLOUT, timeout)
}

fn wait_for(fd: RawFd, events: libc::c_short, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one live, initialised pollfd, and a count of exactly one.
    let n = unsafe { libc::poll(&mut p, 1, poll_ms(timeout)) };
    n > 0
}

/// Whether an I/O error means a socket timeout ran out (`SO_RCVTIMEO` and
/// `SO_SNDTIMEO` report `EAGAIN`) rather than that something broke.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Whether an I/O error on a connected socket means the connection is gone
/// (the peer closed or reset it, or the network path to it died), so the
/// peer should be reported lost rather than the call reported failed.
pub(crate) fn connection_lost(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::UnexpectedEof
        || matches!(
            e.raw_os_error(),
            Some(
                libc::ECONNRESET
                    | libc::EPIPE
                    | libc::ECONNABORTED
                    | libc::ETIMEDOUT
                    | libc::EHOSTUNREACH
                    | libc::ENETUNREACH
                    | libc::ENETDOWN
                    | libc::EHOSTDOWN
                    | libc::ENOTCONN
            )
        )
}
