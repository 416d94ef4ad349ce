//! Handing the memory file's descriptor to the workers (the file-descriptor
//! sharing strategy): a Unix socket in the abstract namespace, `SO_PEERCRED` to
//! check the peer is one of our workers, the descriptor as `SCM_RIGHTS`.

use super::*;

/// Answers every pending connection on the descriptor socket. A connection that is
/// not one of our waiting workers, or that misbehaves, is dropped: that worker (if it
/// is one) then fails and is reported by its exit status.
pub(super) fn serve_descriptors(
    listener: &UnixListener,
    children: &mut Children,
    fd: RawFd,
    len: usize,
) {
    while let Ok((stream, _)) = listener.accept() {
        let _ = serve_one(stream, children, fd, len);
    }
}

pub(super) fn serve_one(
    mut stream: UnixStream,
    children: &mut Children,
    fd: RawFd,
    len: usize,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let pid = peer_pid(&stream)?;
    let mut rank = [0u8; 8];
    stream.read_exact(&mut rank)?;
    let rank = u64::from_le_bytes(rank) as usize;
    let Some(p) = children.procs.get_mut(rank) else {
        return Err(io::Error::other("no such rank"));
    };
    // Only the worker process we started for this rank gets the memory.
    if p.served || i64::from(p.pid) != i64::from(pid) {
        return Err(io::Error::other("not our worker"));
    }
    send_fd(&stream, fd, &(len as u64).to_le_bytes())?;
    p.served = true;
    Ok(())
}

pub(super) fn peer_pid(stream: &UnixStream) -> io::Result<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut size = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `size` are valid for writing and sized for SO_PEERCRED.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut size,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}

/// Room for one control message carrying one descriptor.
struct FdControl {
    /// u64 words: the control buffer must be aligned for `cmsghdr`.
    words: Vec<u64>,
    /// CMSG_SPACE for one fd, in bytes.
    space: usize,
}

impl FdControl {
    fn new() -> Self {
        // SAFETY: CMSG_SPACE is arithmetic.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        FdControl {
            words: vec![0u64; space.div_ceil(8)],
            space,
        }
    }

    /// A message of the one buffer `iov` with this control buffer; both must
    /// outlive the sendmsg/recvmsg that uses it.
    fn header(&mut self, iov: &mut libc::iovec) -> libc::msghdr {
        // SAFETY: an all-zero msghdr is a valid empty message.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov;
        msg.msg_iovlen = 1;
        msg.msg_control = self.words.as_mut_ptr().cast();
        msg.msg_controllen = self.space as _;
        msg
    }
}

/// Sends `payload` with `fd` attached as `SCM_RIGHTS`: the receiver gets its own
/// descriptor for the same open file.
pub(super) fn send_fd(stream: &UnixStream, fd: RawFd, payload: &[u8]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    let mut control = FdControl::new();
    let msg = control.header(&mut iov);
    // SAFETY: msg_control points at `space` bytes, enough for one header with one fd
    // (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and CMSG_DATA is in bounds.
    let sent = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::other("no room for the control message"));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent as usize != payload.len() {
        return Err(io::Error::other("short sendmsg"));
    }
    Ok(())
}

/// Receives `payload.len()` bytes and the descriptor sent with them.
pub(super) fn recv_fd(stream: &UnixStream, payload: &mut [u8]) -> io::Result<OwnedFd> {
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    let mut control = FdControl::new();
    let mut msg = control.header(&mut iov);
    // SAFETY: buffers as described by `msg`, all live for the call.
    let got = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    if got as usize != payload.len() {
        return Err(io::Error::other(format!(
            "expected {} bytes with the descriptor, got {got}",
            payload.len()
        )));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("the control message was truncated"));
    }
    // SAFETY: the kernel filled `control` and set msg_controllen; CMSG_FIRSTHDR
    // returns null when there is no header, which is checked.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("no descriptor came with the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The worker's side of the descriptor hand-over: connect, say who we are, receive
/// the descriptor and the region's length.
pub(super) fn receive_descriptor(
    name: &str,
    rank: usize,
    timeout: Duration,
) -> Result<(OwnedFd, usize)> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| os("naming the abstract socket", e))?;
    let mut stream = UnixStream::connect_addr(&addr)
        .map_err(|e| os(&format!("connecting to the parent's socket {name:?}"), e))?;
    let io_err = |e| os("receiving the shared memory's descriptor", e);
    stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
    stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
    stream
        .write_all(&(rank as u64).to_le_bytes())
        .map_err(io_err)?;
    let mut len = [0u8; 8];
    let fd = recv_fd(&stream, &mut len).map_err(io_err)?;
    let len = u64::from_le_bytes(len) as usize;
    // The descriptor must really be a file of that size, not whatever came along.
    let file = File::from(fd);
    let size = file.metadata().map_err(io_err)?.len() as usize;
    if size != len {
        return Err(Error::InvalidArgument(format!(
            "the descriptor's file has {size} bytes, the parent said {len}"
        )));
    }
    Ok((OwnedFd::from(file), len))
}
