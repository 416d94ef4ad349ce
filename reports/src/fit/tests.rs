//! Tests of both models, the solver under them and the γ split.

use super::lsq::nonneg_wls;
use super::*;
use crate::results::Record;
use crate::testing;

fn sizes() -> Vec<f64> {
    (3..=26).map(|k| f64::from(1u32 << k)).collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-300)
}

#[test]
fn recovers_alpha_beta_exactly_from_synthetic_data() {
    let (alpha, beta) = (12.5, 1.0 / 8000.0); // 12.5 µs, 8 GB/s
    let pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, alpha + beta * s)).collect();
    let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
    assert!(close(m.alpha_us, alpha, 1e-9), "{m:?}");
    assert!(close(m.beta_us_per_byte, beta, 1e-9), "{m:?}");
    assert!(close(m.bandwidth_gbps().unwrap(), 8.0, 1e-9), "{m:?}");
    assert!(m.r_squared > 1.0 - 1e-12, "{m:?}");
    assert_eq!(m.pinned, None);
    assert_eq!((m.points, m.sizes), (24, 24));
}

#[test]
fn factor_scales_beta_not_alpha() {
    // all_reduce on 4 ranks: f = 1.5; the data carry β·S·1.5.
    let (alpha, beta, f) = (3.0, 2e-4, Collective::AllReduce.bus_factor(4));
    let pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, alpha + beta * s * f)).collect();
    let m = *fit_alpha_beta(&pts, f).model().unwrap();
    assert!(close(m.alpha_us, alpha, 1e-9) && close(m.beta_us_per_byte, beta, 1e-9));
    assert!(close(m.predict_us(1e6), alpha + beta * 1e6 * f, 1e-12));
}

#[test]
fn crossover_is_where_the_terms_are_equal() {
    let m = AlphaBeta {
        alpha_us: 10.0,
        beta_us_per_byte: 1e-3,
        factor: 2.0,
        r_squared: 1.0,
        points: 2,
        sizes: 2,
        pinned: None,
    };
    let s = m.crossover_bytes().unwrap();
    assert!(close(s, 5000.0, 1e-12));
    assert!(close(m.beta_us_per_byte * s * m.factor, m.alpha_us, 1e-12));
    let flat = AlphaBeta {
        beta_us_per_byte: 0.0,
        ..m
    };
    assert_eq!(flat.crossover_bytes(), None);
    assert_eq!(flat.bandwidth_gbps(), None);
}

#[test]
fn fewer_than_two_sizes_is_no_fit_not_nan() {
    assert_eq!(fit_alpha_beta(&[], 1.0), Fit::TooFewSizes { sizes: 0 });
    assert_eq!(
        fit_alpha_beta(&[(1024.0, 3.0), (1024.0, 3.5)], 1.0),
        Fit::TooFewSizes { sizes: 1 }
    );
    // A zero time cannot be weighted by 1/t²: it does not count.
    assert_eq!(
        fit_alpha_beta(&[(8.0, 0.0), (1024.0, 3.5)], 1.0),
        Fit::TooFewSizes { sizes: 1 }
    );
}

#[test]
fn relative_weighting_keeps_small_sizes_in_charge_of_alpha() {
    // α = 5 µs, 1 GB/s, with +3 % noise on the largest size only. An
    // unweighted fit would move α by tens of µs; relative weights barely
    // notice.
    let beta = 1e-3;
    let mut pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, 5.0 + beta * s)).collect();
    if let Some(last) = pts.last_mut() {
        last.1 *= 1.03;
    }
    let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
    assert!((m.alpha_us - 5.0).abs() < 0.5, "{m:?}");
}

#[test]
fn negative_alpha_is_pinned_at_zero() {
    // Pure bandwidth data with the small sizes slightly *faster* than
    // proportional: the unconstrained intercept goes negative.
    let pts: Vec<(f64, f64)> = sizes()
        .iter()
        .map(|&s| (s, 1e-3 * s * if s < 100.0 { 0.8 } else { 1.0 }))
        .collect();
    let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
    assert_eq!(m.pinned, Some(Pinned::Alpha), "{m:?}");
    assert_eq!(m.alpha_us, 0.0);
    assert!(m.beta_us_per_byte > 0.0);
    assert_eq!(m.crossover_bytes(), Some(0.0));
}

