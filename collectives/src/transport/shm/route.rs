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
//! So a sender times its first calls of each size class both ways and then
//! keeps the faster, as NCCL's tuner picks an algorithm per size, but from
//! measurements on this machine rather than a model of it. A class is the
//! message's size and the whole operation's size (powers of two): an
//! all_reduce's cache behaviour depends on both (see `streaming.rs`).
//!
//! The unit of a sample is a call (the tag's sequence number), not a
//! message: every message of one call in one class takes the same path, and
//! their exchange times add up to the sample. Alternating per message would
//! compare unlike things: a 2-rank ring alternates a reduce-scatter message
//! (the receiver reduces) with an all-gather message (it copies), so one path
//! would have been timed on reductions only and the other on copies only (and
//! was: the first version picked single copy for 16 MiB on one run, 0.76×
//! the ring). The first call of a class is not timed (it may fault pages
//! in), then [`SAMPLES`] calls of each path alternate, ring first, and the
//! path with the shorter best sample wins (noise only ever adds time). That
//! is five calls per class: a benchmark's warm-up, or a training job's first
//! steps. Every rank of a symmetric collective sees the same sequence of
//! classes, so the ranks explore in step and each sample is of both
//! directions taking the same path. A class is learnt once per communicator.
//!
//! Single copy here always means `process_vm_readv`: peers that are threads
//! of one process read each other's buffers directly, which always wins, and
//! peers that cannot be read (ptrace rules) only ever get the ring.

use std::time::Duration;

/// Timed calls per path before a class is decided.
pub(super) const SAMPLES: usize = 2;

/// Untimed calls at the start of each class.
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
        let bits = |n: usize| (usize::BITS - n.max(1).leading_zeros()) as u8;
        Class {
            msg: bits(len),
            whole: bits(whole.max(len)),
        }
    }
}

/// The call of a class in progress: its path and the time its messages took.
#[derive(Clone, Copy, Debug)]
struct Call {
    seq: u32,
    route: Route,
    took: Duration,
}

/// What one class has learnt so far.
#[derive(Debug)]
struct Learnt {
    class: Class,
    calls: u32,
    current: Option<Call>,
    ring: Vec<Duration>,
    single: Vec<Duration>,
    decided: Option<bool>,
}

impl Learnt {
    /// Files the finished call's time under its path, and decides once both
    /// paths have their samples.
    fn close_call(&mut self) {
        let Some(call) = self.current.take() else {
            return;
        };
        if !call.route.timed || self.decided.is_some() {
            return;
        }
        let v = if call.route.single {
            &mut self.single
        } else {
            &mut self.ring
        };
        if v.len() < SAMPLES {
            v.push(call.took);
        }
        if self.ring.len() == SAMPLES && self.single.len() == SAMPLES {
            // Single copy must win outright: the ring is the path every
            // machine has, and a tie keeps it.
            self.decided = Some(best(&self.single) < best(&self.ring));
        }
    }
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
    /// The path for a message of `class` in call `seq`: the call's path if
    /// it has one, else the next call's.
    pub(super) fn pick(&mut self, class: Class, seq: u32) -> Route {
        let at = match self.classes.iter().position(|l| l.class == class) {
            Some(i) => i,
            None => {
                self.classes.push(Learnt {
                    class,
                    calls: 0,
                    current: None,
                    ring: Vec::with_capacity(SAMPLES),
                    single: Vec::with_capacity(SAMPLES),
                    decided: None,
                });
                self.classes.len() - 1
            }
        };
        let l = &mut self.classes[at];
        if let Some(call) = l.current.filter(|c| c.seq == seq) {
            return call.route;
        }
        l.close_call();
        l.calls = l.calls.saturating_add(1);
        let route = match l.decided {
            Some(single) => Route {
                single,
                timed: false,
            },
            None if l.calls <= SKIP => Route {
                single: false,
                timed: false,
            },
            // Alternate, ring first, until both have their samples (a
            // failed call records nothing, so this may take more calls).
            None => Route {
                single: l.ring.len() > l.single.len(),
                timed: true,
            },
        };
        l.current = Some(Call {
            seq,
            route,
            took: Duration::ZERO,
        });
        route
    }

    /// Adds the time one exchange of `class` took to its call's sample.
    pub(super) fn record(&mut self, class: Class, took: Duration) {
        if let Some(call) = self.call_of(class) {
            call.took += took;
        }
    }

    /// An exchange of `class` failed: its call is no sample.
    pub(super) fn discard(&mut self, class: Class) {
        if let Some(call) = self.call_of(class) {
            call.route.timed = false;
        }
    }

