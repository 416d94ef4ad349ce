//! Where two measured curves cross: the size from which one algorithm beats
//! another (lab 6: the ring overtakes the tree; lab 1: by hand against
//! all_reduce). Computed from the learner's own points, so the mark on the
//! chart is what their run says, not what the chapter expects.

/// The last crossing of two curves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Crossing {
    /// Where they cross, interpolated in log space.
    pub x: f64,
    /// Whether the first curve is the lower one from here to the end.
    pub first_below_after: bool,
}

/// `ln y` of the curve `pts` (sorted by x, all positive) at `x` inside its
/// range, straight between neighbours in log–log.
fn ln_at(pts: &[(f64, f64)], x: f64) -> Option<f64> {
    let i = pts.partition_point(|p| p.0 < x);
    let hit = pts.get(i)?;
    if hit.0 == x {
        return Some(hit.1.ln());
    }
    let before = pts.get(i.checked_sub(1)?)?;
    let t = (x.ln() - before.0.ln()) / (hit.0.ln() - before.0.ln());
    Some(before.1.ln() + t * (hit.1.ln() - before.1.ln()))
}

/// The last x where curves `a` and `b` cross inside the range both cover,
/// interpolated in log space (both axes), or `None` when they do not cross
/// there or either curve has a point that is not positive and finite (a log
/// axis cannot hold it). Noisy curves may cross several times; the last
/// crossing is where one of them takes the lead for good, which is what
/// "overtakes at" means.
pub(crate) fn crossing(a: &[(f64, f64)], b: &[(f64, f64)]) -> Option<Crossing> {
    let clean = |pts: &[(f64, f64)]| -> Option<Vec<(f64, f64)>> {
        let ok = pts
            .iter()
            .all(|p| p.0.is_finite() && p.1.is_finite() && p.0 > 0.0 && p.1 > 0.0);
        let mut v = pts.to_vec();
        v.sort_by(|p, q| p.0.total_cmp(&q.0));
        v.dedup_by(|p, q| p.0 == q.0);
        (ok && v.len() >= 2).then_some(v)
    };
    let (a, b) = (clean(a)?, clean(b)?);
    let lo = a[0].0.max(b[0].0);
    let hi = a[a.len() - 1].0.min(b[b.len() - 1].0);
    if lo >= hi {
        return None;
    }
    let mut xs: Vec<f64> = a
        .iter()
        .chain(&b)
        .map(|p| p.0)
        .filter(|&x| x >= lo && x <= hi)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    // The log gap at each x; equal points (a gap of 0) decide nothing.
    let gaps: Vec<(f64, f64)> = xs
        .iter()
        .filter_map(|&x| Some((x, ln_at(&a, x)? - ln_at(&b, x)?)))
        .filter(|(_, d)| *d != 0.0)
        .collect();
    gaps.windows(2)
        .rev()
        .find(|w| (w[0].1 < 0.0) != (w[1].1 < 0.0))
        .map(|w| {
            let ((x0, d0), (x1, d1)) = (w[0], w[1]);
            let t = d0 / (d0 - d1);
            Crossing {
                x: (x0.ln() + t * (x1.ln() - x0.ln())).exp(),
                first_below_after: d1 < 0.0,
            }
        })
}

/// The note on a crossing of `a` and `b` at the formatted `at`: who takes
/// the lead when `lower_is_better` says which way is better, else only where
/// they cross.
pub(crate) fn note(
    a: &str,
    b: &str,
    c: &Crossing,
    at: &str,
    lower_is_better: Option<bool>,
) -> String {
    match lower_is_better {
        Some(lower) => {
            let (winner, loser) = if c.first_below_after == lower {
                (a, b)
            } else {
                (b, a)
            };
            format!("{winner} overtakes {loser} at {at}")
        }
        None => format!("{a} and {b} cross at {at}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring (α 40, fast per byte) against a tree (α 10, slow per byte):
    /// t = α + S/bw cross where 40 + S/4 = 10 + S/2, at S = 120.
    #[test]
    fn curves_that_cross_are_found_where_they_cross() {
        let sizes: Vec<f64> = (0..12).map(|k| 8.0 * 2f64.powi(k)).collect();
        let ring: Vec<(f64, f64)> = sizes.iter().map(|&s| (s, 40.0 + s / 4.0)).collect();
        let tree: Vec<(f64, f64)> = sizes.iter().map(|&s| (s, 10.0 + s / 2.0)).collect();
        let c = crossing(&ring, &tree).expect("they cross");
        // Interpolated between 64 and 128 in log space: near 120, not at a
        // measured size.
        assert!((90.0..128.0).contains(&c.x), "{c:?}");
        assert!(c.first_below_after, "the ring is lower after");
        assert_eq!(
            note("ring", "tree", &c, "120 B", Some(true)),
            "ring overtakes tree at 120 B"
        );
        assert_eq!(
            note("ring", "tree", &c, "120 B", Some(false)),
            "tree overtakes ring at 120 B"
        );
        let back = crossing(&tree, &ring).unwrap();
        assert!((back.x - c.x).abs() < 1e-9 && !back.first_below_after);
    }

    #[test]
    fn curves_that_do_not_cross_in_the_range_have_no_crossing() {
        let a = [(8.0, 1.0), (64.0, 2.0), (1024.0, 9.0)];
        let b = [(8.0, 2.0), (64.0, 3.0), (1024.0, 10.0)];
        assert_eq!(crossing(&a, &b), None);
        // They would cross beyond b's last size: outside the common range.
        let c = [(8.0, 0.5), (32.0, 1.5), (2048.0, 20.0)];
        let d = [(8.0, 1.0), (64.0, 2.5)];
        assert_eq!(crossing(&c, &d), None);
        // Touching without crossing, and a point a log axis cannot hold.
        assert_eq!(crossing(&a, &[(8.0, 1.0), (1024.0, 10.0)]), None);
        assert_eq!(crossing(&a, &[(8.0, 0.0), (1024.0, 1.0)]), None);
    }

    #[test]
    fn noisy_curves_are_marked_where_the_lead_changes_for_good() {
        let a = [(1.0, 1.0), (10.0, 3.0), (100.0, 1.0), (1000.0, 5.0)];
        let b = [(1.0, 2.0), (10.0, 2.0), (100.0, 2.0), (1000.0, 2.0)];
        let c = crossing(&a, &b).unwrap();
        assert!(c.x > 100.0 && c.x < 1000.0, "{c:?}");
        assert!(!c.first_below_after);
    }
}