#[test]
fn shrinking_times_pin_beta_and_report_no_bandwidth() {
    // Times that fall slightly with size (noise on a latency-bound
    // series): the unconstrained slope is negative.
    let pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, 10.0 - 1e-8 * s)).collect();
    let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
    assert_eq!(m.pinned, Some(Pinned::Beta), "{m:?}");
    assert_eq!(m.beta_us_per_byte, 0.0);
    assert!(m.alpha_us > 9.0 && m.alpha_us < 10.0, "{m:?}");
    assert_eq!(m.bandwidth_gbps(), None);
    assert_eq!(m.crossover_bytes(), None);
    assert!(m.r_squared.is_finite());
}

// ---- the solver ----

#[test]
fn nonneg_wls_is_exact_across_eight_decades_and_clamps_negatives() {
    // y = 3 + 2e-4·x on x up to 6.7e7: the normal equations would lose
    // most digits here; QR on unit columns keeps ~1e-12.
    let x = sizes();
    let y: Vec<f64> = x.iter().map(|v| 3.0 + 2e-4 * v).collect();
    let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    let s = nonneg_wls(&[vec![1.0; x.len()], x.clone()], &y, &w).unwrap();
    assert!(
        close(s.coef[0], 3.0, 1e-9) && close(s.coef[1], 2e-4, 1e-9),
        "{s:?}"
    );
    assert_eq!(s.clamped, [false, false]);
    // Small x slightly faster than proportional: the intercept wants to be
    // negative, so it is held at 0 and flagged, the slope refitted alone.
    let y: Vec<f64> = x
        .iter()
        .map(|v| 1e-3 * v * if *v < 100.0 { 0.8 } else { 1.0 })
        .collect();
    let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    let s = nonneg_wls(&[vec![1.0; x.len()], x.clone()], &y, &w).unwrap();
    assert_eq!(s.coef[0], 0.0);
    assert!(s.clamped[0] && s.coef[1] > 0.0, "{s:?}");
    // Two identical columns: the full system is singular, a subset is not.
    let y: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
    let w = vec![1.0; x.len()];
    let s = nonneg_wls(&[x.clone(), x.clone()], &y, &w).unwrap();
    assert!(close(s.coef[0] + s.coef[1], 2.0, 1e-12), "{s:?}");
}

// ---- the regime model ----

const MIB: f64 = 1048576.0;

/// 20 GB/s in cache, 8 GB/s from memory, continuous at 3 MiB (between the
/// measured 2 and 4 MiB), α = 2 µs, all_reduce on 4 ranks (f = 1.5).
fn continuous_two_regimes(s: f64) -> f64 {
    let (alpha, b1, b2, c, f) = (2.0, 1.0 / 20_000.0, 1.0 / 8_000.0, 3.0 * MIB, 1.5);
    alpha + f * (b1 * s.min(c) + b2 * (s - c).max(0.0))
}

/// [`continuous_two_regimes`] at every size of [`sizes`].
fn two_regime_points() -> Vec<(f64, f64)> {
    sizes()
        .iter()
        .map(|&s| (s, continuous_two_regimes(s)))
        .collect()
}

#[test]
fn regimes_recover_a_continuous_break_and_its_bandwidths() {
    let pts = two_regime_points();
    let m = fit_regimes(&pts, 1.5).unwrap();
    assert_eq!(m.regimes.len(), 2, "{m:?}");
    assert_eq!(m.join, Join::Continuous);
    assert_eq!(m.one_regime, None);
    // Exact data: everything is recovered to near rounding. The break is
    // found by a 1-D search whose error is flat to ~1e-8 relative near the
    // optimum, hence the looser 1e-5 there.
    assert!(close(m.alpha_us, 2.0, 1e-7), "{m:?}");
    assert!(
        close(m.regimes[0].beta_us_per_byte, 1.0 / 20_000.0, 1e-7),
        "{m:?}"
    );
    assert!(
        close(m.regimes[1].beta_us_per_byte, 1.0 / 8_000.0, 1e-7),
        "{m:?}"
    );
    assert!(close(m.break_bytes().unwrap(), 3.0 * MIB, 1e-5), "{m:?}");
    assert_eq!(m.regimes[1].bracket, Some((2.0 * MIB, 4.0 * MIB)));
    assert_eq!((m.regimes[0].sizes, m.regimes[1].sizes), (19, 5));
    assert!(close(m.regimes[0].bandwidth_gbps().unwrap(), 20.0, 1e-7));
    assert!(m.r_squared > 1.0 - 1e-9, "{m:?}");
    assert_eq!(m.transition(1), "cache → memory");
    assert_eq!((m.regime_name(0), m.regime_name(1)), ("cache", "memory"));
    assert_eq!(m.regime_at(1.0 * MIB), 0);
    assert_eq!(m.regime_at(16.0 * MIB), 1);
    for &(s, t) in &pts {
        assert!(close(m.predict_us(s), t, 1e-7), "at {s}");
    }
}

