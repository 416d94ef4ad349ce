//! Simulated hosts on one Linux machine: one network namespace per "node",
//! each with its own `eth0` joined to the others through a bridge, so ranks
//! talk over a real (virtual) Ethernet with its own addresses, as on a cluster;
//! links can be shaped with `tc` (a token bucket per node's egress) and, in
//! place of the bridge, given a one-way delay by a switch in user space
//! ([`Hosts::create_with_delay`]; this kernel has no `sch_netem`).
//!
//! Needs root (CAP_NET_ADMIN) and `ip`/`tc` (Debian's iproute2):
//! [`Hosts::available`] says why not otherwise. Names carry this process's
//! pid and a letter per set of hosts it made (`rsd<pid>a n<k>`, `rsd<pid>a br`
//! without the space), so concurrent runs, and two sets in one process (tests
//! run in threads), never meet, and a later run can remove what a crashed or
//! interrupted one left ([`remove_stale`], called by [`Hosts::create`]).
//! [`Hosts`] removes its own on drop.
//!
//! Its own package, used by labs 8 and 11 only, so the other labs do not
//! build it.

#![deny(missing_docs)]

mod delay_line;

use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::time::Duration;

use delay_line::DelayLine;

/// Why simulated hosts could not be made or shaped.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// Not root, or `ip` missing, or the kernel refuses namespaces.
    #[error("no simulated hosts here: {0}")]
    Unavailable(String),
    /// A command failed.
    #[error("`{command}` failed: {why}")]
    Command {
        /// The command line.
        command: String,
        /// Its stderr (or why it did not start).
        why: String,
    },
}

/// The subnet every simulated network uses (namespaces keep runs apart).
pub const SUBNET: [u8; 3] = [10, 77, 0];

/// A link shape: the bandwidth of every node's egress.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// Megabits per second.
    pub rate_mbit: u64,
}

impl Link {
    /// `1gbit`, `10gbit`, `100mbit`: the form record labels use.
    pub fn name(self) -> String {
        if self.rate_mbit % 1000 == 0 {
            format!("{}gbit", self.rate_mbit / 1000)
        } else {
            format!("{}mbit", self.rate_mbit)
        }
    }
}

// ANCHOR: shape
/// The `tc` arguments that limit `dev`'s egress to `link`: a token bucket
/// filter with a burst of at least one jumbo frame and about 1 ms of traffic,
/// and a queue of at most 50 ms before packets drop (TCP then backs off, as on
/// a real congested link).
pub fn shape_args(dev: &str, link: Link) -> Vec<String> {
    let bytes_per_ms = link.rate_mbit * 1000 / 8;
    let burst = bytes_per_ms.max(64 * 1024);
    ["qdisc", "replace", "dev", dev, "root", "tbf", "rate"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("{}mbit", link.rate_mbit),
            "burst".into(),
            burst.to_string(),
            "latency".into(),
            "50ms".into(),
        ])
        .collect()
}
// ANCHOR_END: shape

/// `nodes` namespaces joined by a bridge, removed on drop.
#[derive(Debug)]
pub struct Hosts {
    prefix: String,
    nodes: usize,
    /// The user-space switch, when the hosts have a delay instead of a bridge.
    delay_line: Option<DelayLine>,
    delay: Duration,
}

