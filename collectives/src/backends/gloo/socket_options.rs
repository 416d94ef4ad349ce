//! Gloo's socket options, as ringside mends them: send buffers never sized
//! below [`FLOOR`], and connections inside the host kept off BBR
//! ([`crate::sys::congestion`]).
//!
//! **Send buffers: what breaks.** Before each send, libgloo's `Pair::send` (Debian's 0.5,
//! and upstream's) sets the socket's `SO_SNDBUF` to the message's size
//! whenever that is larger than the buffer it set last, "so that the write
//! completes synchronously". The first messages on a pair are small (a
//! barrier's, a notification's), so the buffer is set to a few KiB, and
//! setting it also stops the kernel from growing it. Two back-to-back
//! messages of a few KiB then no longer fit: the second write is cut short
//! and left to the event loop, which waits for the socket to take more, and
//! the socket takes more only when the peer acknowledges, which a peer with
//! nothing to send back does after its delayed-ACK timer, about 40 ms.
//! Seen on 2026-11-29 on the 2-core EPYC VM with Gloo's classic ring-chunked
//! all_reduce in a sweep (`RINGSIDE_GLOO_ALGO=ring_chunked ringside bench
//! --backend gloo -b 4K -e 64K -f 4`): every 16 KiB call took 44 or 88 ms
//! against 0.3–0.4 for the sizes around it; `strace` showed both ranks
//! idle for 41 ms until the loop got `EPOLLOUT` and wrote the rest of a
//! 4,144-byte message.
//! The same buffers made the full conformance matrix hang after its 4 MiB
//! cases with either classic algorithm (`ringside conformance --backend gloo
//! --algo ring-chunked --nproc 3`); with this wrapper it passes (17.8 s).
//!
//! **What this does.** [`install`] points libgloo's import of `setsockopt`
//! (its GOT entry; [`super::got`]) at a wrapper that raises an `SO_SNDBUF`
//! request below [`FLOOR`] to it, and after Gloo sets `TCP_NODELAY` on a
//! socket (it does on each as it connects) hands the socket to
//! [`congestion::mend`]. Every other call passes on unchanged, and requests
//! from [`FLOOR`] up, Gloo's own sizing for large messages, are untouched.
//! `RINGSIDE_GLOO_SEND_BUFFER=off` leaves Gloo's sizing as shipped, and
//! `RINGSIDE_TCP_CONGESTION=off` the system's congestion control, for an A/B.

use std::ffi::{c_int, c_void};
use std::os::fd::BorrowedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::got::{self, LIBGLOO};
use crate::sys::congestion;

/// The variable that keeps Gloo's own send buffer sizing (`off`, `0` or `false`).
pub(super) const ENV: &str = "RINGSIDE_GLOO_SEND_BUFFER";

/// Whether the wrapper raises small send buffers (not turned off by [`ENV`]).
static RAISE: AtomicBool = AtomicBool::new(false);

/// The smallest send buffer Gloo may ask for: room for many small messages
/// in a row (the kernel doubles the figure for its own bookkeeping).
pub(super) const FLOOR: c_int = 256 << 10;

/// Points libgloo's `setsockopt` at the wrapper, once per process; later
/// calls return the first call's outcome. `Err` says why Gloo sets its
/// sockets' options as shipped (both mends turned off, its import was not
/// found, or an architecture `got` does not handle).
pub(super) fn install() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let raise = !crate::job::switched_off(ENV);
        RAISE.store(raise, Ordering::Relaxed);
        if !raise && !congestion::wanted() {
            return Err(format!("{ENV} and {} turn it off", congestion::ENV));
        }
        got::patch(
            LIBGLOO,
            &[(c"setsockopt", setsockopt_hook as *const () as usize)],
        )
    })
    .clone()
}