#[test]
fn regimes_recover_a_jump_between_the_sizes_around_it() {
    // Every byte of a message above 1 MiB streams at the slower rate.
    let (alpha, b1, b2) = (5.0, 1.0 / 30_000.0, 1.0 / 10_000.0);
    let pts: Vec<(f64, f64)> = sizes()
        .iter()
        .map(|&s| (s, alpha + s * if s > MIB { b2 } else { b1 }))
        .collect();
    let m = fit_regimes(&pts, 1.0).unwrap();
    assert_eq!((m.regimes.len(), m.join), (2, Join::Jump), "{m:?}");
    assert!(close(m.alpha_us, alpha, 1e-9), "{m:?}");
    assert!(close(m.regimes[0].beta_us_per_byte, b1, 1e-9), "{m:?}");
    assert!(close(m.regimes[1].beta_us_per_byte, b2, 1e-9), "{m:?}");
    // A jump can only be placed between two measured sizes.
    assert_eq!(m.regimes[1].bracket, Some((MIB, 2.0 * MIB)));
    assert!(close(m.break_bytes().unwrap(), 2f64.sqrt() * MIB, 1e-12));
}

/// α + β·S at every size, each off by a deterministic −3 to +3 %.
fn wobbly_alpha_beta(alpha: f64, beta: f64) -> Vec<(f64, f64)> {
    sizes()
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            (
                s,
                (alpha + beta * s) * (1.0 + 0.03 * ((i * 7 % 5) as f64 - 2.0) / 2.0),
            )
        })
        .collect()
}

#[test]
fn one_regime_data_keep_one_regime() {
    // α–β data with a deterministic ±3 % wobble: a break could shave a
    // little error off but must not pay for its two extra parameters.
    let (alpha, beta) = (4.0, 1.0 / 6_000.0);
    let pts = wobbly_alpha_beta(alpha, beta);
    let m = fit_regimes(&pts, 1.0).unwrap();
    assert_eq!(m.regimes.len(), 1, "{m:?}");
    assert_eq!(m.one_regime, Some(OneRegime::NoGain));
    assert_eq!(m.break_bytes(), None);
    assert_eq!(m.regime_name(0), "all sizes");
    // One regime is the α–β model with the same objective: same numbers.
    let ab = *fit_alpha_beta(&pts, 1.0).model().unwrap();
    assert!(close(m.alpha_us, ab.alpha_us, 1e-9), "{m:?} vs {ab:?}");
    assert!(close(
        m.regimes[0].beta_us_per_byte,
        ab.beta_us_per_byte,
        1e-9
    ));
    assert!(close(m.r_squared, ab.r_squared, 1e-9));
    // Exact data too (error 0: the floor keeps the criterion finite).
    let exact: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, alpha + beta * s)).collect();
    assert_eq!(fit_regimes(&exact, 1.0).unwrap().regimes.len(), 1);
}

#[test]
fn the_regime_model_beats_alpha_beta_on_two_regime_data() {
    let pts = two_regime_points();
    let old = fit_alpha_beta(&pts, 1.5).model().unwrap().r_squared;
    let new = fit_regimes(&pts, 1.5).unwrap().r_squared;
    // The one-β line misses both ends of a 2.5× bandwidth change.
    assert!(old < 0.99, "α–β R² {old}");
    assert!(new > old + 0.01, "regimes R² {new} vs α–β {old}");
}

