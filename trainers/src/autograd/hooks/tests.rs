use std::sync::{Arc, Mutex};

use tch::{Kind, Tensor, kind::FLOAT_CPU};

use super::GradReadyHooks;
use crate::autograd::ops;

type Seen = Arc<Mutex<Vec<(usize, f64)>>>;

/// Hooks `w` and `b`; each call records (index, sum of that parameter's .grad).
fn hooked(w: &Tensor, b: &Tensor) -> (GradReadyHooks, Seen) {
    let seen: Seen = Arc::default();
    let params = Mutex::new(vec![w.shallow_clone(), b.shallow_clone()]);
    let log = seen.clone();
    let hooks = GradReadyHooks::register(&[w.shallow_clone(), b.shallow_clone()], move |i| {
        let sum = params.lock().ok().and_then(|p| {
            p.get(i)
                .map(|t| t.grad().sum(Kind::Double).double_value(&[]))
        });
        if let (Some(s), Ok(mut l)) = (sum, log.lock()) {
            l.push((i, s));
        }
    })
    .expect("hooks on two leaves");
    (hooks, seen)
}

/// The calls from the `from`-th on (one backward's, if `from` is where it
/// began), by parameter index: hooks of one backward run in graph order.
fn sorted(seen: &Seen, from: usize) -> Vec<(usize, f64)> {
    let mut v = seen.lock().expect("log")[from..].to_vec();
    v.sort_by_key(|e| e.0);
    v
}

#[test]
fn hook_sees_the_accumulated_grad_once_per_backward_and_stops_when_dropped() {
    let w = Tensor::ones([3], FLOAT_CPU).set_requires_grad(true);
    let b = Tensor::ones([1], FLOAT_CPU).set_requires_grad(true);
    let (hooks, seen) = hooked(&w, &b);
    let loss = || (&w * 2.0).sum(Kind::Float) + (&b * 3.0).sum(Kind::Float);
    loss().backward();
    // d/dw = 2 per element (3 elements), d/db = 3: already in .grad when called.
    assert_eq!(sorted(&seen, 0), vec![(0, 6.0), (1, 3.0)]);
    loss().backward();
    // The second backward's hook sees the sum of both.
    assert_eq!(sorted(&seen, 2), vec![(0, 12.0), (1, 6.0)]);
    drop(hooks);
    loss().backward();
    assert_eq!(seen.lock().expect("log").len(), 4);
}

#[test]
fn a_parameter_that_is_not_a_leaf_is_refused_and_nothing_is_hooked() {
    let w = Tensor::ones([3], FLOAT_CPU).set_requires_grad(true);
    let not_leaf = &w * 2.0;
    let called = Arc::new(Mutex::new(0));
    let c = called.clone();
    let err = GradReadyHooks::register(&[w.shallow_clone(), not_leaf], move |_| {
        if let Ok(mut n) = c.lock() {
            *n += 1;
        }
    })
    .expect_err("a non-leaf must be refused");
    assert!(
        err.to_string().contains("parameter 1 is not a leaf"),
        "{err}"
    );
    w.sum(Kind::Float).backward();
    assert_eq!(*called.lock().expect("count"), 0);
}

#[test]
fn op_counter_counts_dispatched_ops_and_backward_nodes() {
    let w = Tensor::ones([3], FLOAT_CPU).set_requires_grad(true);
    let (_, none) = ops::count(|| ()).expect("counter");
    assert_eq!(
        none,
        ops::OpCount {
            ops: 0,
            backward_nodes: 0
        }
    );
    let (_, fwd) = ops::count(|| (&w * 2.0).sum(Kind::Float)).expect("counter");
    assert!(fwd.ops >= 2, "{fwd:?}");
    assert_eq!(fwd.backward_nodes, 0);
    let loss = (&w * 2.0).sum(Kind::Float);
    let (_, bwd) = ops::count(|| loss.backward()).expect("counter");
    // SumBackward0, MulBackward1, AccumulateGrad (at least).
    assert!(bwd.backward_nodes >= 3, "{bwd:?}");
}