/// libgloo's `setsockopt`: an `SO_SNDBUF` below [`FLOOR`] raised to it, and
/// a socket just given `TCP_NODELAY` handed to [`congestion::mend`].
unsafe extern "C" fn setsockopt_hook(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: libc::socklen_t,
) -> c_int {
    // Gloo passes a size_t; the kernel reads an int from it (little-endian
    // hosts read its low half). Anything else is passed on as it came.
    let raise_this = level == libc::SOL_SOCKET && name == libc::SO_SNDBUF;
    if raise_this && !value.is_null() && RAISE.load(Ordering::Relaxed) {
        let len_ok = len as usize >= size_of::<c_int>();
        // SAFETY: the caller says `value` holds `len` bytes, at least an int.
        let asked = len_ok.then(|| unsafe { value.cast::<c_int>().read_unaligned() });
        if let Some(asked) = asked.filter(|&a| a < FLOOR) {
            let raised = raise(asked);
            // SAFETY: a live int of the length given.
            return unsafe {
                libc::setsockopt(
                    fd,
                    level,
                    name,
                    (&raised as *const c_int).cast(),
                    size_of::<c_int>() as libc::socklen_t,
                )
            };
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged.
    let rc = unsafe { libc::setsockopt(fd, level, name, value, len) };
    if rc == 0 && level == libc::IPPROTO_TCP && name == libc::TCP_NODELAY {
        // SAFETY: Gloo's socket, open for the whole of this call.
        let socket = unsafe { BorrowedFd::borrow_raw(fd) };
        // Best effort: a socket the kernel keeps on its algorithm still works.
        let _ = congestion::mend(socket);
    }
    rc
}

/// What a request of `asked` bytes becomes.
fn raise(asked: c_int) -> c_int {
    asked.max(FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_send_buffer_requests_are_raised_to_the_floor_and_large_ones_kept() {
        assert_eq!(raise(4), FLOOR);
        assert_eq!(raise(4144), FLOOR);
        assert_eq!(raise(8 << 20), 8 << 20);
    }

    /// The wrapper itself, on a socket of this process: a small request
    /// leaves a buffer of at least the floor, other options pass unchanged.
    #[test]
    fn the_wrapper_keeps_a_socket_s_send_buffer_at_the_floor() {
        // As `install` leaves it unless RINGSIDE_GLOO_SEND_BUFFER=off.
        RAISE.store(true, Ordering::Relaxed);
        // SAFETY: plain socket calls on a socket this test owns.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            let asked: usize = 4144;
            let len = size_of::<usize>() as libc::socklen_t;
            let rc = setsockopt_hook(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&asked as *const usize).cast(),
                len,
            );
            assert_eq!(rc, 0);
            let mut got: c_int = 0;
            let mut got_len = size_of::<c_int>() as libc::socklen_t;
            let rc = libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut got as *mut c_int).cast(),
                &mut got_len,
            );
            assert_eq!(rc, 0);
            // The kernel doubles the request, capped by net.core.wmem_max;
            // either way far above the 8 KiB that 4,144 bytes would give.
            let cap = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
                .ok()
                .and_then(|s| s.trim().parse::<c_int>().ok())
                .unwrap_or(FLOOR);
            assert!(got >= FLOOR.min(2 * cap), "send buffer {got} bytes");
            assert_eq!(nodelay_through_the_wrapper(fd), 0);
            libc::close(fd);
        }
    }

    /// Gloo sets `TCP_NODELAY` on each socket as it connects: through the
    /// wrapper, a loopback connection on bbr leaves it for cubic.
    #[test]
    fn the_wrapper_moves_a_loopback_connection_off_bbr_when_gloo_sets_nodelay() {
        use std::os::fd::{AsFd, AsRawFd};
        let (client, _server) = congestion::tests::loopback_pair();
        if let Some(why_not) = congestion::tests::skip_bbr(client.as_fd()) {
            eprintln!("skipped: {why_not}");
            return;
        }
        assert_eq!(nodelay_through_the_wrapper(client.as_raw_fd()), 0);
        assert_eq!(
            congestion::algorithm(client.as_fd()).unwrap(),
            congestion::INSTEAD
        );
    }

    /// `TCP_NODELAY` set on `fd` through the wrapper, as Gloo sets it.
    fn nodelay_through_the_wrapper(fd: c_int) -> c_int {
        let on: c_int = 1;
        // SAFETY: a live int of the length given, on the caller's socket.
        unsafe {
            setsockopt_hook(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&on as *const c_int).cast(),
                size_of::<c_int>() as libc::socklen_t,
            )
        }
    }
}