#[test]
fn too_few_sizes_keep_one_regime_and_never_nan() {
    // Four sizes around the break: 3 + 2 are needed for one.
    let few: Vec<(f64, f64)> = sizes()[16..20]
        .iter()
        .map(|&s| (s, continuous_two_regimes(s)))
        .collect();
    let m = fit_regimes(&few, 1.5).unwrap();
    assert_eq!(m.regimes.len(), 1);
    assert_eq!(m.one_regime, Some(OneRegime::TooFewSizes { sizes: 4 }));
    assert!(m.r_squared.is_finite() && m.alpha_us.is_finite());
    assert_eq!(fit_regimes(&[(8.0, 1.0), (8.0, 2.0)], 1.0), None);
    assert_eq!(fit_regimes(&[], 1.0), None);
    // Two sizes: a line, as the α–β fit draws.
    let two = fit_regimes(&[(8.0, 1.0), (1024.0, 3.0)], 1.0).unwrap();
    assert_eq!(two.one_regime, Some(OneRegime::TooFewSizes { sizes: 2 }));
    assert!(close(two.predict_us(1024.0), 3.0, 1e-9));
    // Flat times: b pinned at 0, R² defined.
    let flat: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, 7.0)).collect();
    let m = fit_regimes(&flat, 1.0).unwrap();
    assert_eq!(m.regimes[0].bandwidth_gbps(), None);
    assert_eq!(m.r_squared, 1.0);
}

#[test]
fn a_slow_tiny_size_on_the_latency_plateau_is_no_regime() {
    // Gloo-like: a 4 ms floor, 1.5 GB/s, sizes ×4 from 4 B to 64 MiB, and
    // one tiny size whose median doubled (a scheduler hiccup). Without the
    // plateau rule a "regime" of 4–64 B with a huge b fits the hiccup.
    let pts: Vec<(f64, f64)> = (1..=13)
        .map(|k| {
            let s = 4f64.powi(k);
            let t = 4000.0 + s / 1500.0;
            (s, if k == 3 { 2.3 * t } else { t })
        })
        .collect();
    let m = fit_regimes(&pts, 1.0).unwrap();
    assert!(
        m.regimes
            .iter()
            .all(|r| r.from_bytes == 0.0 || r.from_bytes > MIB),
        "{m:?}"
    );
    // Below the plateau rule's reach, the same holds with the hiccup
    // removed: one regime.
    let clean: Vec<(f64, f64)> = (1..=13)
        .map(|k| (4f64.powi(k), 4000.0 + 4f64.powi(k) / 1500.0))
        .collect();
    assert_eq!(fit_regimes(&clean, 1.0).unwrap().regimes.len(), 1);
}

#[test]
fn a_latency_step_on_the_plateau_is_fitted_as_one() {
    // Like Gloo at world 2: 100 µs at 4 B, 300 µs from 16 B on (more
    // messages per call), 1.2 GB/s; sizes ×4 from 4 B to 64 MiB.
    let t = |s: f64| if s < 10.0 { 100.0 } else { 300.0 } + s / 1200.0;
    let pts: Vec<(f64, f64)> = (1..=13).map(|k| (4f64.powi(k), t(4f64.powi(k)))).collect();
    let m = fit_regimes(&pts, 1.0).unwrap();
    let step = m.step.expect("a step");
    assert_eq!(step.bracket, (4.0, 16.0), "{m:?}");
    assert!(close(step.from_bytes, 8.0, 1e-12));
    // Exact data: recovered to rounding.
    assert!(close(m.alpha_us, 100.0, 1e-7), "{m:?}");
    assert!(close(step.extra_us, 200.0, 1e-7), "{m:?}");
    assert!(close(m.alpha_large_us(), 300.0, 1e-7));
    assert_eq!(m.alpha_at(4.0), m.alpha_us);
    assert_eq!(m.alpha_at(4096.0), m.alpha_large_us());
    assert_eq!(m.regimes.len(), 1, "{m:?}");
    assert!(m.r_squared > 1.0 - 1e-9, "{m:?}");
    for &(s, want) in &pts {
        assert!(close(m.predict_us(s), want, 1e-7), "at {s}");
    }
}

#[test]
fn gloo_tour_curve_with_a_fast_one_element_call_fits() {
    // Regression: the medians of ringside-gloo's all_reduce in a `cargo
    // xtask tour` on the 2-core EPYC VM (world 2). The 4 B call sends
    // fewer messages than the rest (see the module docs); without a step
    // the best model had R² 0.631.
    let pts = [
        (4.0, 101.8),
        (16.0, 319.8),
        (64.0, 277.6),
        (256.0, 307.1),
        (1024.0, 348.7),
        (4096.0, 344.7),
        (16384.0, 364.3),
        (65536.0, 336.6),
        (262144.0, 500.0),
        (MIB, 668.6),
        (4.0 * MIB, 3669.3),
        (16.0 * MIB, 12896.4),
        (64.0 * MIB, 54428.1),
    ];
    let m = fit_regimes(&pts, 1.0).unwrap();
    assert_eq!(m.step.map(|st| st.bracket), Some((4.0, 16.0)), "{m:?}");
    assert!(m.r_squared >= 0.95, "{m:?}");
}

