//! Non-blocking vectored socket I/O: a frame header and its payload leave in
//! one `sendmsg` and (usually) arrive in one `recvmsg`, so a small message
//! costs one system call each way.

use std::io;
use std::os::fd::RawFd;

use super::cvt;

fn iov(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    }
}

/// One non-blocking `sendmsg` of `a` followed by `b` (either may be empty).
/// MSG_NOSIGNAL: a dead peer gives EPIPE, never SIGPIPE.
pub(crate) fn send2(fd: RawFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let v = [iov(a), iov(b)];
    let (ptr, cnt) = match (a.is_empty(), b.is_empty()) {
        (true, _) => (v[1..].as_ptr(), 1),
        (false, true) => (v.as_ptr(), 1),
        (false, false) => (v.as_ptr(), 2),
    };
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = ptr as *mut libc::iovec;
    msg.msg_iovlen = cnt as _;
    // SAFETY: the iovecs point into `a` and `b`, which outlive the call, and
    // the kernel only reads from them.
    cvt(unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) })
}

/// One non-blocking `recvmsg` filling `a`, then `b` (which may be empty).
pub(crate) fn recv2(fd: RawFd, a: &mut [u8], b: &mut [u8]) -> io::Result<usize> {
    if b.is_empty() {
        return recv1(fd, a);
    }
    let v = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = v.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = 2;
    // SAFETY: the iovecs point into the exclusively borrowed `a` and `b`,
    // which outlive the call; the kernel writes at most their lengths.
    cvt(unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) })
}

/// One non-blocking `recv` into `buf`.
pub(crate) fn recv1(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    recv_flags(fd, buf, 0)
}

/// One non-blocking `recv` into `buf` with extra `flags` (e.g. `MSG_PEEK`).
pub(crate) fn recv_flags(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `buf` is exclusively borrowed for the call; the kernel writes at
    // most `buf.len()` bytes.
    cvt(unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags | libc::MSG_DONTWAIT,
        )
    })
}
