//! The stretch check fed the mistakes a learner makes on the way to the delta
//! push: each is named, with the key of its hint.

use super::*;
use trainers::hogwild::push_delta;

fn message(f: PushDelta) -> String {
    check(f).unwrap_err().to_string()
}

/// The private numbers copied over the shared ones, then re-snapshotted.
fn copies(shared: &[Tensor], private: &[Tensor], snapshot: &[Tensor]) -> trainers::Result<()> {
    tch::no_grad(|| {
        for ((s, p), n) in shared.iter().zip(private).zip(snapshot) {
            s.shallow_clone().f_copy_(p)?;
            n.shallow_clone().f_copy_(s)?;
        }
        Ok(())
    })
}

/// The delta added, but the snapshot and the private copy left as they were.
fn keeps_the_snapshot(
    shared: &[Tensor],
    private: &[Tensor],
    snapshot: &[Tensor],
) -> trainers::Result<()> {
    tch::no_grad(|| {
        for ((s, p), n) in shared.iter().zip(private).zip(snapshot) {
            let _ = s.shallow_clone().f_add_(&p.f_sub(n)?)?;
        }
        Ok(())
    })
}

/// The delta taken the wrong way round: snapshot − private.
fn wrong_sign(shared: &[Tensor], private: &[Tensor], snapshot: &[Tensor]) -> trainers::Result<()> {
    tch::no_grad(|| {
        for ((s, p), n) in shared.iter().zip(private).zip(snapshot) {
            let _ = s.shallow_clone().f_add_(&n.f_sub(p)?)?;
            n.shallow_clone().f_copy_(s)?;
            p.shallow_clone().f_copy_(s)?;
        }
        Ok(())
    })
}

/// The snapshot re-taken, the private copy left behind.
fn private_left_behind(
    shared: &[Tensor],
    private: &[Tensor],
    snapshot: &[Tensor],
) -> trainers::Result<()> {
    tch::no_grad(|| {
        for ((s, p), n) in shared.iter().zip(private).zip(snapshot) {
            let _ = s.shallow_clone().f_add_(&p.f_sub(n)?)?;
            n.shallow_clone().f_copy_(s)?;
        }
        Ok(())
    })
}

#[test]
fn a_copy_over_the_shared_numbers_is_named() {
    let msg = message(copies);
    assert!(msg.contains("hint: copy-not-add"), "{msg}");
    assert!(
        msg.contains("your private numbers, copied") || msg.contains("A's delta is gone"),
        "{msg}"
    );
}

#[test]
fn a_snapshot_not_retaken_is_named_as_double_counting() {
    let msg = message(keeps_the_snapshot);
    assert!(
        msg.contains("the snapshot is not what is shared now"),
        "{msg}"
    );
    assert!(msg.contains("a second time"), "{msg}");
    assert!(msg.contains("hint: snapshot-not-retaken"), "{msg}");
}

#[test]
fn a_delta_of_the_wrong_sign_is_named() {
    let msg = message(wrong_sign);
    assert!(msg.contains("moved by minus the delta"), "{msg}");
    assert!(msg.contains("hint: delta-sign"), "{msg}");
}

#[test]
fn a_private_copy_left_behind_is_named() {
    let msg = message(private_left_behind);
    assert!(
        msg.contains("B's private copy is not what is shared now"),
        "{msg}"
    );
    assert!(msg.contains("hint: start-from-shared"), "{msg}");
}

#[test]
fn trainers_push_passes() {
    let said = check(push_delta).unwrap();
    assert!(said.contains("both deltas land"), "{said}");
}

/// The push written as `(shared + private) − snapshot`: the same additions in
/// another order, which round differently in the last place.
fn other_order(shared: &[Tensor], private: &[Tensor], snapshot: &[Tensor]) -> trainers::Result<()> {
    tch::no_grad(|| {
        for ((s, p), n) in shared.iter().zip(private).zip(snapshot) {
            let _ = s.shallow_clone().f_add_(p)?.f_sub_(n)?;
            n.shallow_clone().f_copy_(s)?;
            p.shallow_clone().f_copy_(s)?;
        }
        Ok(())
    })
}

/// A right push whose additions come in another order was refused as wrong
/// when the check compared bits.
#[test]
fn a_push_in_another_order_passes() {
    check(other_order).unwrap();
}
