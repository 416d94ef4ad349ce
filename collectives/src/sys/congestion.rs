//! TCP congestion control for connections that never leave the host.
//!
//! **What breaks.** Some kernels default to BBR
//! (`net.ipv4.tcp_congestion_control`; the 2-core EPYC VM this project is
//! built on does, most Linux installs use cubic). BBR paces each connection
//! at the bandwidth it has measured, and between two ranks on one host what
//! it measures is how often the receiving rank got a CPU: on a busy machine,
//! little, and the sender then paces below what the next, luckier stretch
//! could take. Measured on 2026-11-29 on that VM (02:55–03:23 UTC), Gloo's
//! all_reduce against torch's gloo in the same runs (`ringside bench
//! --backend gloo --peer torch --repeat 3 -b 1M -e 64M -f 4 -n 10`), this
//! module on and `off` in turn, medians over the runs:
//! - beside two busy loops (`--load 2`, 6 runs each): 4 MiB 4.0 against
//!   5.0 ms, 16 MiB **12.3 against 24.7**, 64 MiB 102 against 94 (torch's
//!   6.4–7.2, 24–29 and 147–150); every size at most 1.0× torch's in 5 of
//!   6 runs against 3 of 6;
//! - idle (3 runs each of `-b 4 -e 64M -f 4`): 4 MiB 1.9–2.2 against
//!   3.6–4.6 ms, 16 MiB 8.1–10.8 against 15.2–17.6, 64 MiB 34–45 against
//!   55–60.
//!
//! The TCP transport, alone (`ringside bench --transport tcp -b 1M -e 64M -f
//! 4 -n 10`, 2 runs each way in turn): idle 4 MiB 1.5–1.7 against 2.7–3.2
//! ms, 16 MiB 6.6–11.1 against 11.6–15.4, 64 MiB alike (52–53 against
//! 51–65); under `--load 2` no clear difference in two runs (16 MiB 20–34
//! against 23–39 ms).
//!
//! Torch's connections stay on BBR: they are not ringside's to mend. Where
//! the whole machine is on cubic nothing here changes, for either side.
//!
//! **What this does.** [`mend`] moves a connected socket whose peer is on
//! this host (a loopback address, or the socket's own address: the kernel
//! routes such a connection through loopback) from `bbr` to `cubic`, which
//! any process may choose. Connections to other hosts keep the system's
//! choice: nothing was measured there. The Gloo backend calls it on Gloo's
//! sockets (when Gloo sets `TCP_NODELAY` on them, right after connecting),
//! the TCP transport on its mesh's. `RINGSIDE_TCP_CONGESTION=off` keeps the
//! system's choice everywhere, for an A/B.

use std::ffi::c_int;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

/// The variable that keeps the system's choice (`off`, `0` or `false`).
pub(crate) const ENV: &str = "RINGSIDE_TCP_CONGESTION";

/// The algorithm host-local connections leave.
pub(crate) const PACED: &str = "bbr";

/// The algorithm they take instead: built into every distribution kernel, and
/// open to unprivileged processes (`net.ipv4.tcp_allowed_congestion_control`).
pub(crate) const INSTEAD: &str = "cubic";

/// What [`mend`] did to a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mended {
    /// Moved from `bbr` to `cubic`.
    Moved,
    /// Left alone: turned off, not a host-local TCP connection, or not on `bbr`.
    Kept,
}

/// Moves `fd`, a connected TCP socket, from `bbr` to `cubic` if its peer is
/// on this host. An error is the kernel refusing to read or set the
/// algorithm; callers go on with the socket as it is.
pub(crate) fn mend(fd: RawFd) -> io::Result<Mended> {
    if crate::job::switched_off(ENV) {
        return Ok(Mended::Kept);
    }
    let (Some(local), Some(peer)) = (
        address(fd, libc::getsockname),
        address(fd, libc::getpeername),
    ) else {
        return Ok(Mended::Kept);
    };
    if !host_local(local.ip(), peer.ip()) || algorithm(fd)? != PACED {
        return Ok(Mended::Kept);
    }
    choose(fd, INSTEAD)?;
    Ok(Mended::Moved)
}

/// Puts the socket on the algorithm called `name`.
pub(crate) fn choose(fd: RawFd, name: &str) -> io::Result<()> {
    // SAFETY: a live buffer of the length given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a connection from `local` to `peer` stays on this host.
fn host_local(local: IpAddr, peer: IpAddr) -> bool {
    peer.is_loopback() || peer.to_canonical() == local.to_canonical()
}

/// The socket's congestion control algorithm, by name.
pub(crate) fn algorithm(fd: RawFd) -> io::Result<String> {
    // TCP_CA_NAME_MAX is 16.
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: a live buffer of the length given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let name = &name[..(len as usize).min(name.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// The socket's own (`getsockname`) or its peer's (`getpeername`) address,
/// if it is an IPv4 or IPv6 one.
fn address(
    fd: RawFd,
    get: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int,
) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: a live buffer of the length given.
    if unsafe {
        get(
            fd,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    } != 0
    {
        return None;
    }
    match c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in for this family.
            let a =
                unsafe { *(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 for this family.
            let a = unsafe {
                *(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn loopback_and_own_address_peers_are_host_local_others_not() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let me: IpAddr = "10.1.2.3".parse().unwrap();
        let other: IpAddr = "10.1.2.4".parse().unwrap();
        assert!(host_local(lo, lo));
        assert!(host_local(me, me));
        assert!(host_local(me, "::ffff:10.1.2.3".parse().unwrap()));
        assert!(host_local("::1".parse().unwrap(), "::1".parse().unwrap()));
        assert!(!host_local(me, other));
    }

    /// On a real loopback connection: a socket put on `bbr` (where this
    /// kernel has it) is moved to `cubic`; one on another algorithm is kept.
    #[test]
    fn a_loopback_connection_on_bbr_is_moved_to_cubic() {
        let (client, _server) = loopback_pair();
        let fd = client.as_raw_fd();
        choose(fd, INSTEAD).expect("cubic is open to every process");
        assert_eq!(mend(fd).unwrap(), Mended::Kept);
        assert_eq!(algorithm(fd).unwrap(), INSTEAD);
        let Some(why_not) = skip_bbr(fd) else {
            assert_eq!(mend(fd).unwrap(), Mended::Moved);
            assert_eq!(algorithm(fd).unwrap(), INSTEAD);
            return;
        };
        eprintln!("skipped the bbr half: {why_not}");
    }

    /// The two ends of a fresh loopback connection: (client, server).
    pub(crate) fn loopback_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// Puts `fd` on bbr for a test, or says why a test cannot.
    pub(crate) fn skip_bbr(fd: RawFd) -> Option<String> {
        if crate::job::switched_off(ENV) {
            return Some(format!("{ENV} is set to off"));
        }
        choose(fd, PACED)
            .err()
            .map(|e| format!("this kernel does not let this process choose bbr ({e})"))
    }
}
