//! The stretch check fed the mistakes a learner makes on the way to PyTorch's
//! bucket assignment: each is named, with the key of its hint.

use super::*;
use trainers::bucket::assign;

/// One way to get the assignment wrong (or none).
#[derive(Clone, Copy, PartialEq)]
enum Mistake {
    None,
    RegistrationOrder,
    MoreThanLimit,
    CapEverywhere,
    FirstEverywhere,
    CloseBeforeCrossing,
    IgnoreKinds,
    OpenFirst,
}

/// PyTorch's rule, written plainly, with `m` put in: what a learner's
/// attempt returns.
fn attempt(
    m: Mistake,
    params: &[(usize, Key)],
    order: &[usize],
    limits: &[usize],
) -> Vec<Vec<usize>> {
    let walk: Vec<usize> = if m == Mistake::RegistrationOrder {
        (0..params.len()).collect()
    } else {
        order.to_vec()
    };
    let limit = |k: usize| match m {
        Mistake::CapEverywhere => limits[limits.len() - 1],
        Mistake::FirstEverywhere => limits[0],
        _ => limits[k.min(limits.len() - 1)],
    };
    // Open buckets: (kind, members, bytes, index of its limit).
    let mut open: Vec<(Key, Vec<usize>, usize, usize)> = Vec::new();
    let mut done = Vec::new();
    for i in walk {
        let (bytes, key) = params[i];
        let key = if m == Mistake::IgnoreKinds { F32 } else { key };
        let s = match open.iter().position(|o| o.0 == key) {
            Some(s) => s,
            None => {
                open.push((key, Vec::new(), 0, 0));
                open.len() - 1
            }
        };
        let o = &mut open[s];
        if m == Mistake::CloseBeforeCrossing && !o.1.is_empty() && o.2 + bytes > limit(o.3) {
            done.push(std::mem::take(&mut o.1));
            o.2 = 0;
            o.3 += 1;
        }
        o.1.push(i);
        o.2 += bytes;
        let full = if m == Mistake::MoreThanLimit {
            o.2 > limit(o.3)
        } else {
            o.2 >= limit(o.3)
        };
        if full && m != Mistake::CloseBeforeCrossing {
            done.push(std::mem::take(&mut o.1));
            o.2 = 0;
            o.3 += 1;
        }
    }
    let rest = open.into_iter().map(|o| o.1).filter(|b| !b.is_empty());
    if m == Mistake::OpenFirst {
        // One list per kind, the kinds in order of first appearance,
        // whatever closed when.
        let mut by_kind: Vec<(Key, Vec<Vec<usize>>)> = Vec::new();
        for &i in order {
            if !by_kind.iter().any(|(k, _)| *k == params[i].1) {
                by_kind.push((params[i].1, Vec::new()));
            }
        }
        for b in done.into_iter().chain(rest) {
            let k = params[b[0]].1;
            if let Some((_, v)) = by_kind.iter_mut().find(|(kk, _)| *kk == k) {
                v.push(b);
            }
        }
        return by_kind.into_iter().flat_map(|(_, v)| v).collect();
    }
    done.extend(rest);
    done
}

macro_rules! mistaken {
    ($name:ident, $m:expr) => {
        fn $name(
            p: &[(usize, Key)],
            o: &[usize],
            l: &[usize],
        ) -> trainers::Result<Vec<Vec<usize>>> {
            Ok(attempt($m, p, o, l))
        }
    };
}
mistaken!(plain, Mistake::None);
mistaken!(registration_order, Mistake::RegistrationOrder);
mistaken!(more_than_limit, Mistake::MoreThanLimit);
mistaken!(cap_everywhere, Mistake::CapEverywhere);
mistaken!(first_everywhere, Mistake::FirstEverywhere);
mistaken!(close_before_crossing, Mistake::CloseBeforeCrossing);
mistaken!(ignore_kinds, Mistake::IgnoreKinds);
mistaken!(open_first, Mistake::OpenFirst);

