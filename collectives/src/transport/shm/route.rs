//! Which path a large message to another process takes, ring or single copy,
//! learnt by timing both (`RINGSIDE_SHM_SINGLE_COPY=auto`, the default).
//!
//! Neither path wins everywhere, and the machine decides which does:
//! - on the 2-core EPYC VM of issue 14, `process_vm_readv` copied at 5 to
//!   10 GB/s against memcpy's 8.5 to 40, and a 2-rank all_reduce of 4 MiB
//!   took 2.3 ms by single copy against 0.25 through the ring;
//! - on the 2-core Xeon VM of issue 27, where a cache line crosses cores
//!   slowly, the ring's two copies lose to one kernel copy at 2 to 8 MiB
//!   (8.6 to 9.6 GB/s busbw against 6.4 to 6.8, three alternating runs) and
//!   win at 1 MiB (10.1 against 6.8) and from 16 MiB on (6.8 against 6.4 at
//!   16 MiB, 5.2 against 4.3 at 64 MiB).
//!
//! So a sender times its first messages of each size class both ways and then
//! keeps the faster, as NCCL's tuner picks an algorithm per size, but from
//! measurements on this machine rather than a model of it. A class is the
//! message's size and the whole operation's size (powers of two): an
//! all_reduce's cache behaviour depends on both (see `streaming.rs`). The
//! first message of a class is not timed (it may fault pages in), then
//! [`SAMPLES`] of each path alternate, ring first. Every rank of a symmetric
//! collective sees the same sequence of classes, so the ranks explore in step
//! and each timing is of both directions taking the same path. A class is
//! learnt once per communicator: about seven messages, a few calls of a
//! benchmark's warm-up or of a training job's first step.
//!
//! Single copy here always means `process_vm_readv`: peers that are threads
//! of one process read each other's buffers directly, which always wins, and
//! peers that cannot be read (ptrace rules) only ever get the ring.

use std::time::Duration;

/// Timed messages per path before a class is decided.
pub(super) const SAMPLES: usize = 3;

/// Untimed messages at the start of each class.
const SKIP: u32 = 1;

/// A message's size class: the bit lengths of its size and of its
/// operation's (so 1 MiB and 1.9 MiB share one, 2 MiB starts the next).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Class {
    msg: u8,
    whole: u8,
}

impl Class {
    /// The class of a `len`-byte message of an operation over `whole` bytes.
    pub(super) fn of(len: usize, whole: usize) -> Class {
        let log2 = |n: usize| (usize::BITS - n.max(1).leading_zeros()) as u8;
        Class {
            msg: log2(len),
            whole: log2(whole.max(len)),
        }
    }
}

/// What one class has learnt so far.
#[derive(Debug)]
struct Learnt {
    class: Class,
    seen: u32,
    ring: Vec<Duration>,
    single: Vec<Duration>,
    decided: Option<bool>,
}

/// The decision for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Route {
    /// Whether the message goes by single copy.
    pub(super) single: bool,
    /// Whether its exchange is timed for [`Routes::record`].
    pub(super) timed: bool,
}

/// Per size class: the path that measured faster, or the next to try.
#[derive(Debug, Default)]
pub(super) struct Routes {
    classes: Vec<Learnt>,
}

impl Routes {
    /// The path for the next message of `class`.
    pub(super) fn pick(&mut self, class: Class) -> Route {
        let at = match self.classes.iter().position(|l| l.class == class) {
            Some(i) => i,
            None => {
                self.classes.push(Learnt {
                    class,
                    seen: 0,
                    ring: Vec::with_capacity(SAMPLES),
                    single: Vec::with_capacity(SAMPLES),
                    decided: None,
                });
                self.classes.len() - 1
            }
        };
        let l = &mut self.classes[at];
        l.seen = l.seen.saturating_add(1);
        if let Some(single) = l.decided {
            return Route {
                single,
                timed: false,
            };
        }
        if l.seen <= SKIP {
            return Route {
                single: false,
                timed: false,
            };
        }
        // Alternate, ring first, until both have their samples (a failed
        // exchange records nothing, so this may take more messages).
        let single = l.ring.len() > l.single.len();
        Route {
            single,
            timed: true,
        }
    }

