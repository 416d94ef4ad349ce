//! The check of lab 9's stretch goal, predicting the crossover of two
//! backends from α–β fits (`cargo lab check 9 --stretch`). Every case is
//! made from known α and β, so the right answer is known exactly; a wrong
//! one is compared with what each likely mistake would have given, to name
//! it.

#[cfg(test)]
mod tests;

use labkit::{LabError, named};
use reports::Crossover;

/// A backend's `(bytes, µs)` points to its `(α, β)`.
pub type Fit = fn(&[(f64, f64)]) -> Result<(f64, f64), LabError>;
/// Two backends' points to where their lines cross.
pub type Predict = fn(&[(f64, f64)], &[(f64, f64)]) -> Result<Crossover, LabError>;

/// The two functions of the stretch goal, as `stretch::fit_line` and
/// `stretch::predict_crossover` (so a test can hand in mistaken ones).
#[derive(Clone, Copy)]
pub struct Predictor {
    /// The line through one backend's points.
    pub fit: Fit,
    /// Where two backends' lines cross.
    pub crossover: Predict,
}

/// The report's own fit ([`reports::fit_alpha_beta`], as the HTML report
/// and `alpha-beta.png` fit every series) as a [`Fit`].
pub fn reports_fit(points: &[(f64, f64)]) -> Result<(f64, f64), LabError> {
    let fit = reports::fit_alpha_beta(points, 1.0);
    let m = fit.model().ok_or_else(|| {
        LabError::Wrong(format!(
            "{fit:?}: no line goes through fewer than two sizes"
        ))
    })?;
    Ok((m.alpha_us, m.beta_us_per_byte))
}

/// [`reports::predict_crossover`] as a [`Predict`].
pub fn reports_crossover(a: &[(f64, f64)], b: &[(f64, f64)]) -> Result<Crossover, LabError> {
    reports::predict_crossover(a, b)
        .ok_or_else(|| LabError::Wrong("a backend with fewer than two sizes has no line".into()))
}

/// The solution: the report's fit and crossover.
pub fn solution() -> Predictor {
    Predictor {
        fit: reports_fit,
        crossover: reports_crossover,
    }
}

/// A backend of the check: its α (µs) and β (µs per byte).
#[derive(Clone, Copy, Debug)]
struct Line {
    name: &'static str,
    alpha: f64,
    beta: f64,
}

/// A TCP library: slow to start, 2 GB/s.
const TCP: Line = Line {
    name: "tcp (α 50 µs, β 1/2000 µs/B)",
    alpha: 50.0,
    beta: 1.0 / 2000.0,
};
/// Shared memory: quick to start, 0.5 GB/s. Crosses TCP at
/// 45 / 0.0015 = 30,000 bytes.
const SHM: Line = Line {
    name: "shm (α 5 µs, β 1/500 µs/B)",
    alpha: 5.0,
    beta: 1.0 / 500.0,
};
/// Slower than TCP at every size.
const SLOW: Line = Line {
    name: "slow (α 60 µs, β 1/1000 µs/B)",
    alpha: 60.0,
    beta: 1.0 / 1000.0,
};
/// TCP's slope, a smaller α: parallel to it.
const PARALLEL: Line = Line {
    name: "parallel (α 20 µs, β 1/2000 µs/B)",
    alpha: 20.0,
    beta: 1.0 / 2000.0,
};

/// Sizes 8 B to 8 MiB, ×4: six decades, as a bench sweep.
fn sizes() -> Vec<f64> {
    (0..11).map(|k| 8.0 * 4f64.powi(k)).collect()
}

impl Line {
    fn points(self) -> Vec<(f64, f64)> {
        sizes()
            .into_iter()
            .map(|s| (s, self.alpha + self.beta * s))
            .collect()
    }
    /// 1 KiB to 256 KiB, each time off by up to ±3% (a fixed pattern, so the
    /// check is the same on every run): measured times, around the crossing.
    fn noisy(self) -> Vec<(f64, f64)> {
        const WOBBLE: [f64; 9] = [0.03, -0.02, 0.01, -0.03, 0.02, -0.01, 0.03, -0.03, 0.0];
        (0..9)
            .map(|k| {
                let s = 1024.0 * 2f64.powi(k);
                (s, (self.alpha + self.beta * s) * (1.0 + WOBBLE[k as usize]))
            })
            .collect()
    }
}

