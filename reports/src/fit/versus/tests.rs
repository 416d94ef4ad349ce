use super::*;

/// Sizes 8 B to 8 MiB, ×4.
fn sizes() -> Vec<f64> {
    (0..11).map(|k| 8.0 * 4f64.powi(k)).collect()
}

fn line(alpha: f64, beta: f64) -> Vec<(f64, f64)> {
    sizes().into_iter().map(|s| (s, alpha + beta * s)).collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

#[test]
fn lines_that_cross_name_the_size_and_who_wins_each_side() {
    // 50 + S/2000 = 5 + S/500 at S = 45 / 0.0015 = 30,000 bytes.
    let (gloo, shm) = (line(50.0, 1.0 / 2000.0), line(5.0, 1.0 / 500.0));
    let Some(Crossover::At { bytes, below }) = predict_crossover(&gloo, &shm) else {
        panic!("they cross");
    };
    // Exact data: the fit recovers α and β to rounding.
    assert!(close(bytes, 30_000.0, 1e-9), "{bytes}");
    assert_eq!(below, Side::Second, "the smaller α wins small messages");
    let Some(Crossover::At { bytes: back, below }) = predict_crossover(&shm, &gloo) else {
        panic!("they cross");
    };
    assert!(close(back, bytes, 1e-12) && below == Side::First);
}

#[test]
fn a_line_below_the_other_everywhere_never_crosses() {
    // Meets the first at S = 10 / (0.0005 − 0.001) < 0.
    let (fast, slow) = (line(50.0, 0.0005), line(60.0, 0.001));
    assert_eq!(
        predict_crossover(&fast, &slow),
        Some(Crossover::Never {
            faster: Side::First
        })
    );
    assert_eq!(
        lines_cross((60.0, 0.001), (50.0, 0.0005)),
        Crossover::Never {
            faster: Side::Second
        }
    );
    // Equal α: they meet at S = 0, and the smaller slope wins every message.
    assert_eq!(
        lines_cross((5.0, 0.002), (5.0, 0.001)),
        Crossover::Never {
            faster: Side::Second
        }
    );
}

/// The same β fitted twice differs by rounding: a crossing through that gap
/// would be at some 1e15 bytes, or ±inf when it happens to be exact.
#[test]
fn parallel_lines_never_cross_and_give_no_infinite_size() {
    let (a, b) = (line(50.0, 0.0005), line(20.0, 0.0005));
    assert_eq!(
        predict_crossover(&a, &b),
        Some(Crossover::Never {
            faster: Side::Second
        })
    );
    // Exactly equal slopes, and equal lines (neither is slower).
    assert_eq!(
        lines_cross((1.0, 0.5), (3.0, 0.5)),
        Crossover::Never {
            faster: Side::First
        }
    );
    assert_eq!(
        lines_cross((1.0, 0.5), (1.0, 0.5)),
        Crossover::Never {
            faster: Side::First
        }
    );
}

#[test]
fn a_backend_with_one_size_has_no_line() {
    let one = [(1024.0, 10.0), (1024.0, 11.0)];
    assert_eq!(predict_crossover(&one, &line(1.0, 0.1)), None);
    assert_eq!(predict_crossover(&line(1.0, 0.1), &[]), None);
}

#[test]
fn the_bus_factor_is_part_of_the_slope() {
    let fit = |alpha: f64, beta: f64, factor: f64| AlphaBeta {
        alpha_us: alpha,
        beta_us_per_byte: beta,
        factor,
        r_squared: 1.0,
        points: 2,
        sizes: 2,
        pinned: None,
    };
    // Slopes 0.002 and 0.001: (10 − 5) / 0.001 = 5,000 bytes.
    let c = fits_cross(&fit(5.0, 0.001, 2.0), &fit(10.0, 0.001, 1.0));
    let Crossover::At { bytes, below } = c else {
        panic!("{c:?}")
    };
    assert!(
        close(bytes, 5_000.0, 1e-12) && below == Side::First,
        "{c:?}"
    );
}
