//! How long a rank busy-polls its sockets before it sleeps in `poll`.
//!
//! On loopback a reply usually lands within microseconds, while a sleep and
//! wake-up round trip costs tens of them on a VM, so a rank that finds nothing
//! to do first retries its non-blocking calls for up to [`BUDGET`]. Never when
//! the host's ranks outnumber its cores: the spinning rank would hold the CPU
//! its peer needs to answer.
//!
//! **Nor while the thread waits for a CPU.** Beside other busy programs a
//! spinning rank stays runnable, so it is preempted at each scheduler tick and
//! then waits its turn behind them, a slice at a time, while its peer's reply
//! may already be there. Each thread samples how long it has waited on a run
//! queue ([`crate::sys::run_queue`]) at most every [`WINDOW`], when a wait
//! begins; where that was more than [`BUSY_SHARE`] of the time since the last
//! sample it does not spin until a sample finds it waited under
//! [`IDLE_SHARE`]. The first sample, when the transport connects, judges the
//! thread's life so far. Measured on
//! the 2-core EPYC VM (2026-11-29, `ringside bench --transport tcp -b 8 -e 8`,
//! every rank thread's `schedstat` over 3 s): idle, each rank waited
//! 0.4–1.4 % of the time; beside two busy loops (`--load 2`) 44 %, with each
//! rank on a CPU 0.44 of the time and waiting 2.7–2.8 ms per turn; not
//! spinning there, still a third of the time, in wake-ups of 60 µs each. The
//! module docs of the transport have what the rule gained and cost.
//!
//! `RINGSIDE_TCP_SPIN=on` spins whatever the machine does, `off` never spins
//! (for an A/B); `auto`, the default, is the rule above.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sys::run_queue::Counted;

/// The busy-poll budget where it applies.
pub(super) const BUDGET: Duration = Duration::from_micros(50);

/// How often a thread samples its run-queue wait, at most.
const WINDOW: Duration = Duration::from_millis(2);

/// The share of the time since the last sample that a thread may have waited
/// for a CPU and still spin...
const BUSY_SHARE: f64 = 0.10;

/// ...and the share under which a thread that stopped spinning starts again.
/// A window of [`WINDOW`] is short beside a scheduler slice (milliseconds),
/// so one window may see a whole turn's wait or none: beside two busy loops a
/// rank that sleeps still waited a third of the time, in wake-ups of 60 µs
/// each, and one window in several waited too little to pass [`BUSY_SHARE`].
const IDLE_SHARE: f64 = 0.02;

/// The environment variable that overrides the rule.
pub(super) const ENV: &str = "RINGSIDE_TCP_SPIN";

/// What a transport does when a wait begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spin {
    /// Never spins (ranks outnumber cores, or `off`).
    Never,
    /// Spins [`BUDGET`] unless this thread has been waiting for a CPU.
    UnlessBusy,
    /// Spins [`BUDGET`] (`on`).
    Always,
}

impl Spin {
    /// The rule for a world of `world_size` ranks on this host, as
    /// [`ENV`] may override it.
    pub(super) fn for_world(world_size: usize) -> Result<Spin> {
        let asked = std::env::var(ENV).ok();
        let spin = Spin::choose(asked.as_deref(), world_size, crate::transport::host_cpus())?;
        // A first sample, so that the first calls are judged a window on.
        busy(Instant::now());
        Ok(spin)
    }

    fn choose(asked: Option<&str>, world_size: usize, cores: usize) -> Result<Spin> {
        match asked.map(str::trim) {
            None | Some("auto") if world_size > cores => Ok(Spin::Never),
            None | Some("auto") => Ok(Spin::UnlessBusy),
            Some("on") => Ok(Spin::Always),
            Some("off") => Ok(Spin::Never),
            Some(other) => Err(Error::InvalidArgument(format!(
                "{ENV}={other:?}: expected auto, on or off"
            ))),
        }
    }

    /// How long to spin in a wait that begins at `now`.
    pub(super) fn budget(self, now: Instant) -> Duration {
        match self {
            Spin::Never => Duration::ZERO,
            Spin::Always => BUDGET,
            Spin::UnlessBusy if busy(now) => Duration::ZERO,
            Spin::UnlessBusy => BUDGET,
        }
    }
}

/// This thread's last sample: when, its run-queue wait then, and what it said.
#[derive(Clone, Copy)]
struct Sample {
    at: Instant,
    waited_ns: u64,
    busy: bool,
}

thread_local! {
    static LAST: Cell<Option<Sample>> = const { Cell::new(None) };
}

