//! Each named mistake, fed to the check, is named; plain least squares and
//! the report's fit both pass.

use super::*;
use reports::Side;

/// Plain (unweighted) least squares of t on `x(S)`.
fn ols_of(points: &[(f64, f64)], x: fn(f64) -> f64) -> Result<(f64, f64), LabError> {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| x(p.0)).sum::<f64>() / n;
    let mt = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (x(p.0) - mx).powi(2)).sum();
    let sxt: f64 = points.iter().map(|p| (x(p.0) - mx) * (p.1 - mt)).sum();
    if sxx == 0.0 || points.is_empty() {
        return Err(LabError::Wrong("one size".into()));
    }
    let beta = sxt / sxx;
    Ok((mt - beta * mx, beta))
}

fn ols(points: &[(f64, f64)]) -> Result<(f64, f64), LabError> {
    ols_of(points, |s| s)
}

/// A crossing by `formula` from `fit`'s lines.
fn cross_with(
    fit: Fit,
    a: &[(f64, f64)],
    b: &[(f64, f64)],
    formula: fn((f64, f64), (f64, f64)) -> Crossover,
) -> Result<Crossover, LabError> {
    Ok(formula(fit(a)?, fit(b)?))
}

fn ols_crossover(a: &[(f64, f64)], b: &[(f64, f64)]) -> Result<Crossover, LabError> {
    cross_with(ols, a, b, reports::lines_cross)
}

fn message(p: Predictor) -> String {
    match check(p) {
        Ok(said) => panic!("passed: {said}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_reports_fit_and_plain_least_squares_both_pass() {
    let said = check(solution()).unwrap();
    assert!(said.contains("on noisy points"), "{said}");
    check(Predictor {
        fit: ols,
        crossover: ols_crossover,
    })
    .unwrap();
    // The noise tolerance (25%) has room: both land within 10%.
    let want = 30_000.0;
    for f in [reports_crossover as Predict, ols_crossover] {
        let Crossover::At { bytes, .. } = f(&TCP.noisy(), &SHM.noisy()).unwrap() else {
            panic!("no crossing");
        };
        assert!(close(bytes, want, 0.10), "{bytes}");
    }
}

#[test]
fn slope_and_intercept_swapped_are_named() {
    fn swapped(p: &[(f64, f64)]) -> Result<(f64, f64), LabError> {
        let (a, b) = ols(p)?;
        Ok((b, a))
    }
    let msg = message(Predictor {
        fit: swapped,
        crossover: ols_crossover,
    });
    assert!(msg.contains("that is (β, α)"), "{msg}");
    assert!(msg.ends_with("hint: slope-vs-intercept"), "{msg}");
}

#[test]
fn a_fit_against_log_size_is_named() {
    fn log_fit(p: &[(f64, f64)]) -> Result<(f64, f64), LabError> {
        ols_of(p, f64::ln)
    }
    let msg = message(Predictor {
        fit: log_fit,
        crossover: ols_crossover,
    });
    assert!(msg.contains("time against log S"), "{msg}");
    assert!(msg.ends_with("hint: log-n"), "{msg}");
}

#[test]
fn alpha_over_the_other_beta_is_named_with_its_number() {
    fn wrong(a: &[(f64, f64)], b: &[(f64, f64)]) -> Result<Crossover, LabError> {
        cross_with(ols, a, b, |(aa, _), (_, bb)| Crossover::At {
            bytes: aa / bb,
            below: Side::Second,
        })
    }
    let msg = message(Predictor {
        fit: ols,
        crossover: wrong,
    });
    // α_tcp / β_shm = 50 · 500.
    assert!(msg.contains("at 25000"), "{msg}");
    assert!(msg.contains("(that is α_a / β_b)"), "{msg}");
    assert!(msg.ends_with("hint: crossover-formula"), "{msg}");
}

/// The formula alone, for every pair: a negative size for lines that never
/// meet, and ±inf (or rounding noise) for parallel ones.
#[test]
fn a_crossing_where_the_lines_never_cross_is_named() {
    fn formula_only(a: &[(f64, f64)], b: &[(f64, f64)]) -> Result<Crossover, LabError> {
        cross_with(ols, a, b, |(aa, ab), (ba, bb)| Crossover::At {
            bytes: (ba - aa) / (ab - bb),
            below: if aa < ba { Side::First } else { Side::Second },
        })
    }
    let msg = message(Predictor {
        fit: ols,
        crossover: formula_only,
    });
    assert!(msg.contains("a size of 0 or less is no crossing"), "{msg}");
    assert!(msg.ends_with("hint: no-crossover"), "{msg}");

    // Negative sizes handled, parallel lines not: a division by zero.
    let msg = judge_crossover(
        TCP,
        PARALLEL,
        Crossover::At {
            bytes: f64::INFINITY,
            below: Side::Second,
        },
    )
    .unwrap();
    assert!(
        msg.contains("division by a zero difference of slopes"),
        "{msg}"
    );
    assert!(msg.ends_with("hint: no-crossover"), "{msg}");
    let msg = judge_crossover(
        TCP,
        PARALLEL,
        Crossover::At {
            bytes: 3.1e15,
            below: Side::Second,
        },
    )
    .unwrap();
    assert!(msg.contains("equal up to rounding"), "{msg}");
}

#[test]
fn winners_swapped_are_named() {
    fn swapped(a: &[(f64, f64)], b: &[(f64, f64)]) -> Result<Crossover, LabError> {
        Ok(match ols_crossover(a, b)? {
            Crossover::At { bytes, below } => Crossover::At {
                bytes,
                below: below.other(),
            },
            never => never,
        })
    }
    let msg = message(Predictor {
        fit: ols,
        crossover: swapped,
    });
    assert!(msg.contains("the winners are swapped"), "{msg}");
    assert!(msg.ends_with("hint: which-side-wins"), "{msg}");
    let msg = judge_crossover(
        TCP,
        SLOW,
        Crossover::Never {
            faster: Side::Second,
        },
    )
    .unwrap();
    assert!(msg.ends_with("hint: which-side-wins"), "{msg}");
}

#[test]
fn a_line_through_one_size_must_be_an_error() {
    fn any(p: &[(f64, f64)]) -> Result<(f64, f64), LabError> {
        Ok(ols(p).unwrap_or((0.0, 0.0)))
    }
    let msg = message(Predictor {
        fit: any,
        crossover: ols_crossover,
    });
    assert!(msg.contains("return an error"), "{msg}");
}

#[test]
fn your_run_is_reported_beside_where_the_measured_medians_swap() {
    let rec = |label: &str, bytes: u64, us: f64| -> measure::Record {
        serde_json::from_value(serde_json::json!({
            "label": label, "collective": "all_reduce", "world": 2, "bytes": bytes,
            "min_us": us, "median_us": us, "max_us": us,
        }))
        .unwrap()
    };
    let mut records = Vec::new();
    for (s, _) in SHM.points() {
        records.push(rec("reference-shm", s as u64, SHM.alpha + SHM.beta * s));
        records.push(rec("gloo", s as u64, TCP.alpha + TCP.beta * s));
    }
    let said = on_your_run(solution(), &records).unwrap();
    assert!(
        said.contains("reference-shm below 30000 bytes, gloo above"),
        "{said}"
    );
    assert!(said.contains("between 8192 and 32768 bytes"), "{said}");
    // Without gloo there is nothing to compare.
    records.retain(|r| r.label != "gloo");
    assert_eq!(on_your_run(solution(), &records), None);
}