fn message(f: Assign) -> String {
    check(f).unwrap_err().to_string()
}

#[test]
fn buckets_in_registration_order_are_named_on_the_cnn() {
    let msg = message(registration_order);
    assert!(msg.contains("on the lab's CNN"), "{msg}");
    assert!(msg.contains("hint: ready-order"), "{msg}");
}

#[test]
fn a_limit_met_exactly_that_leaves_the_bucket_open_is_named() {
    let msg = message(more_than_limit);
    assert!(msg.contains("limits [4, 12] (met exactly)"), "{msg}");
    assert!(msg.contains("hint: at-least-the-limit"), "{msg}");
}

#[test]
fn the_first_limit_used_for_every_bucket_or_for_none_is_named() {
    for f in [cap_everywhere as Assign, first_everywhere] {
        let msg = message(f);
        assert!(msg.contains("hint: first-limit-first-bucket"), "{msg}");
    }
}

#[test]
fn a_bucket_closed_before_its_crossing_parameter_is_named() {
    let msg = message(close_before_crossing);
    assert!(msg.contains("on the lab's CNN"), "{msg}");
    assert!(msg.contains("hint: crossing-parameter-inside"), "{msg}");
}

#[test]
fn a_bucket_that_mixes_kinds_is_named() {
    let msg = message(ignore_kinds);
    assert!(msg.contains("bucket 0 mixes kinds"), "{msg}");
    assert!(msg.contains("hint: one-kind-per-bucket"), "{msg}");
}

#[test]
fn open_buckets_before_closed_ones_are_named() {
    let msg = message(open_first);
    assert!(msg.contains("hint: closed-before-open"), "{msg}");
}

#[test]
fn a_parameter_twice_or_never_is_named() {
    fn twice(p: &[(usize, Key)], o: &[usize], l: &[usize]) -> trainers::Result<Vec<Vec<usize>>> {
        let mut b = attempt(Mistake::None, p, o, l);
        let first = b[0][0];
        b[0].push(first);
        Ok(b)
    }
    fn dropped(p: &[(usize, Key)], o: &[usize], l: &[usize]) -> trainers::Result<Vec<Vec<usize>>> {
        let mut b = attempt(Mistake::None, p, o, l);
        b.pop();
        Ok(b)
    }
    let msg = message(twice);
    assert!(msg.contains("parameter 7 is in 2 bucket(s)"), "{msg}");
    assert!(msg.contains("hint: every-parameter-once"), "{msg}");
    let msg = message(dropped);
    assert!(msg.contains("parameter 0 is in 0 bucket(s)"), "{msg}");
}

#[test]
fn a_panic_in_the_assignment_is_an_error_not_a_crash() {
    fn panics(_: &[(usize, Key)], _: &[usize], l: &[usize]) -> trainers::Result<Vec<Vec<usize>>> {
        let _ = l[99];
        Ok(Vec::new())
    }
    let msg = message(panics);
    assert!(
        msg.contains("your assignment panicked on the lab's CNN"),
        "{msg}"
    );
}

#[test]
fn every_mistake_differs_from_the_answer_somewhere_and_the_plain_rule_passes() {
    // The hand-worked answers agree with the rule written plainly.
    check(plain).unwrap();
}

#[test]
fn trainers_assignment_passes() {
    let said = check(assign::<Key>).unwrap();
    assert!(said.contains("PyTorch's on 5 models"), "{said}");
}

#[test]
fn the_cnn_bytes_are_the_lab_cnns_parameters_in_registration_order() {
    let vs = tch::nn::VarStore::new(Device::Cpu);
    let _model = trainers::models::cnn().build(&vs.root());
    // The order Ddp registers them in (its `named_variables`).
    let bytes: Vec<usize> = vs
        .trainable_variables()
        .iter()
        .map(|p| p.numel() * 4)
        .collect();
    assert_eq!(bytes, CNN_BYTES);
}
