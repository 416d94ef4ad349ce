//! The check of lab 3's stretch goal, local SGD's delta push (`cargo lab check
//! 3 --stretch`). No processes: the check plays the workers itself, one after
//! the other, on tensors it can read before and after, so every expected number
//! is the push's own arithmetic (compared to a few units in the last place, so
//! that another order of the same additions passes), and a wrong push is named
//! by what it left: the other worker's delta gone (a copy,
//! not an add), the snapshot not re-taken (the next push counts the same steps
//! twice), the delta subtracted.

#[cfg(test)]
mod tests;

use labkit::{LabError, named};
use tch::Tensor;

use labkit_torch::lab_error;

/// A delta push, as `stretch::push_delta` and trainers' own
/// `hogwild::push_delta` (so a test can hand in mistaken ones).
pub type PushDelta = fn(&[Tensor], &[Tensor], &[Tensor]) -> trainers::Result<()>;

/// The learning rate of the check's local steps.
const LR: f32 = 0.125;

/// The check's parameters: two tensors of uneven values (a weight and a bias).
fn start() -> Vec<Vec<f32>> {
    vec![
        (0..12).map(|i| 0.3 + 0.17 * i as f32).collect(),
        vec![-0.5, 0.25, 1.75],
    ]
}

/// The gradient of worker `w`'s local step `k` for a parameter of `n` numbers:
/// made up, different per worker, step and element.
fn grad(w: usize, k: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((w * 7 + k * 3 + i) % 5) as f32 - 1.75)
        .collect()
}

fn tensors(v: &[Vec<f32>]) -> Vec<Tensor> {
    v.iter().map(|x| Tensor::from_slice(x)).collect()
}

fn read(t: &[Tensor]) -> Result<Vec<Vec<f32>>, LabError> {
    t.iter()
        .map(|t| Vec::<f32>::try_from(t).map_err(|e| lab_error(e.into())))
        .collect()
}

/// `steps` local SGD steps of worker `w` on `p`, in f32 as a tensor's `sub_`
/// does them: p ← p − lr·g.
fn local_steps(p: &mut [Vec<f32>], w: usize, steps: usize) {
    for k in 0..steps {
        for x in p.iter_mut() {
            let g = grad(w, k, x.len());
            for (v, g) in x.iter_mut().zip(g) {
                *v -= LR * g;
            }
        }
    }
}

/// `shared + (private − snapshot)`, element by element, in that order.
fn plus_delta(shared: &[Vec<f32>], private: &[Vec<f32>], snapshot: &[Vec<f32>]) -> Vec<Vec<f32>> {
    shared
        .iter()
        .zip(private)
        .zip(snapshot)
        .map(|((s, p), n)| {
            s.iter()
                .zip(p)
                .zip(n)
                .map(|((s, p), n)| s + (p - n))
                .collect()
        })
        .collect()
}

/// How far two numbers may differ and still count as the same: a few units in
/// the last place (relative to the larger, or to 1 near zero). A push written
/// in another order, `(shared + private) − snapshot`, rounds differently from
/// `shared + (private − snapshot)` by about one; every mistake the check names
/// is off by a whole delta (at least 0.03 here, see [`grad`]).
const TOLERANCE: f32 = 4.0 * f32::EPSILON;

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(1.0)
}

fn same(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.len() == y.len() && x.iter().zip(y).all(|(&x, &y)| close(x, y)))
}

/// The first element where `got` and `want` differ, for a message.
fn first_diff(got: &[Vec<f32>], want: &[Vec<f32>]) -> String {
    for (t, (g, w)) in got.iter().zip(want).enumerate() {
        if g.len() != w.len() {
            return format!("tensor {t} has {} numbers, not {}", g.len(), w.len());
        }
        if let Some(i) = (0..g.len()).find(|&i| !close(g[i], w[i])) {
            return format!("tensor {t}, element {i}: {} where {} is due", g[i], w[i]);
        }
    }
    "a tensor is missing".into()
}

/// One worker's push after `steps` local steps from `shared0`: returns the
/// tensors after the push (shared, private, snapshot), as numbers, and the
/// private numbers before it.
type Pushed = (Vec<Vec<f32>>, Vec<Vec<f32>>, Vec<Vec<f32>>, Vec<Vec<f32>>);

fn push_once(f: PushDelta, shared: &[Tensor], w: usize, steps: usize) -> Result<Pushed, LabError> {
    let snap0 = read(shared)?;
    let mut p = snap0.clone();
    local_steps(&mut p, w, steps);
    let (private, snapshot) = (tensors(&p), tensors(&snap0));
    f(shared, &private, &snapshot).map_err(lab_error)?;
    Ok((read(shared)?, read(&private)?, read(&snapshot)?, p))
}

