//! Separating the reduction cost γ from the transfer cost β.
//!
//! A ring all_reduce is a reduce-scatter and an all-gather: per rank it sends
//! 2(n−1)/n·S bytes and reduces (n−1)/n·S, so its time beyond α is
//! f·S·(β + γ) with f = 2(n−1)/n and γ the reduction cost per *bus* byte
//! (half of Thakur, Rabenseifner & Gropp's γ, which is per byte reduced).
//! An all_gather of the same S sends (n−1)/n·S bytes and reduces nothing:
//! f'·S·β with f' = (n−1)/n. Per bus byte the two differ by exactly γ, so
//! the same backend's all_gather tells β and γ apart; without it only their
//! sum b = β + γ is measured, and the report says so.

use super::regimes::{Reduction, Regimes};

/// Split each all_reduce regime's b into β + γ using the same series'
/// all_gather model, compared at the sizes both measured (`shared`, bytes).
///
/// Per regime, γ is the median over its shared sizes of b(all_reduce) −
/// b(all_gather at that size): the median because one noisy size should not
/// move it. When some regime has no shared size or a γ ≤ 0 (the all_gather
/// was not cheaper per byte: the reduction is below the noise), nothing is
/// split and the reduction is [`Reduction::Unresolved`].
pub(crate) fn separate(all_reduce: &mut Regimes, all_gather: &Regimes, shared: &[f64]) {
    let mut gammas = Vec::with_capacity(all_reduce.regimes.len());
    for (k, regime) in all_reduce.regimes.iter().enumerate() {
        let b = regime.cost_us_per_byte();
        let mut diffs: Vec<f64> = shared
            .iter()
            .filter(|&&s| all_reduce.regime_at(s) == k)
            .map(|&s| {
                let g = &all_gather.regimes[all_gather.regime_at(s)];
                b - g.cost_us_per_byte()
            })
            .filter(|d| d.is_finite())
            .collect();
        diffs.sort_by(f64::total_cmp);
        let median = match diffs.len() {
            0 => None,
            n if n % 2 == 1 => Some(diffs[n / 2]),
            n => Some((diffs[n / 2 - 1] + diffs[n / 2]) / 2.0),
        };
        match median {
            Some(g) if g > 0.0 => gammas.push(g),
            _ => {
                all_reduce.reduction = Reduction::Unresolved;
                return;
            }
        }
    }
    for (regime, g) in all_reduce.regimes.iter_mut().zip(gammas) {
        let b = regime.cost_us_per_byte();
        regime.gamma_us_per_byte = Some(g);
        regime.beta_us_per_byte = b - g;
    }
    all_reduce.reduction = Reduction::Separated;
}