/// The answer for two lines, by the report's own arithmetic.
fn truth(a: Line, b: Line) -> Crossover {
    reports::lines_cross((a.alpha, a.beta), (b.alpha, b.beta))
}

/// Relative closeness.
fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs()
}

/// Exact points in, exact line out up to rounding: least squares on points
/// that lie on a line recovers it to some 1e-12 (six decades of sizes cost
/// a few digits), so 1e-6 leaves room for any sound way of solving it.
const EXACT: f64 = 1e-6;

/// How far the fit of `line`'s exact points is from it, named.
fn judge_fit(line: Line, got: (f64, f64)) -> Option<String> {
    let (alpha, beta) = got;
    if close(alpha, line.alpha, EXACT) && close(beta, line.beta, EXACT) {
        return None;
    }
    let head = format!(
        "fit_line on the exact points of {} returned α = {alpha}, β = {beta}",
        line.name
    );
    if close(alpha, line.beta, EXACT) && close(beta, line.alpha, EXACT) {
        return Some(named(
            format!(
                "{head}: that is (β, α). α is the intercept (the time of a message of 0 \
                 bytes), β the slope (µs per byte)"
            ),
            "slope-vs-intercept",
        ));
    }
    // A line in log S leaves the points closer than a line in S does.
    let off = |x: fn(f64) -> f64| -> f64 {
        line.points()
            .iter()
            .map(|&(s, t)| ((alpha + beta * x(s) - t) / t).abs())
            .fold(0.0, f64::max)
    };
    if off(f64::ln) < off(|s| s) {
        return Some(named(
            format!(
                "{head}: α + β·ln S follows the points better than α + β·S does: the fit \
                 was of time against log S. The model is linear in the size itself"
            ),
            "log-n",
        ));
    }
    Some(format!(
        "{head}, where the points lie on α = {}, β = {}",
        line.alpha, line.beta
    ))
}

/// What is wrong with `got` for lines `a` and `b`, named.
fn judge_crossover(a: Line, b: Line, got: Crossover) -> Option<String> {
    let want = truth(a, b);
    let head = format!(
        "predict_crossover({}, {}) returned {got:?} where the lines give {want:?}",
        a.name, b.name
    );
    match (want, got) {
        (
            Crossover::At { bytes, below },
            Crossover::At {
                bytes: g,
                below: gb,
            },
        ) => {
            if !close(g, bytes, EXACT) {
                let tries = [
                    (a.alpha / b.beta, "α_a / β_b"),
                    (b.alpha / a.beta, "α_b / β_a"),
                    (a.alpha / a.beta, "α_a / β_a"),
                    (b.alpha / b.beta, "α_b / β_b"),
                    (
                        (a.alpha + b.alpha) / (a.beta + b.beta),
                        "(α_a + α_b) / (β_a + β_b)",
                    ),
                ];
                let which = tries
                    .iter()
                    .find(|(x, _)| close(g, *x, EXACT))
                    .map_or(String::new(), |(_, what)| format!(" (that is {what})"));
                return Some(named(
                    format!(
                        "{head}: your crossing is at {g:.1} bytes{which}, the lines meet at \
                         {bytes}. Where are the two predicted times equal?"
                    ),
                    "crossover-formula",
                ));
            }
            (gb != below).then(|| {
                named(
                    format!(
                        "{head}: the size is right, the winners are swapped. Which backend is \
                         faster for a message of almost 0 bytes?"
                    ),
                    "which-side-wins",
                )
            })
        }
        (Crossover::Never { faster }, Crossover::Never { faster: g }) => (g != faster).then(|| {
            named(
                format!("{head}: they never cross, but the other one is the faster"),
                "which-side-wins",
            )
        }),
        (Crossover::Never { .. }, Crossover::At { bytes, .. }) => {
            let why = if !bytes.is_finite() {
                "an infinite (or NaN) size is a division by a zero difference of slopes: \
                 parallel lines"
            } else if bytes <= 0.0 {
                "a crossing at a size of 0 or less is no crossing: messages have positive sizes"
            } else {
                "the slopes are equal up to rounding: parallel lines, whose \"crossing\" is \
                 rounding noise"
            };
            Some(named(format!("{head}: {why}"), "no-crossover"))
        }
        (Crossover::At { .. }, Crossover::Never { .. }) => Some(head),
    }
}

