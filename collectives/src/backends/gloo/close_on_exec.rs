//! Gloo's descriptors, closed in every program a rank starts.
//!
//! **What breaks.** Debian's libgloo (0.5, as upstream) opens its sockets
//! with `socket` and `accept` and its event loop's descriptor with
//! `epoll_create`, none of them close-on-exec (`/proc/<pid>/fdinfo` flags
//! 04002 on a rank's pair sockets, 2026-11-28). Every program a rank starts
//! while its communicator lives (a helper script, `nvidia-smi`, a data
//! loader's worker) inherits them and keeps the connections open after the
//! rank is gone: a peer then sees no end of stream when the rank dies, and
//! waits out the whole timeout instead of failing at once. Everything Rust's
//! standard library opens is close-on-exec, as is everything of ringside's.
//!
//! **What this does.** [`install`] points libgloo's imports of `socket`,
//! `accept` and `epoll_create` (its GOT entries, as [`super::loop_yield`]
//! does for its loop; [`super::got`]) at wrappers that ask for the same
//! descriptor close-on-exec: `SOCK_CLOEXEC`, `accept4(…, SOCK_CLOEXEC)`,
//! `epoll_create1(EPOLL_CLOEXEC)`. Nothing else changes: a process that
//! forks without `exec` still shares them, as with any library.

use std::ffi::c_int;
use std::sync::OnceLock;

use super::got::{self, LIBGLOO};

/// Points libgloo's `socket`, `accept` and `epoll_create` at the wrappers,
/// once per process; later calls return the first call's outcome. `Err`
/// says why Gloo's descriptors stay inheritable (its imports were not
/// found, or an architecture `got` does not handle).
pub(super) fn install() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| got::patch(LIBGLOO, &hooks())).clone()
}

/// Each import and its wrapper.
fn hooks() -> [(&'static std::ffi::CStr, usize); 3] {
    [
        (c"socket", socket_hook as *const () as usize),
        (c"accept", accept_hook as *const () as usize),
        (c"epoll_create", epoll_create_hook as *const () as usize),
    ]
}

/// libgloo's `socket`: the same socket, close-on-exec.
unsafe extern "C" fn socket_hook(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: the caller's arguments, with one more flag in the type.
    unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) }
}

/// libgloo's `accept`: the same connection, close-on-exec.
unsafe extern "C" fn accept_hook(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments; accept4 with SOCK_CLOEXEC is accept
    // plus the flag.
    unsafe { libc::accept4(fd, addr, len, libc::SOCK_CLOEXEC) }
}

/// libgloo's `epoll_create`: `epoll_create1`, close-on-exec. `size` only
/// has to be positive (the kernel ignores it otherwise), and that check is
/// kept.
unsafe extern "C" fn epoll_create_hook(size: c_int) -> c_int {
    if size <= 0 {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    // SAFETY: no preconditions.
    unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Communicator;
    use std::process::Command;

    const CHILD: &str = "RINGSIDE_CLOSE_ON_EXEC_TEST_CHILD";

    /// What broke: a program a rank started while its Gloo communicator
    /// lived inherited the pair sockets and the loop's epoll descriptor, and
    /// held the connections open after the rank. Runs
    /// [`program_started_by_a_rank_child`] alone in a process of its own, so
    /// that no other test's descriptors are in it.
    #[test]
    fn a_program_a_rank_starts_inherits_none_of_its_gloo_descriptors() {
        crate::testing::run_alone_in_child(
            "backends::gloo::close_on_exec::tests::program_started_by_a_rank_child",
            CHILD,
        );
    }

    /// Two ranks connect; each starts `ls -l /proc/self/fd` (which lists the
    /// descriptors it inherited) and then meets the other at a barrier. The
    /// listing may hold no socket or epoll descriptor that one taken before
    /// the ranks connected did not.
    #[test]
    #[ignore = "run in a process of its own by a_program_a_rank_starts_inherits_none_of_its_gloo_descriptors"]
    fn program_started_by_a_rank_child() {
        if std::env::var_os(CHILD).is_none() {
            return eprintln!("skipped: only meaningful as the child of its parent test");
        }
        // The socket and epoll descriptors a started program holds: the
        // targets of its /proc/self/fd links. Whatever this process itself
        // inherited (a CI runner's socket, say) is in the listing taken before
        // any communicator, and does not count.
        let held = || -> std::collections::BTreeSet<String> {
            let out = Command::new("ls")
                .args(["-l", "/proc/self/fd"])
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.rsplit_once(" -> ").map(|(_, t)| t.to_string()))
                .filter(|t| t.starts_with("socket:") || t.contains("eventpoll"))
                .collect()
        };
        let before = held();
        let listings = std::sync::Mutex::new(Vec::new());
        super::super::tests::world(2, |c| {
            let now = held();
            listings.lock().unwrap().push(now);
            c.barrier().unwrap();
        });
        let listings = listings.into_inner().unwrap();
        assert_eq!(listings.len(), 2);
        for (r, now) in listings.iter().enumerate() {
            let gained: Vec<_> = now.difference(&before).collect();
            assert!(
                gained.is_empty(),
                "rank {r}'s child inherited Gloo's descriptors: {gained:?}"
            );
        }
    }

    #[test]
    fn install_points_libgloos_descriptor_imports_at_the_wrappers() {
        install().unwrap();
        for (name, hook) in hooks() {
            let now = got::current(LIBGLOO, name);
            assert!(!now.is_empty(), "libgloo's {name:?} not found");
            assert!(now.iter().all(|&a| a == hook), "{name:?} still {now:x?}");
        }
        assert_eq!(install(), Ok(()));
    }

    #[test]
    fn the_wrappers_give_what_libc_gives_close_on_exec() {
        let cloexec = |fd: c_int| {
            assert!(fd >= 0, "{}", std::io::Error::last_os_error());
            // SAFETY: a descriptor of ours.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            flags & libc::FD_CLOEXEC != 0
        };
        // SAFETY: plain calls; every descriptor is closed below.
        unsafe {
            let ep = epoll_create_hook(1);
            assert!(cloexec(ep));
            assert_eq!(epoll_create_hook(0), -1, "epoll_create(0) is EINVAL");
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
            let l = socket_hook(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
            assert!(cloexec(l));
            // The type's other flags survive.
            assert_ne!(libc::fcntl(l, libc::F_GETFL) & libc::O_NONBLOCK, 0);
            let mut a: libc::sockaddr_in = std::mem::zeroed();
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
            let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let sa = &a as *const libc::sockaddr_in as *const libc::sockaddr;
            assert_eq!(libc::bind(l, sa, size), 0);
            assert_eq!(libc::listen(l, 1), 0);
            let mut bound: libc::sockaddr_in = std::mem::zeroed();
            let mut len = size;
            let bp = &mut bound as *mut libc::sockaddr_in as *mut libc::sockaddr;
            assert_eq!(libc::getsockname(l, bp, &mut len), 0);
            let c = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert_eq!(libc::connect(c, bp, len), 0);
            let mut peer: libc::sockaddr_in = std::mem::zeroed();
            let mut plen = size;
            let pp = &mut peer as *mut libc::sockaddr_in as *mut libc::sockaddr;
            let s = loop {
                let s = accept_hook(l, pp, &mut plen);
                if s >= 0 || *libc::__errno_location() != libc::EAGAIN {
                    break s;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            };
            assert!(cloexec(s));
            assert_eq!(plen, size, "the peer's address came back");
            for fd in [ep, l, c, s] {
                libc::close(fd);
            }
        }
    }
}
