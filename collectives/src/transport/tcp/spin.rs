//! How long a rank busy-polls its sockets before it sleeps in `poll`,
//! learnt from its own waits.
//!
//! On loopback a reply usually lands within microseconds, while a sleep and
//! wake-up costs tens of them on a VM, so a rank that finds nothing to do
//! first retries its non-blocking calls for a while. That only pays while
//! the peer can run meanwhile. Where it cannot (the two ranks on one CPU, or
//! each beside a busy program), every microsecond spun is taken from the
//! peer or from the rank's own share of the CPU, and the wait ends in `poll`
//! anyway. So the budget halves each time a wait outlasts it and doubles
//! (back up to [`MAX`]) each time a wait ends within it; at zero, a wait
//! that `poll` ended within [`MAX`] (a spin would have caught it) brings a
//! quarter of it back. `RINGSIDE_TCP_SPIN=fixed` keeps the full budget on
//! every wait, as before, for an A/B.
//!
//! Measured on the 2-core AMD EPYC VM of issue 27 (2026-11-28, 23:08–23:12
//! UTC, `ringside bench --transport tcp -b 4 -e 64M -f 16 -n 20`, learning
//! against `fixed` in turn, in-place medians):
//!
//! | where | 4 B–16 KiB | 4 MiB | 64 MiB |
//! |---|---|---|---|
//! | own launcher, `--load 2` (3 runs each) | 28–63 / 73–144 µs | 6.1–7.1 / 3.7–6.3 ms | 74–85 / 100–183 ms |
//! | own launcher, idle (3 each) | 6.7–16 / 7.0–12 µs | 1.7–3.0 / 1.7–2.0 ms | 33–48 / 34–41 ms |
//! | `mpirun` (ranks bound), `--load 2` (2 each) | 6.8–10.6 / 6.9–16 µs | 5.7–5.8 / 5.7–7.9 ms | 154–181 / 152–204 ms |
//! | `mpirun`, idle (1 each) | 8.0–14 / 10.9–14 µs | 2.1 / 1.7 ms | 34 / 43 ms |
//!
//! Under the own launcher each rank is a scheduling group of its own and
//! stays unbound (`tcp/mod.rs`, "Placement"), and beside busy programs its
//! spins mostly ran out: learning halved small calls and took a third or
//! more off 64 MiB. Idle and with bound ranks, waits end within the spin and
//! the budget stays full.

use std::time::Duration;

use crate::error::{Error, Result};

/// The budget while every rank can have a core of its own.
pub(super) const MAX: Duration = Duration::from_micros(50);

/// Below this a halved budget is none.
const FLOOR: Duration = Duration::from_micros(1);

/// A rank's spin budget and how it learns.
#[derive(Clone, Copy, Debug)]
pub(super) struct Spin {
    /// The most it spins: [`MAX`], or none where ranks outnumber cores.
    max: Duration,
    /// What the next wait spins.
    now: Duration,
    /// `RINGSIDE_TCP_SPIN=fixed`: always `max`.
    fixed: bool,
}

impl Spin {
    /// The budget for a rank of `world_size` on this host: [`MAX`] while
    /// every rank can have a core of its own (judged by the world size
    /// against this host's cores), none otherwise (spinning would steal the
    /// peer's CPU); `RINGSIDE_TCP_SPIN` says whether it learns.
    pub(super) fn for_world(world_size: usize) -> Result<Spin> {
        let max = if world_size <= crate::transport::host_cpus() {
            MAX
        } else {
            Duration::ZERO
        };
        let fixed = match std::env::var("RINGSIDE_TCP_SPIN").as_deref() {
            Err(_) | Ok("adaptive") => false,
            Ok("fixed") => true,
            Ok(other) => {
                return Err(Error::InvalidArgument(format!(
                    "RINGSIDE_TCP_SPIN={other:?}: expected adaptive or fixed"
                )));
            }
        };
        Ok(Spin::new(max, fixed))
    }

    pub(super) fn new(max: Duration, fixed: bool) -> Spin {
        Spin {
            max,
            now: max,
            fixed,
        }
    }

    /// How long the next wait spins.
    pub(super) fn budget(&self) -> Duration {
        self.now
    }

    /// A wait ended while spinning.
    pub(super) fn caught(&mut self) {
        self.now = (self.now * 2).min(self.max);
    }

    /// A wait went on to `poll` after spinning `spun` and ended `waited`
    /// after it first found nothing to do.
    pub(super) fn slept(&mut self, spun: Duration, waited: Duration) {
        if self.fixed {
            return;
        }
        self.now = if spun.is_zero() {
            if waited <= self.max {
                self.max / 4
            } else {
                Duration::ZERO
            }
        } else if spun / 2 < FLOOR {
            Duration::ZERO
        } else {
            spun / 2
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn waits_that_outlast_the_spin_halve_it_to_none_and_caught_ones_double_it() {
        let mut s = Spin::new(MAX, false);
        for want in [
            MAX / 2,
            MAX / 4,
            MAX / 8,
            MAX / 16,
            MAX / 32,
            Duration::ZERO,
        ] {
            s.slept(s.budget(), 200 * US);
            assert_eq!(s.budget(), want);
        }
        // Not spinning, a long wait keeps it off; a short one brings a quarter back.
        s.slept(Duration::ZERO, 200 * US);
        assert_eq!(s.budget(), Duration::ZERO);
        s.slept(Duration::ZERO, 20 * US);
        assert_eq!(s.budget(), MAX / 4);
        s.caught();
        s.caught();
        s.caught();
        assert_eq!(s.budget(), MAX);
    }

    #[test]
    fn fixed_keeps_the_full_budget_and_no_cores_to_spare_means_none() {
        let mut s = Spin::new(MAX, true);
        s.slept(MAX, 200 * US);
        assert_eq!(s.budget(), MAX);
        let mut none = Spin::new(Duration::ZERO, false);
        none.slept(Duration::ZERO, 20 * US);
        assert_eq!(none.budget(), Duration::ZERO);
    }
}