/// The stretch goal's check: exact fits, an error for one size, the four
/// line pairs, and the noisy pair. Returns what passed.
pub fn check(p: Predictor) -> Result<String, LabError> {
    for line in [TCP, SHM] {
        let got = (p.fit)(&line.points())?;
        if let Some(why) = judge_fit(line, got) {
            return Err(LabError::Wrong(why));
        }
    }
    let one_size = [(4096.0, 10.0), (4096.0, 12.0)];
    if let Ok(got) = (p.fit)(&one_size) {
        return Err(LabError::Wrong(format!(
            "fit_line on two points of the same size (4096 bytes) returned {got:?}: a line \
             through one size is undetermined (any slope fits), so return an error"
        )));
    }
    for (a, b) in [
        (TCP, SHM),
        (SHM, TCP),
        (TCP, SLOW),
        (SLOW, TCP),
        (TCP, PARALLEL),
    ] {
        let got = (p.crossover)(&a.points(), &b.points())?;
        if let Some(why) = judge_crossover(a, b, got) {
            return Err(LabError::Wrong(why));
        }
    }
    let want = truth(TCP, SHM);
    let got = (p.crossover)(&TCP.noisy(), &SHM.noisy())?;
    let (
        Crossover::At { bytes, below },
        Crossover::At {
            bytes: g,
            below: gb,
        },
    ) = (want, got)
    else {
        return Err(LabError::Wrong(format!(
            "on noisy points (±3%) of {} and {} predict_crossover returned {got:?}; the lines \
             cross at {want:?}",
            TCP.name, SHM.name
        )));
    };
    // ±3% noise moves a fitted α and β by a few percent; both plain and
    // relative-error least squares land within 10% here (see the tests).
    if !close(g, bytes, 0.25) || gb != below {
        return Err(LabError::Wrong(format!(
            "on noisy points (±3%) of {} and {} predict_crossover returned {got:?}, more than \
             25% from the true {want:?}",
            TCP.name, SHM.name
        )));
    }
    let mut said = format!(
        "your fit recovers α and β, refuses a single size, and your crossover is right for \
         lines that cross (in both orders), never cross and are parallel; on noisy points it \
         predicts {g:.0} bytes (the true crossing: {bytes:.0})"
    );
    let records = crate::latest_records(&labkit::results_root().join("lab09"));
    if let Some(run) = records.and_then(|r| on_your_run(p, &r)) {
        said.push('\n');
        said.push_str(&run);
    }
    Ok(said)
}

/// Reported, not asserted (this machine decides): `p`'s crossover of the
/// reference backend over shared memory and Gloo on the all_reduce times of
/// the learner's latest run, beside where the measured medians last swapped
/// order. `None` without a run that measured both.
fn on_your_run(p: Predictor, records: &[measure::Record]) -> Option<String> {
    let (a, b) = ("reference-shm", "gloo");
    let points = |label: &str| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = records
            .iter()
            .filter(|r| r.label == label && r.collective == measure::Collective::AllReduce)
            .filter(|r| r.bytes > 0 && r.median_us > 0.0)
            .map(|r| (r.bytes as f64, r.median_us))
            .collect();
        v.sort_by(|x, y| x.0.total_cmp(&y.0));
        v
    };
    let (pa, pb) = (points(a), points(b));
    if pa.len() < 2 || pb.len() < 2 {
        return None;
    }
    let predicted = match (p.crossover)(&pa, &pb) {
        Ok(Crossover::At { bytes, below }) => {
            let (lo, hi) = if below == reports::Side::First {
                (a, b)
            } else {
                (b, a)
            };
            format!("{lo} below {bytes:.0} bytes, {hi} above")
        }
        Ok(Crossover::Never { faster }) => {
            let f = if faster == reports::Side::First { a } else { b };
            format!("{f} at every size")
        }
        Err(e) => format!("no prediction ({e})"),
    };
    // Where the measured order last changed, between two sizes both measured.
    let both: Vec<(f64, bool)> = pa
        .iter()
        .filter_map(|&(s, ta)| {
            let tb = pb.iter().find(|q| q.0 == s)?.1;
            (ta != tb).then_some((s, ta < tb))
        })
        .collect();
    let measured = match both.windows(2).rev().find(|w| w[0].1 != w[1].1) {
        Some(w) => format!(
            "the measured medians last swap order between {:.0} and {:.0} bytes",
            w[0].0, w[1].0
        ),
        None => "the measured medians never swap order".into(),
    };
    Some(format!(
        "on your latest run's all_reduce ({a} against {b}) your fits predict: {predicted}; \
         {measured}"
    ))
}
