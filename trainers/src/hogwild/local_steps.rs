//! Local SGD in shared memory (Downpour SGD's worker, Dean et al., 2012; "local SGD"
//! with `k` steps): instead of writing every step into the shared parameters, a
//! worker trains a private copy for `k` steps, then adds what those steps changed (its
//! *delta*, private − the snapshot it started from) into the shared parameters, in
//! place and without a lock, and starts again from what is shared now.
//!
//! Adding the delta, not copying the private numbers over the shared ones, is the
//! point: meanwhile other workers have added theirs, and a copy would erase them.
//! Re-taking the snapshot after each push is the other half: a delta measured
//! against an old snapshot would add the steps already pushed a second time.
//!
//! `k = 1` is not today's per-step update bit for bit: `s + ((s − lr·g) − s)` rounds
//! differently from `s − lr·g`. So the worker keeps the in-place per-step update for
//! `k = 1` ([`HogwildConfig::local_steps`](super::HogwildConfig::local_steps)) and
//! takes this path only for `k > 1`.

use super::*;

// ANCHOR: push_delta
/// Adds each private parameter's change since its snapshot into the shared one, in
/// place (`shared[i] += private[i] − snapshot[i]`, no lock: other workers may add
/// theirs at the same moment, as Hogwild! accepts), then starts the next round from
/// what is shared now: `snapshot[i]` and `private[i]` both become copies of
/// `shared[i]`. The three slices are in the same (name) order, with the same shapes.
pub fn push_delta(shared: &[Tensor], private: &[Tensor], snapshot: &[Tensor]) -> Result<()> {
    if shared.len() != private.len() || shared.len() != snapshot.len() {
        return Err(Error::InvalidArgument(format!(
            "push_delta: {} shared, {} private and {} snapshot tensors",
            shared.len(),
            private.len(),
            snapshot.len()
        )));
    }
    tch::no_grad(|| {
        for ((s, p), snap) in shared.iter().zip(private).zip(snapshot) {
            // The delta of this worker's k steps, added into the shared pages: the
            // other workers' deltas, added meanwhile, stay.
            let delta = p.f_sub(snap)?;
            let _ = s.shallow_clone().f_add_(&delta)?;
            // Everyone's progress, read back: the next delta counts only new steps.
            snap.shallow_clone().f_copy_(s)?;
            p.shallow_clone().f_copy_(s)?;
        }
        Ok(())
    })
}
// ANCHOR_END: push_delta

/// Private copies of `shared`, for a worker's parameters (`set_data` on them) and
/// its snapshot.
pub(super) fn private_copies(shared: &[Tensor]) -> Result<Vec<Tensor>> {
    tch::no_grad(|| shared.iter().map(|s| Ok(s.f_detach_copy()?)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_slice(v)
    }

    fn v(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t).unwrap()
    }

    /// One worker: the shared numbers become snapshot + (private − snapshot), the
    /// same operations in the same order, so exactly; private and snapshot follow.
    #[test]
    fn one_push_adds_the_delta_and_resnapshots() {
        let shared = [t(&[1.0, 2.0, 3.0])];
        let snapshot = [t(&[1.0, 2.0, 3.0])];
        let private = [t(&[0.7, 2.25, 3.1])];
        push_delta(&shared, &private, &snapshot).unwrap();
        let want: Vec<f32> = [1.0f32, 2.0, 3.0]
            .iter()
            .zip([0.7f32, 2.25, 3.1])
            .map(|(&s, p)| s + (p - s))
            .collect();
        assert_eq!(v(&shared[0]), want);
        assert_eq!(v(&snapshot[0]), want);
        assert_eq!(v(&private[0]), want);
    }

    /// Two workers from the same snapshot: both deltas land (a copy of the private
    /// numbers would keep only the second), and a second push without new steps adds
    /// nothing (the snapshot was re-taken).
    #[test]
    fn two_workers_deltas_both_land_and_are_counted_once() {
        let shared = [t(&[0.0, 0.0])];
        let (snap_a, snap_b) = ([t(&[0.0, 0.0])], [t(&[0.0, 0.0])]);
        let (a, b) = ([t(&[1.0, 0.0])], [t(&[0.0, 2.0])]);
        push_delta(&shared, &a, &snap_a).unwrap();
        push_delta(&shared, &b, &snap_b).unwrap();
        assert_eq!(v(&shared[0]), [1.0, 2.0]);
        assert_eq!(v(&b[0]), [1.0, 2.0]);
        push_delta(&shared, &b, &snap_b).unwrap();
        assert_eq!(v(&shared[0]), [1.0, 2.0]);
        assert!(push_delta(&shared, &a, &[]).is_err());
    }
}