/// The stretch goal's check. Returns what passed.
pub fn check(f: PushDelta) -> Result<String, LabError> {
    // 1. One worker, 3 local steps.
    let s0 = start();
    let shared = tensors(&s0);
    let (after, private, snapshot, p) = push_once(f, &shared, 0, 3)?;
    let want = plus_delta(&s0, &p, &s0);
    if !same(&after, &want) {
        let minus: Vec<Vec<f32>> = s0
            .iter()
            .zip(&p)
            .map(|(s, p)| s.iter().zip(p).map(|(s, p)| s - (p - s)).collect())
            .collect();
        let msg = format!(
            "one worker, 3 local steps: after your push the shared numbers are not the \
             snapshot plus the delta ({})",
            first_diff(&after, &want)
        );
        if same(&after, &s0) {
            return Err(LabError::Wrong(format!(
                "{msg}: they did not change. Write into the shared tensors themselves, \
                 in place"
            )));
        }
        if same(&after, &p) {
            return Err(LabError::Wrong(named(
                format!(
                    "{msg}: they are your private numbers, copied. With one worker that \
                     is nearly right, but every other worker's delta pushed since your \
                     snapshot would be erased"
                ),
                "copy-not-add",
            )));
        }
        if same(&after, &minus) {
            return Err(LabError::Wrong(named(
                format!(
                    "{msg}: they moved by minus the delta, back against the worker's 3 \
                     steps"
                ),
                "delta-sign",
            )));
        }
        return Err(LabError::Wrong(msg));
    }
    if !same(&snapshot, &after) {
        return Err(LabError::Wrong(named(
            format!(
                "one worker: the shared numbers are right, but the snapshot is not what is \
                 shared now ({}): the next push would measure its delta from the old \
                 snapshot and add these 3 steps a second time",
                first_diff(&snapshot, &after)
            ),
            "snapshot-not-retaken",
        )));
    }
    if !same(&private, &after) {
        return Err(LabError::Wrong(named(
            format!(
                "one worker: the shared numbers and the snapshot are right, but the private \
                 copy is not what is shared now ({}): the next round must start from \
                 everyone's progress",
                first_diff(&private, &after)
            ),
            "start-from-shared",
        )));
    }
    // A second push with no new steps must add nothing.
    f(&shared, &tensors(&after), &tensors(&after)).map_err(lab_error)?;
    let again = read(&shared)?;
    if !same(&again, &after) {
        return Err(LabError::Wrong(format!(
            "one worker: a second push with no new steps (private = snapshot = shared) \
             changed the shared numbers ({}): a push adds only private − snapshot",
            first_diff(&again, &after)
        )));
    }

    // 2. Two workers from one snapshot, pushing one after the other.
    let shared = tensors(&s0);
    let (mut a, mut b) = (s0.clone(), s0.clone());
    local_steps(&mut a, 1, 2);
    local_steps(&mut b, 2, 4);
    let (ta, sa) = (tensors(&a), tensors(&s0));
    let (tb, sb) = (tensors(&b), tensors(&s0));
    f(&shared, &ta, &sa).map_err(lab_error)?;
    let after_a = plus_delta(&s0, &a, &s0);
    f(&shared, &tb, &sb).map_err(lab_error)?;
    let got = read(&shared)?;
    let want = plus_delta(&after_a, &b, &s0);
    if !same(&got, &want) {
        let msg = format!(
            "two workers from one snapshot, A pushing after 2 steps, then B after 4: the \
             shared numbers are not start + A's delta + B's delta ({})",
            first_diff(&got, &want)
        );
        if same(&got, &b) || same(&got, &plus_delta(&s0, &b, &s0)) {
            return Err(LabError::Wrong(named(
                format!(
                    "{msg}: they are B's own numbers, so A's delta is gone. Copying the \
                     private numbers over the shared ones erases what every other worker \
                     pushed since your snapshot"
                ),
                "copy-not-add",
            )));
        }
        return Err(LabError::Wrong(msg));
    }
    // B's next round starts from everyone's progress, A's delta included (with
    // one worker, shared and private may agree anyway).
    let (bp, bs) = (read(&tb)?, read(&sb)?);
    if !same(&bs, &got) {
        return Err(LabError::Wrong(named(
            format!(
                "two workers: both deltas landed, but B's snapshot is not what is shared \
                 now ({}): B's next push would add its 4 steps a second time",
                first_diff(&bs, &got)
            ),
            "snapshot-not-retaken",
        )));
    }
    if !same(&bp, &got) {
        return Err(LabError::Wrong(named(
            format!(
                "two workers: both deltas landed, but B's private copy is not what is \
                 shared now ({}): B's next steps would start without A's progress, and \
                 its next delta would carry A's delta back out",
                first_diff(&bp, &got)
            ),
            "start-from-shared",
        )));
    }
    Ok(
        "one worker: shared = snapshot + delta (to a few units in the last place), snapshot and private copy \
         re-taken, a second push adds nothing; two workers: both deltas land and the next \
         round starts from both"
            .into(),
    )
}