    /// The call of `class` in progress.
    fn call_of(&mut self, class: Class) -> Option<&mut Call> {
        self.classes
            .iter_mut()
            .find(|l| l.class == class)
            .and_then(|l| l.current.as_mut())
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

/// The shortest sample: noise only ever lengthens a call.
fn best(v: &[Duration]) -> Duration {
    v.iter().copied().min().unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Runs `routes` over `calls` calls of `per_call` messages of `class`,
    /// each message taking `ring` or `single` ms by its path; returns each
    /// call's path.
    fn drive(
        routes: &mut Routes,
        class: Class,
        calls: u32,
        per_call: u32,
        ring: u64,
        single: u64,
    ) -> Vec<bool> {
        (0..calls)
            .map(|seq| {
                let mut path = None;
                for _ in 0..per_call {
                    let r = routes.pick(class, seq);
                    assert!(path.is_none_or(|p| p == r.single), "one path per call");
                    path = Some(r.single);
                    routes.record(class, ms(if r.single { single } else { ring }));
                }
                path.unwrap_or(false)
            })
            .collect()
    }

    #[test]
    fn the_faster_path_is_kept_after_both_are_timed() {
        let mut routes = Routes::default();
        let c = Class::of(2 << 20, 4 << 20);
        let took = drive(&mut routes, c, 9, 2, 10, 7);
        // Untimed ring, then ring/single alternating by call, then (once the
        // fifth call has been filed, at the sixth) single for good.
        assert_eq!(
            took,
            [false, false, true, false, true, true, true, true, true]
        );
        assert_eq!(routes.decided(), vec![(22, 23, true)]);
    }

    #[test]
    fn a_slower_single_copy_is_tried_twice_then_never() {
        // The EPYC VM's case: single copy ten times slower.
        let mut routes = Routes::default();
        let c = Class::of(2 << 20, 4 << 20);
        let took = drive(&mut routes, c, 1000, 2, 1, 10);
        assert_eq!(took.iter().filter(|&&s| s).count(), SAMPLES);
        assert!(took[5..].iter().all(|&s| !s));
    }

    /// Named after what broke: per-message alternation timed the ring on
    /// the all-gather's copies and single copy on the reduce-scatter's
    /// reductions only.
    #[test]
    fn reduce_scatter_and_all_gather_messages_of_one_call_share_a_path() {
        let mut routes = Routes::default();
        let c = Class::of(1 << 20, 16 << 20);
        // A sliced 16 MiB all_reduce: 16 messages per call, reductions
        // (even) slower than copies (odd) whatever the path; single copy a
        // little slower on both.
        let mut paths = Vec::new();
        for seq in 0..8u32 {
            let mut call = Vec::new();
            for m in 0..16u64 {
                let r = routes.pick(c, seq);
                call.push(r.single);
                let base = if m % 2 == 0 { 30 } else { 10 };
                routes.record(c, ms(base + u64::from(r.single)));
            }
            assert!(call.iter().all(|&p| p == call[0]), "call {seq}: {call:?}");
            paths.push(call[0]);
        }
        assert_eq!(routes.decided(), vec![(21, 25, false)]);
        assert!(!paths[7]);
    }

    #[test]
    fn a_tie_keeps_the_ring() {
        let mut routes = Routes::default();
        let c = Class::of(1 << 20, 1 << 20);
        drive(&mut routes, c, 10, 1, 5, 5);
        assert_eq!(routes.decided(), vec![(21, 21, false)]);
    }

    #[test]
    fn classes_are_learnt_separately() {
        let mut routes = Routes::default();
        let small = Class::of(1 << 20, 2 << 20);
        let big = Class::of(1 << 20, 64 << 20);
        assert_ne!(small, big, "the operation's size is part of the class");
        drive(&mut routes, small, 10, 2, 5, 9);
        drive(&mut routes, big, 10, 2, 9, 5);
        assert_eq!(routes.decided(), vec![(21, 22, false), (21, 27, true)]);
    }

    #[test]
    fn a_failed_call_records_nothing_and_is_tried_again() {
        let mut routes = Routes::default();
        let c = Class::of(4 << 20, 8 << 20);
        assert!(!routes.pick(c, 0).timed);
        let first = routes.pick(c, 1);
        assert!(first.timed && !first.single);
        routes.discard(c);
        // The call failed: nothing filed, so the ring is due again.
        let again = routes.pick(c, 2);
        assert!(again.timed && !again.single);
    }
}