#[test]
fn smooth_and_stepless_curves_get_no_step() {
    // A step must pay for two parameters: exact α–β data and the ±3 %
    // wobble of `wobbly_alpha_beta` do not get one, nor does
    // a curve whose only change of level is a jump far off the plateau
    // (a bandwidth break describes that).
    let (alpha, beta) = (4.0, 1.0 / 6_000.0);
    let exact: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, alpha + beta * s)).collect();
    assert_eq!(fit_regimes(&exact, 1.0).unwrap().step, None);
    assert_eq!(
        fit_regimes(&wobbly_alpha_beta(alpha, beta), 1.0)
            .unwrap()
            .step,
        None
    );
    let (b1, b2) = (1.0 / 30_000.0, 1.0 / 10_000.0);
    let jump: Vec<(f64, f64)> = sizes()
        .iter()
        .map(|&s| (s, 5.0 + s * if s > MIB { b2 } else { b1 }))
        .collect();
    let m = fit_regimes(&jump, 1.0).unwrap();
    assert_eq!((m.step, m.regimes.len()), (None, 2), "{m:?}");
}

#[test]
fn relative_residuals_are_measured_over_model() {
    let pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, 3.0 + s / 5000.0)).collect();
    let m = fit_regimes(&pts, 1.0).unwrap();
    let s = 65536.0;
    let r = m.relative_residual(s, m.predict_us(s) * 1.1).unwrap();
    // 1.1·model − model over model, up to rounding.
    assert!((r - 0.1).abs() < 1e-12, "{r}");
    assert!(m.relative_residual(s, m.predict_us(s)).unwrap().abs() < 1e-12);
}

// ---- the dataset: γ split from β ----

fn rec(label: &str, collective: Collective, bytes: u64, median_us: f64) -> Record {
    testing::record(label, collective, 4, bytes, median_us)
}

#[test]
fn all_gather_of_the_same_series_separates_gamma() {
    // Thakur et al.: all_reduce = f·S·(β + γ), all_gather = f'·S·β, with β
    // 1/20000 in cache and 1/8000 µs/byte in memory (jump at 3 MiB), and γ
    // 1/40000 µs per bus byte (the reduction runs from cache either way).
    let (alpha, gamma) = (3.0, 1.0 / 40_000.0);
    let beta = |s: f64| {
        if s > 3.0 * MIB {
            1.0 / 8_000.0
        } else {
            1.0 / 20_000.0
        }
    };
    let (f_ar, f_ag) = (1.5, 0.75);
    let mut records = Vec::new();
    for k in 3..=26u32 {
        let s = f64::from(1u32 << k);
        let bytes = 1u64 << k;
        records.push(rec(
            "both",
            Collective::AllReduce,
            bytes,
            alpha + f_ar * s * (beta(s) + gamma),
        ));
        records.push(rec(
            "both",
            Collective::AllGather,
            bytes,
            alpha + f_ag * s * beta(s),
        ));
        records.push(rec(
            "ar-only",
            Collective::AllReduce,
            bytes,
            alpha + f_ar * s * (beta(s) + gamma),
        ));
    }
    let ds = testing::dataset(records);
    let fits = fit_dataset(&ds);
    let find = |name: &str, c: Collective| {
        fits.iter()
            .find(|f| f.name == name && f.collective == c)
            .and_then(|f| f.model.clone())
            .unwrap()
    };
    let both = find("both", Collective::AllReduce);
    assert_eq!(both.reduction, Reduction::Separated, "{both:?}");
    assert_eq!(both.regimes.len(), 2);
    for (r, want_beta) in both.regimes.iter().zip([1.0 / 20_000.0, 1.0 / 8_000.0]) {
        // Exact data: γ and β recovered to rounding (1e-7: the two fits'
        // own errors add).
        assert!(close(r.gamma_us_per_byte.unwrap(), gamma, 1e-7), "{r:?}");
        assert!(close(r.beta_us_per_byte, want_beta, 1e-7), "{r:?}");
    }
    let alone = find("ar-only", Collective::AllReduce);
    assert_eq!(alone.reduction, Reduction::Combined);
    assert!(alone.regimes.iter().all(|r| r.gamma_us_per_byte.is_none()));
    // The all_gather itself reduces nothing.
    assert_eq!(
        find("both", Collective::AllGather).reduction,
        Reduction::None
    );
}