impl Hosts {
    /// Whether this machine can make simulated hosts; the reason when not.
    /// Being root is not enough (a container may withhold CAP_NET_ADMIN, a
    /// kernel may lack the token bucket filter): it makes a namespace and
    /// shapes its loopback, then removes it.
    pub fn available() -> Result<(), HostsError> {
        if !is_root() {
            return Err(HostsError::Unavailable(
                "not root (network namespaces need CAP_NET_ADMIN)".into(),
            ));
        }
        match Command::new("ip").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => {
                return Err(HostsError::Unavailable(
                    "no `ip` command (Debian's iproute2)".into(),
                ));
            }
        }
        let probe = format!("{}probe", instance_prefix());
        let tried = ip(&["netns", "add", &probe]).and_then(|_| {
            let shape = shape_args("lo", Link { rate_mbit: 1000 });
            let mut args = vec!["netns", "exec", &probe, "tc"];
            args.extend(shape.iter().map(String::as_str));
            ip(&args)
        });
        let _ = Command::new("ip").args(["netns", "del", &probe]).output();
        tried.map(drop).map_err(|e| {
            HostsError::Unavailable(format!("this host cannot make or shape one: {e}"))
        })
    }

    /// Makes `nodes` hosts: namespace k has `eth0` at 10.77.0.(k+1)/24 and
    /// loopback up; every `eth0` is one end of a veth pair whose other end is
    /// on one bridge in the root namespace (which has no address, so nothing
    /// outside the namespaces can reach them).
    pub fn create(nodes: usize) -> Result<Hosts, HostsError> {
        let mut hosts = Hosts::none_yet(Duration::ZERO)?;
        let prefix = hosts.prefix.clone();
        let bridge = format!("{prefix}br");
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["link", "set", &bridge, "up"])?;
        for k in 0..nodes {
            let ns = hosts.namespace(k);
            ip(&["netns", "add", &ns])?;
            hosts.nodes = k + 1;
            let outer = format!("{prefix}v{k}");
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &outer, "master", &bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            hosts.address(k)?;
        }
        Ok(hosts)
    }

    /// Makes `nodes` hosts as [`Hosts::create`] does, but joined by a switch
    /// in this process that delivers every frame `one_way` after it was sent
    /// (so a round trip takes twice that) instead of by a bridge: host k's
    /// `eth0` is a TAP device whose frames this process relays. The switch
    /// runs while the `Hosts` lives.
    pub fn create_with_delay(nodes: usize, one_way: Duration) -> Result<Hosts, HostsError> {
        let mut hosts = Hosts::none_yet(one_way)?;
        let prefix = hosts.prefix.clone();
        let mut taps = Vec::new();
        for k in 0..nodes {
            let ns = hosts.namespace(k);
            ip(&["netns", "add", &ns])?;
            hosts.nodes = k + 1;
            let tap = format!("{prefix}t{k}");
            taps.push(delay_line::open_tap(&tap)?);
            ip(&["link", "set", &tap, "netns", &ns])?;
            ip(&["-n", &ns, "link", "set", &tap, "name", "eth0"])?;
            hosts.address(k)?;
        }
        let line = DelayLine::start(taps, one_way);
        if !line.running() {
            return Err(HostsError::Unavailable(
                "the delay line's thread did not start".into(),
            ));
        }
        hosts.delay_line = Some(line);
        Ok(hosts)
    }

    /// No hosts yet, after what dead runs left is gone. Made before the first
    /// command, so that its drop removes whatever a failing command leaves
    /// half made.
    fn none_yet(delay: Duration) -> Result<Hosts, HostsError> {
        Hosts::available()?;
        let left = remove_stale();
        if !left.is_empty() {
            // Say so: a learner who killed a run should know it left these.
            eprintln!(
                "lab hosts: removed what an interrupted run left behind: {}",
                left.join(", ")
            );
        }
        Ok(Hosts {
            prefix: instance_prefix(),
            nodes: 0,
            delay_line: None,
            delay,
        })
    }

    /// Host k's addresses and links up.
    fn address(&self, k: usize) -> Result<(), HostsError> {
        let ns = self.namespace(k);
        let addr = format!("{}/24", self.addr(k));
        ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// The one-way delay between hosts that [`Hosts::create_with_delay`]
    /// added (zero for a bridge).
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.nodes
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.nodes == 0
    }

    /// Host k's namespace name.
    pub fn namespace(&self, k: usize) -> String {
        format!("{}n{k}", self.prefix)
    }

    /// Host k's address.
    pub fn addr(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], k as u8 + 1)
    }

    /// Shapes every host's egress with `args(dev, link)` (the lab's
    /// exercise or [`shape_args`]), or removes the shaping for `None`.
    pub fn shape(
        &self,
        link: Option<Link>,
        args: fn(&str, Link) -> Vec<String>,
    ) -> Result<(), HostsError> {
        for k in 0..self.nodes {
            let ns = self.namespace(k);
            let mut cmd = vec!["netns".to_owned(), "exec".into(), ns, "tc".into()];
            match link {
                Some(l) => cmd.extend(args("eth0", l)),
                None => cmd.extend(
                    ["qdisc", "replace", "dev", "eth0", "root", "pfifo_fast"].map(String::from),
                ),
            }
            let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
            ip(&refs)?;
        }
        Ok(())
    }

    /// `program args…` to run inside host k (`ip netns exec`).
    pub fn command(&self, k: usize, program: &std::ffi::OsStr) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec"])
            .arg(self.namespace(k))
            .arg(program);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // The switch first: its TAP devices go when it closes them.
        self.delay_line.take();
        remove(&self.prefix);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn ip(args: &[&str]) -> Result<Output, HostsError> {
    let command = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| HostsError::Command {
            command: command.clone(),
            why: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(HostsError::Command {
            command,
            why: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out)
}

/// `rsd<pid><letter>`: a fresh letter for every set of hosts (and probe) this
/// process makes, so two at once in one process do not share names. 26 in
/// flight at once is far more than any lab or test makes.
fn instance_prefix() -> String {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 26;
    format!("rsd{}{}", std::process::id(), (b'a' + k) as char)
}

/// Whether `name` belongs to `prefix`: `rsd<pid><letter>` (one set of hosts)
/// or `rsd<pid>` (all of a process's), never another pid that starts alike.
fn owned_by(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Removes the namespaces and bridges named with `prefix` (best effort: what
/// is already gone is fine) and returns the names it removed. Deleting a
/// namespace deletes its `eth0` and with it the veth's other end; a TAP goes
/// when its descriptor closes.
fn remove(prefix: &str) -> Vec<String> {
    let mut removed = Vec::new();
    let mut del = |args: &[&str], name: &str| {
        if Command::new("ip")
            .args(args)
            .arg(name)
            .output()
            .is_ok_and(|o| o.status.success())
        {
            removed.push(name.to_owned());
        }
    };
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if owned_by(name, prefix) {
                del(&["netns", "del"], name);
            }
        }
    }
    if let Ok(out) = Command::new("ip").args(["-o", "link", "show"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // `7: rsd123abr: <BROADCAST,…`
            let name = line.split(':').nth(1).unwrap_or_default().trim();
            let name = name.split('@').next().unwrap_or_default();
            if owned_by(name, prefix) && name.ends_with("br") {
                del(&["link", "del"], name);
            }
        }
    }
    removed
}

/// Removes what runs that are no longer alive left behind (Ctrl-C, SIGKILL, a
/// crash): every `rsd<pid>…` namespace and bridge whose pid has no process
/// (their veths go with the namespaces). Returns the names removed (none
/// without root: the `ip` commands then fail); `cargo lab 8 --cleanup` runs it.
pub fn remove_stale() -> Vec<String> {
    let dead: std::collections::BTreeSet<String> = stale_names()
        .iter()
        .map(|n| {
            let rest = n.strip_prefix("rsd").unwrap_or(n);
            rest.chars().take_while(char::is_ascii_digit).collect()
        })
        .collect();
    dead.into_iter()
        .flat_map(|pid| remove(&format!("rsd{pid}")))
        .collect()
}

/// The names of namespaces and bridges that runs no longer alive left
/// behind, without removing them (for saying what `remove_stale` would do
/// where it cannot: not root).
pub fn stale_names() -> Vec<String> {
    let mut names = Vec::new();
    for args in [&["netns", "list"][..], &["-o", "link", "show"][..]] {
        if let Ok(out) = Command::new("ip").args(args).output() {
            for word in String::from_utf8_lossy(&out.stdout)
                .split(|c: char| c.is_whitespace() || c == ':' || c == '@')
            {
                let Some(rest) = word.strip_prefix("rsd") else {
                    continue;
                };
                let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if !pid.is_empty()
                    && !std::path::Path::new(&format!("/proc/{pid}")).exists()
                    && !names.iter().any(|n| n == word)
                {
                    names.push(word.to_owned());
                }
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_args_make_a_token_bucket_at_the_rate() {
        let a = shape_args("eth0", Link { rate_mbit: 1000 });
        assert_eq!(
            a[..7],
            ["qdisc", "replace", "dev", "eth0", "root", "tbf", "rate"]
        );
        assert_eq!(a[7], "1000mbit");
        // 1 Gbit/s = 125,000 bytes per ms.
        assert_eq!(a[9], "125000");
        assert_eq!(Link { rate_mbit: 10_000 }.name(), "10gbit");
        assert_eq!(Link { rate_mbit: 100 }.name(), "100mbit");
    }

    #[test]
    fn names_belong_to_their_set_and_process_only() {
        assert!(owned_by("rsd123an0", "rsd123a"));
        assert!(owned_by("rsd123abr", "rsd123"));
        assert!(!owned_by("rsd123bn0", "rsd123a"));
        assert!(!owned_by("rsd1234an0", "rsd123"));
        let (a, b) = (instance_prefix(), instance_prefix());
        assert_ne!(a, b);
        // The longest interface name, a veth of host 99 under the largest pid,
        // fits IFNAMSIZ (15 characters and the NUL).
        assert!(format!("rsd4194304{}v99", 'z').len() <= 15);
    }

    /// As root, two hosts come and go; elsewhere this says why it skipped.
    #[test]
    fn two_hosts_are_made_and_removed() {
        if let Err(e) = Hosts::available() {
            println!("skipped: {e}");
            return;
        }
        let hosts = Hosts::create(2).unwrap();
        hosts
            .shape(Some(Link { rate_mbit: 1000 }), shape_args)
            .unwrap();
        let ns = hosts.namespace(1);
        let list =
            |_: ()| String::from_utf8_lossy(&ip(&["netns", "list"]).unwrap().stdout).into_owned();
        assert!(list(()).contains(&ns));
        drop(hosts);
        assert!(!list(()).contains(&ns));
    }

    /// Runs `f` on a thread inside `ns`'s network namespace.
    fn in_namespace<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            // SAFETY: a namespace file's descriptor; setns moves this thread only.
            let rc =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
    }

    /// As root: a byte sent from host 1 to host 0 and back takes the delay
    /// line's round trip (twice the one-way delay), not the veth's microseconds.
    #[test]
    fn the_delay_line_holds_every_frame_for_its_delay() {
        use std::io::{Read, Write};
        if let Err(e) = Hosts::available() {
            println!("skipped: {e}");
            return;
        }
        let one_way = Duration::from_millis(30);
        let hosts = match Hosts::create_with_delay(2, one_way) {
            Ok(h) => h,
            // A container without /dev/net/tun: the lab says so and skips too.
            Err(HostsError::Unavailable(why)) => {
                println!("skipped: {why}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(hosts.delay(), one_way);
        let server_addr = hosts.addr(0);
        let (tx, rx) = std::sync::mpsc::channel();
        let server = in_namespace(&hosts.namespace(0), move || {
            let l = std::net::TcpListener::bind((server_addr, 0)).unwrap();
            tx.send(l.local_addr().unwrap().port()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            for _ in 0..3 {
                s.read_exact(&mut b).unwrap();
                s.write_all(&b).unwrap();
            }
        });
        let port = rx.recv().unwrap();
        let client = in_namespace(&hosts.namespace(1), move || {
            let mut s = std::net::TcpStream::connect((server_addr, port)).unwrap();
            s.set_nodelay(true).unwrap();
            let mut rtts = Vec::new();
            let mut b = [7u8; 1];
            for _ in 0..3 {
                let t = std::time::Instant::now();
                s.write_all(&b).unwrap();
                s.read_exact(&mut b).unwrap();
                rtts.push(t.elapsed());
            }
            rtts
        });
        let rtts = client.join().unwrap();
        server.join().unwrap();
        for rtt in rtts {
            // At least the two one-way delays; the slack covers a busy 2-core
            // machine's scheduling, far below another round trip.
            assert!(rtt >= 2 * one_way, "round trip {rtt:?}");
            assert!(
                rtt < 2 * one_way + Duration::from_millis(25),
                "round trip {rtt:?}"
            );
        }
    }
}