/// Whether this thread has waited for a CPU more than [`BUSY_SHARE`] of the
/// time lately (sampled at most every [`WINDOW`]; `false` where the kernel
/// does not say, or before a second sample).
fn busy(now: Instant) -> bool {
    let last = LAST.get();
    if let Some(s) = last.filter(|s| now.saturating_duration_since(s.at) < WINDOW) {
        return s.busy;
    }
    let Some(counted) = crate::sys::run_queue::counted() else {
        return false;
    };
    let busy = judge(last, now, counted);
    LAST.set(Some(Sample {
        at: now,
        waited_ns: counted.waited_ns,
        busy,
    }));
    busy
}

/// Whether a thread whose kernel counts are `counted` at `now` is busy, its
/// previous sample being `last`.
fn judge(last: Option<Sample>, now: Instant, counted: Counted) -> bool {
    let waited_ns = counted.waited_ns;
    match last {
        Some(s) => {
            let share = if s.busy { IDLE_SHARE } else { BUSY_SHARE };
            waited_share(s.at, s.waited_ns, now, waited_ns) > share
        }
        // A first sample has no window before it: judge the thread's life so
        // far by the share of its runnable time it waited (its sleeps are in
        // neither count).
        None => waited_ns as f64 > BUSY_SHARE * (counted.ran_ns + waited_ns) as f64,
    }
}

/// The share of the time between `since` and `now` that the thread waited
/// for a CPU, its counter having gone from `before_ns` to `waited_ns`.
fn waited_share(since: Instant, before_ns: u64, now: Instant, waited_ns: u64) -> f64 {
    let span = now.saturating_duration_since(since).as_nanos() as f64;
    let waited = waited_ns.saturating_sub(before_ns) as f64;
    if span > 0.0 { waited / span } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_spin_unless_they_outnumber_cores_or_the_environment_says() {
        assert_eq!(Spin::choose(None, 2, 2).unwrap(), Spin::UnlessBusy);
        assert_eq!(Spin::choose(Some("auto"), 3, 2).unwrap(), Spin::Never);
        assert_eq!(Spin::choose(None, 3, 2).unwrap(), Spin::Never);
        assert_eq!(Spin::choose(Some("on"), 3, 2).unwrap(), Spin::Always);
        assert_eq!(Spin::choose(Some(" off "), 2, 8).unwrap(), Spin::Never);
        let e = Spin::choose(Some("sometimes"), 2, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains(ENV) && e.contains("auto, on or off"), "{e}");
    }

    #[test]
    fn the_waited_share_is_the_counters_growth_over_the_time_between_samples() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(10);
        assert!((waited_share(t0, 5_000, t1, 5_000 + 900_000) - 0.09).abs() < 1e-9);
        // A counter that went backwards (another thread's sample) is no wait.
        assert_eq!(waited_share(t0, 9_000_000, t1, 1_000), 0.0);
        assert_eq!(waited_share(t0, 0, t0, 1_000_000), 0.0);
    }

    #[test]
    fn a_busy_thread_must_wait_far_less_before_it_spins_again() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(10);
        let counted = |waited_ns| Counted {
            ran_ns: 1_000_000,
            waited_ns,
        };
        let last = |busy| {
            Some(Sample {
                at: t0,
                waited_ns: 0,
                busy,
            })
        };
        // 5 % of the window: too little to stop spinning, too much to start.
        assert!(!judge(last(false), t1, counted(500_000)));
        assert!(judge(last(true), t1, counted(500_000)));
        assert!(judge(last(false), t1, counted(1_100_000)));
        assert!(!judge(last(true), t1, counted(100_000)));
        // A first sample: the share of the runnable time, 1 ms on a CPU.
        assert!(!judge(None, t1, counted(100_000)));
        assert!(judge(None, t1, counted(200_000)));
    }

    #[test]
    fn a_thread_that_waits_behind_a_spinning_one_stops_spinning() {
        if crate::sys::run_queue::counted().is_none() {
            eprintln!("skipped: this kernel has no /proc/thread-self/schedstat");
            return;
        }
        let busy_now = crate::sys::run_queue::tests::sharing_one_cpu(|| {
            // The next sample, many windows on (time for the spinner to start
            // on a slow machine too), while this thread shares its CPU with it.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(50) {
                std::hint::spin_loop();
            }
            Spin::UnlessBusy.budget(Instant::now())
        });
        assert_eq!(busy_now, Duration::ZERO);
        assert_eq!(Spin::Always.budget(Instant::now()), BUDGET);
    }
}