    /// Records how long an exchange of `class` took by the path `single`,
    /// and decides the class once both paths have [`SAMPLES`] timings.
    pub(super) fn record(&mut self, class: Class, single: bool, took: Duration) {
        let Some(l) = self.classes.iter_mut().find(|l| l.class == class) else {
            return;
        };
        if l.decided.is_some() {
            return;
        }
        let v = if single { &mut l.single } else { &mut l.ring };
        if v.len() < SAMPLES {
            v.push(took);
        }
        if l.ring.len() == SAMPLES && l.single.len() == SAMPLES {
            // Single copy must win outright: the ring is the path every
            // machine has, and a tie keeps it.
            l.decided = Some(median(&mut l.single) < median(&mut l.ring));
        }
    }

    /// What each decided class chose, for `Debug` and tests: (bit length of
    /// the message's size, of the operation's size, single copy?).
    pub(super) fn decided(&self) -> Vec<(u8, u8, bool)> {
        self.classes
            .iter()
            .filter_map(|l| l.decided.map(|d| (l.class.msg, l.class.whole, d)))
            .collect()
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Runs `routes` over `n` messages of `class`, timing the ring at `ring`
    /// and single copy at `single`; returns the paths taken.
    fn drive(routes: &mut Routes, class: Class, n: usize, ring: u64, single: u64) -> Vec<bool> {
        (0..n)
            .map(|_| {
                let r = routes.pick(class);
                if r.timed {
                    routes.record(class, r.single, ms(if r.single { single } else { ring }));
                }
                r.single
            })
            .collect()
    }

    #[test]
    fn the_faster_path_is_kept_after_both_are_timed() {
        let mut routes = Routes::default();
        let c = Class::of(2 << 20, 4 << 20);
        let took = drive(&mut routes, c, 12, 10, 7);
        // Untimed ring, then ring/single alternating, then single for good.
        assert_eq!(
            took,
            [
                false, false, true, false, true, false, true, true, true, true, true, true
            ]
        );
        assert_eq!(routes.decided(), vec![(22, 23, true)]);
    }

    #[test]
    fn a_slower_single_copy_is_tried_three_times_then_never() {
        // The EPYC VM's case: single copy ten times slower.
        let mut routes = Routes::default();
        let c = Class::of(2 << 20, 4 << 20);
        let took = drive(&mut routes, c, 1000, 1, 10);
        assert_eq!(took.iter().filter(|&&s| s).count(), SAMPLES);
        assert!(took[7..].iter().all(|&s| !s));
    }

    #[test]
    fn a_tie_keeps_the_ring() {
        let mut routes = Routes::default();
        let c = Class::of(1 << 20, 1 << 20);
        drive(&mut routes, c, 10, 5, 5);
        assert_eq!(routes.decided(), vec![(21, 21, false)]);
    }

    #[test]
    fn classes_are_learnt_separately() {
        let mut routes = Routes::default();
        let small = Class::of(1 << 20, 2 << 20);
        let big = Class::of(1 << 20, 64 << 20);
        assert_ne!(small, big, "the operation's size is part of the class");
        drive(&mut routes, small, 10, 5, 9);
        drive(&mut routes, big, 10, 9, 5);
        assert_eq!(routes.decided(), vec![(21, 22, false), (21, 27, true)]);
    }

    #[test]
    fn a_failed_exchange_records_nothing_and_is_tried_again() {
        let mut routes = Routes::default();
        let c = Class::of(4 << 20, 8 << 20);
        assert!(!routes.pick(c).timed);
        let first = routes.pick(c);
        assert!(first.timed && !first.single);
        // The exchange failed: nothing recorded, so the ring is due again.
        assert!(!routes.pick(c).single);
    }
}
