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

use std::io;
use std::net::IpAddr;
use std::os::fd::BorrowedFd;

use socket2::SockRef;

/// The variable that keeps the system's choice (`off`, `0` or `false`).
pub(crate) const ENV: &str = "RINGSIDE_TCP_CONGESTION";

/// The algorithm host-local connections leave.
const PACED: &str = "bbr";

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
pub(crate) fn mend(fd: BorrowedFd<'_>) -> io::Result<Mended> {
    if !wanted() {
        return Ok(Mended::Kept);
    }
    let socket = SockRef::from(&fd);
    let ip = |a: io::Result<socket2::SockAddr>| a.ok()?.as_socket().map(|a| a.ip());
    let (Some(local), Some(peer)) = (ip(socket.local_addr()), ip(socket.peer_addr())) else {
        return Ok(Mended::Kept);
    };
    if !host_local(local, peer) || algorithm(fd)? != PACED {
        return Ok(Mended::Kept);
    }
    choose(fd, INSTEAD)?;
    Ok(Mended::Moved)
}

/// Whether host-local connections leave BBR ([`ENV`] not set to `off`).
pub(crate) fn wanted() -> bool {
    !crate::job::switched_off(ENV)
}

/// Puts the socket on the algorithm called `name`.
fn choose(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    SockRef::from(&fd).set_tcp_congestion(name.as_bytes())
}

/// The socket's congestion control algorithm, by name.
pub(crate) fn algorithm(fd: BorrowedFd<'_>) -> io::Result<String> {
    let name = SockRef::from(&fd).tcp_congestion()?;
    // The kernel fills its whole name buffer, NUL-padded.
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Whether a connection from `local` to `peer` stays on this host.
fn host_local(local: IpAddr, peer: IpAddr) -> bool {
    peer.is_loopback() || peer.to_canonical() == local.to_canonical()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

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
        let fd = client.as_fd();
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
    pub(crate) fn skip_bbr(fd: BorrowedFd<'_>) -> Option<String> {
        if !wanted() {
            return Some(format!("{ENV} is set to off"));
        }
        choose(fd, PACED)
            .err()
            .map(|e| format!("this kernel does not let this process choose bbr ({e})"))
    }
}
