//! Link latency without `sch_netem`: a switch in user space that holds every
//! frame for a fixed one-way delay before it passes it on.
//!
//! Each host's `eth0` is a TAP device whose other end is a file descriptor in
//! this process. One thread reads the frames every host sends, keeps them in
//! arrival order (the delay is the same for all, so the queue stays sorted by
//! due time) and, once a frame's time is up, writes it to the host that owns
//! its destination MAC address (learned from the frames each host sends), or
//! to every other host for broadcasts and unknown addresses, as a learning
//! switch does. A `tc` token bucket on `eth0` still shapes bandwidth: it sits
//! in front of the TAP, so a frame waits for its turn on the wire and then
//! travels for the delay, as on a long link.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::HostsError;

/// Longest sleep between checks of the stop flag.
const TICK: Duration = Duration::from_millis(20);

/// Largest frame a TAP hands over (the MTU plus the Ethernet header, with room).
const MAX_FRAME: usize = 65_536;

/// The switch thread and the TAP devices it serves; dropping it stops the
/// thread and closes the devices (the kernel removes a TAP when its last
/// descriptor closes).
#[derive(Debug)]
pub(crate) struct DelayLine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Opens a TAP device named `name` (in this namespace; the caller moves it).
pub(crate) fn open_tap(name: &str) -> Result<OwnedFd, HostsError> {
    let unavailable =
        |why: String| HostsError::Unavailable(format!("no TAP device for a delay line: {why}"));
    if name.len() >= libc::IFNAMSIZ {
        return Err(unavailable(format!("interface name {name:?} is too long")));
    }
    // SAFETY: a NUL-terminated path and valid flags; the result is checked.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(unavailable(format!(
            "/dev/net/tun: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct ifreq: the name, then a union whose first member is the flags.
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _rest: [u8; 22],
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short,
        _rest: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one struct ifreq, which `req` is.
    if unsafe { libc::ioctl(owned.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
        return Err(unavailable(format!(
            "TUNSETIFF {name}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(owned)
}

impl DelayLine {
    /// Starts switching among `taps` (host k's device at index k), holding
    /// every frame for `delay`.
    pub(crate) fn start(taps: Vec<OwnedFd>, delay: Duration) -> DelayLine {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("delay-line".into())
            .spawn(move || switch(&taps, delay, &flag))
            .ok();
        DelayLine { stop, thread }
    }

    /// Whether the switch thread started (it fails only if the system is out
    /// of threads).
    pub(crate) fn running(&self) -> bool {
        self.thread.is_some()
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A frame in flight.
struct InFlight {
    due: Instant,
    from: usize,
    bytes: Vec<u8>,
}

/// The switch: until `stop`, moves frames among `taps` after `delay`.
fn switch(taps: &[OwnedFd], delay: Duration, stop: &AtomicBool) {
    let mut queue: VecDeque<InFlight> = VecDeque::new();
    let mut owner: HashMap<[u8; 6], usize> = HashMap::new();
    let mut buf = vec![0u8; MAX_FRAME];
    let mut fds: Vec<libc::pollfd> = taps
        .iter()
        .map(|t| libc::pollfd {
            fd: t.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        let wait = queue.front().map_or(TICK, |f| {
            f.due.saturating_duration_since(Instant::now()).min(TICK)
        });
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a live array of initialised pollfds; `ts` outlives the call.
        let rc = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if rc > 0 {
            let now = Instant::now();
            for (k, p) in fds.iter().enumerate() {
                if p.revents & libc::POLLIN == 0 {
                    continue;
                }
                loop {
                    // SAFETY: `buf` is writable for its length.
                    let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
                    if n <= 0 {
                        break; // EAGAIN: this device is drained.
                    }
                    let frame = &buf[..n as usize];
                    if frame.len() >= 14 {
                        let mut src = [0u8; 6];
                        src.copy_from_slice(&frame[6..12]);
                        owner.insert(src, k);
                        queue.push_back(InFlight {
                            due: now + delay,
                            from: k,
                            bytes: frame.to_vec(),
                        });
                    }
                }
            }
        }
        let now = Instant::now();
        while queue.front().is_some_and(|f| f.due <= now) {
            let Some(f) = queue.pop_front() else { break };
            let mut dst = [0u8; 6];
            dst.copy_from_slice(&f.bytes[..6]);
            let unicast = dst[0] & 1 == 0;
            match owner.get(&dst).filter(|_| unicast) {
                Some(&to) if to != f.from => write_frame(&taps[to], &f.bytes),
                Some(_) => {}
                None => {
                    for (k, t) in taps.iter().enumerate() {
                        if k != f.from {
                            write_frame(t, &f.bytes);
                        }
                    }
                }
            }
        }
    }
}

/// Hands a frame to a host; a frame the host cannot take is dropped, as a
/// switch drops what a full port cannot take (TCP retransmits it).
fn write_frame(tap: &OwnedFd, frame: &[u8]) {
    // SAFETY: `frame` is readable for its length.
    let _ = unsafe { libc::write(tap.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
}
