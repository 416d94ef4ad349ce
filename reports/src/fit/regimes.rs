//! The regime model: t(S) = α + S·f·b_k, where k is the bandwidth regime S
//! falls into — on a CPU typically "the buffers fit in a cache" below a
//! break size and "they stream from memory" above it — and b_k = β_k + γ_k
//! is the time per bus byte of moving (β) and, for a reducing collective,
//! reducing (γ) it (Thakur, Rabenseifner & Gropp 2005).
//!
//! Why: one β cannot follow a curve whose bandwidth falls by a third or
//! more once the buffers leave the cache; the α–β fit then splits the
//! difference, misses both ends by tens of per cent and its R² drops to
//! 0.7–0.9. The break is a parameter of the fit, found in the data, not
//! taken from `lscpu`: which cache matters depends on how many buffers the
//! backend keeps (input, output, staging), so the break sits at a fraction
//! of a cache size.
//!
//! The fixed cost may rise once, on the latency plateau (a [`LatencyStep`]):
//! α is a cost per message (Hockney), and a segmented algorithm sends more
//! messages once the buffer fills more of its pieces. Gloo's ring
//! all_reduce cuts every buffer into at least 2·world segments of whole
//! elements; at world 2 a 4 B or 8 B buffer (1 or 2 floats) leaves two or
//! three of its four segments empty, and measured 156–170 µs against
//! 227–302 µs from 12 B on (`ringside bench --backend gloo -b 4 -e 32 -i
//! 4`). One α has to miss one side by 2–3×, and with relative error that
//! one point held the tour's Gloo R² at 0.63–0.66.
//!
//! The constants below (sizes per regime, plateau factor, three regimes)
//! were chosen on the tour's curves of a 2-core EPYC (sizes ×4 from 4 B to
//! 64 MiB): shm, TCP, Gloo and MPI all_reduce reach R² ≥ 0.96 with them
//! wherever the medians are not bimodal.

use super::lsq::{Solution, nonneg_wls, weighted_r_squared};

/// The first regime needs this many distinct sizes: it carries α and b_1,
/// which two sizes determine, and a third checks them.
pub const MIN_SIZES_FIRST: usize = 3;

/// Every later regime needs this many: it adds one b (and its break), which
/// one size would determine, and a second checks it. Two, not three,
/// because a sweep that multiplies sizes by 4 up to 64 MiB has only 16 and
/// 64 MiB beyond a 32 MiB last-level cache. So a break needs
/// [`MIN_SIZES_FIRST`] + [`MIN_SIZES_AFTER_BREAK`] = 5 sizes at least.
pub const MIN_SIZES_AFTER_BREAK: usize = 2;

/// At most three regimes (two breaks): a message path that changes with
/// size (an MPI's eager copy below some KiB, a single copy above) and the
/// cache → memory break can both sit in one curve. More would follow noise.
pub const MAX_REGIMES: usize = 3;

/// A break is placed only where the curve has left the latency plateau for
/// good: the time at the size below it, and at every larger size, at least
/// this many times the plateau (the median time of the three smallest
/// sizes), i.e. the bandwidth term at least half of α. On the plateau α is
/// nearly all of the time, b is not measured, and a break there fits noise:
/// one tiny size whose median doubled (a scheduler hiccup) would become a
/// "regime". "For good" is what keeps such a hiccup out; 1.5 rather than 2
/// lets a 4 ms-latency Gloo, whose bandwidth shows only from 4 MiB on,
/// still have its break.
pub const PLATEAU_FACTOR: f64 = 1.5;

/// Relative errors below 1e-6 are not misfit: timers resolve ~1 ns on
/// calls of ≥ 1 µs, and the break search stops at ~1e-9. The floor keeps
/// the model choice from paying for a spurious break to go from a 1e-9 to
/// a 1e-16 error on exact data.
const REL_ERROR_FLOOR: f64 = 1e-6;

/// The jump form is taken only when it leaves less than this share of the
/// continuous form's error: continuity is the simpler story (a cost that
/// grows smoothly with size), so it wins near-ties.
const JUMP_MARGIN: f64 = 0.8;

/// A rise of the fixed cost at one size on the latency plateau: sizes from
/// [`LatencyStep::from_bytes`] on pay [`LatencyStep::extra_us`] more per call
/// than the smallest ones (more messages per call, see the module docs).
///
/// Only a rise, and only on the plateau (both measured sizes around it on
/// the latency plateau, see [`PLATEAU_FACTOR`], and below the first break):
/// there α is nearly all of the time, so a change of α is measured rather
/// than traded against a bandwidth; above, a change of level is what a jump
/// between bandwidth regimes already describes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyStep {
    /// Size (bytes) where the higher fixed cost starts: the geometric mean of
    /// [`LatencyStep::bracket`], since a step can be placed no more precisely
    /// than between two measured sizes.
    pub from_bytes: f64,
    /// The measured sizes either side of the step.
    pub bracket: (f64, f64),
    /// How much more every call from `from_bytes` on costs (µs, > 0).
    pub extra_us: f64,
}

/// How consecutive regimes meet at a break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// The model is continuous at the break: bytes up to the break cost the
    /// lower regime's b, bytes beyond it the upper one's (a marginal cost,
    /// as when the first part of a buffer still hits in cache).
    Continuous,
    /// Piecewise with a jump at the break: every byte of a message above the
    /// break costs the upper regime's b (the whole buffer streams from
    /// memory once it does not fit).
    Jump,
}

/// One bandwidth regime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Regime {
    /// Size S (bytes) where the regime starts: 0 for the first, the fitted
    /// break for the others.
    pub from_bytes: f64,
    /// For a regime after a break: the measured sizes either side of the
    /// break (the last one below, the first one above). A jump's break can
    /// only be placed between them; `from_bytes` is their geometric mean.
    pub bracket: Option<(f64, f64)>,
    /// Time per bus byte b = β + γ (µs/byte); β alone when the collective
    /// does not reduce or γ was separated into
    /// [`Regime::gamma_us_per_byte`] — see [`Regimes::reduction`].
    pub beta_us_per_byte: f64,
    /// The reduction cost γ per bus byte (µs/byte), when separated.
    pub gamma_us_per_byte: Option<f64>,
    /// Distinct measured sizes in the regime.
    pub sizes: usize,
}

impl Regime {
    /// The time per bus byte the fit measured, γ included: b = β + γ.
    pub fn cost_us_per_byte(&self) -> f64 {
        self.beta_us_per_byte + self.gamma_us_per_byte.unwrap_or(0.0)
    }

    /// 1/b in GB/s (1e9 bytes per second), γ included; `None` when b = 0.
    pub fn bandwidth_gbps(&self) -> Option<f64> {
        let b = self.cost_us_per_byte();
        // b µs/byte → 1/b bytes/µs = 1e-3/b GB/s.
        (b > 0.0).then(|| 1e-3 / b)
    }
}

/// Why a fit kept one regime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneRegime {
    /// Fewer than [`MIN_SIZES_FIRST`] + [`MIN_SIZES_AFTER_BREAK`] distinct
    /// sizes: no break can have enough sizes on both sides.
    TooFewSizes {
        /// Distinct usable sizes.
        sizes: usize,
    },
    /// Breaks were tried and none paid for its two extra parameters
    /// (Bayesian information criterion on the weighted error).
    NoGain,
    /// Too few sizes beyond the latency plateau (see [`PLATEAU_FACTOR`])
    /// to place a break: the sizes that show bandwidth are one regime.
    Plateau,
}

/// How the reduction cost γ enters the regimes' b.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// The collective reduces nothing: b is β.
    None,
    /// The collective reduces but nothing measured tells β and γ apart
    /// (only all_reduce, no all_gather of the same series): b = β + γ,
    /// reported together.
    Combined,
    /// γ per regime from the same series' all_gather, which moves the same
    /// bus bytes without reducing: γ = b(all_reduce) − b(all_gather).
    Separated,
    /// An all_gather was measured but was not cheaper per bus byte, so γ is
    /// below what the data resolve: b = β + γ, reported together.
    Unresolved,
}

/// A fitted regime model.
#[derive(Debug, Clone, PartialEq)]
pub struct Regimes {
    /// Fixed cost of one call (µs) at the smallest sizes, shared by all
    /// regimes; [`Regimes::step`] adds to it from its size on.
    pub alpha_us: f64,
    /// A rise of the fixed cost on the latency plateau, when the fit found
    /// one that pays for its two parameters; see [`Regimes::alpha_at`].
    pub step: Option<LatencyStep>,
    /// The bus factor f the sizes were multiplied by.
    pub factor: f64,
    /// One to [`MAX_REGIMES`] regimes, smallest sizes first.
    pub regimes: Vec<Regime>,
    /// How the regimes meet (irrelevant with one regime).
    pub join: Join,
    /// Weighted coefficient of determination on relative error, the same
    /// definition as [`crate::AlphaBeta::r_squared`] so the two compare.
    pub r_squared: f64,
    /// Points used.
    pub points: usize,
    /// Distinct sizes among them.
    pub sizes: usize,
    /// α was held at 0: the unconstrained fit wanted it negative.
    pub alpha_pinned: bool,
    /// Why there is no break, when there is none.
    pub one_regime: Option<OneRegime>,
    /// Whether b includes a reduction cost γ, and whether it was separated.
    pub reduction: Reduction,
}

impl Regimes {
    /// Index of the regime `bytes` falls into.
    pub fn regime_at(&self, bytes: f64) -> usize {
        self.regimes
            .iter()
            .rposition(|r| bytes >= r.from_bytes)
            .unwrap_or(0)
    }

    /// The fixed cost of one call of `bytes` (µs): α, plus the step's rise
    /// from its size on.
    pub fn alpha_at(&self, bytes: f64) -> f64 {
        self.alpha_us
            + self
                .step
                .filter(|st| bytes >= st.from_bytes)
                .map_or(0.0, |st| st.extra_us)
    }

    /// The fixed cost large messages pay (µs): α with the step's rise, if
    /// any. What a per-message latency is derived from, since the sizes a
    /// prediction is about lie above any step.
    pub fn alpha_large_us(&self) -> f64 {
        self.alpha_at(f64::INFINITY)
    }

    /// Predicted time (µs) for `bytes`.
    pub fn predict_us(&self, bytes: f64) -> f64 {
        let b: Vec<f64> = self.regimes.iter().map(Regime::cost_us_per_byte).collect();
        let breaks: Vec<f64> = self.regimes[1..].iter().map(|r| r.from_bytes).collect();
        let mut t = self.alpha_at(bytes);
        for (k, bk) in b.iter().enumerate() {
            t += bk * basis(bytes, self.factor, &breaks, self.join, k);
        }
        t
    }

    /// (measured − model) / model, `None` where the model is not positive
    /// (it cannot be for S > 0 unless α and every b are 0).
    pub fn relative_residual(&self, bytes: f64, measured_us: f64) -> Option<f64> {
        let m = self.predict_us(bytes);
        let r = (measured_us - m) / m;
        (m > 0.0 && r.is_finite()).then_some(r)
    }

    /// The first break (bytes), if the fit found one.
    pub fn break_bytes(&self) -> Option<f64> {
        self.regimes.get(1).map(|r| r.from_bytes)
    }

    /// Index of the break called `cache → memory`: the last one where the
    /// bandwidth falls (the slowest level a buffer can reach is memory).
    fn memory_break(&self) -> Option<usize> {
        (1..self.regimes.len())
            .rev()
            .find(|&k| self.regimes[k].cost_us_per_byte() > self.regimes[k - 1].cost_us_per_byte())
    }

    /// What the break into regime `k` (≥ 1) means: `cache → memory` for the
    /// last break where the bandwidth falls, as when buffers outgrow the
    /// last cache; `slower above` for an earlier fall (an inner cache);
    /// `faster above` where it rises (a path for large messages that copies
    /// less, e.g. an MPI's single-copy protocol: not a cache effect).
    pub fn transition(&self, k: usize) -> &'static str {
        if self.memory_break() == Some(k) {
            "cache → memory"
        } else if k >= 1
            && k < self.regimes.len()
            && self.regimes[k].cost_us_per_byte() > self.regimes[k - 1].cost_us_per_byte()
        {
            "slower above"
        } else {
            "faster above"
        }
    }

    /// Short name of regime `k` for tables: `memory` after the cache →
    /// memory break and `cache` before it, `small messages` / `large
    /// messages` / `middle` otherwise, `all sizes` without a break.
    pub fn regime_name(&self, k: usize) -> &'static str {
        let last = self.regimes.len().saturating_sub(1);
        if last == 0 {
            return "all sizes";
        }
        let mem = self.memory_break();
        if mem == Some(k) {
            "memory"
        } else if mem == Some(k + 1) {
            "cache"
        } else if k == 0 {
            "small messages"
        } else if k >= last {
            "large messages"
        } else {
            "middle"
        }
    }
}

/// Value of column `k` (the one multiplying b_k) at size `s`.
fn basis(s: f64, factor: f64, breaks: &[f64], join: Join, k: usize) -> f64 {
    let lo = if k == 0 { 0.0 } else { breaks[k - 1] };
    let hi = breaks.get(k).copied().unwrap_or(f64::INFINITY);
    factor
        * match join {
            Join::Continuous => (s.min(hi) - lo).max(0.0),
            Join::Jump => {
                if s >= lo && s < hi {
                    s
                } else {
                    0.0
                }
            }
        }
}

/// The usable points of one series.
struct Data {
    s: Vec<f64>,
    t: Vec<f64>,
    w: Vec<f64>,
    /// Distinct sizes, ascending.
    sizes: Vec<f64>,
    factor: f64,
}

impl Data {
    /// Columns: α, the step's indicator (when `step`, the size it starts
    /// at), then one b per regime.
    fn solve(&self, breaks: &[f64], join: Join, step: Option<f64>) -> Option<Solution> {
        let mut cols = vec![vec![1.0; self.s.len()]];
        if let Some(at) = step {
            cols.push(
                self.s
                    .iter()
                    .map(|&s| if s >= at { 1.0 } else { 0.0 })
                    .collect(),
            );
        }
        for k in 0..=breaks.len() {
            cols.push(
                self.s
                    .iter()
                    .map(|&s| basis(s, self.factor, breaks, join, k))
                    .collect(),
            );
        }
        nonneg_wls(&cols, &self.t, &self.w)
    }

    /// Where a step just below size index `i` starts: the geometric mean of
    /// the sizes either side (see [`LatencyStep::from_bytes`]).
    fn step_at(&self, i: usize) -> f64 {
        (self.sizes[i - 1] * self.sizes[i]).sqrt()
    }

    /// Smallest weighted error per point that counts as misfit.
    fn floor(&self) -> f64 {
        REL_ERROR_FLOOR * REL_ERROR_FLOOR * self.s.len() as f64
    }
}

/// A candidate model: its breaks, where they sit among the sizes, and its
/// solution.
struct Candidate {
    breaks: Vec<f64>,
    brackets: Vec<(f64, f64)>,
    splits: Vec<usize>,
    join: Join,
    /// Index of the first size above the latency step, if any.
    step: Option<usize>,
    sol: Solution,
}

impl Candidate {
    /// Parameters the Bayesian information criterion charges: α, one b per
    /// regime, one break between each pair, and the step's rise and place.
    fn params(&self) -> usize {
        2 * (self.breaks.len() + 1) + 2 * usize::from(self.step.is_some())
    }
}

/// Sizes the first regime keeps above a latency step: α plus the step and
/// b_1 need two sizes there, as α and b_1 do without one.
const MIN_SIZES_ABOVE_STEP: usize = 2;

/// Ways to cut `m` sorted sizes into `parts` runs — the first of at least
/// [`MIN_SIZES_FIRST`], the others of at least [`MIN_SIZES_AFTER_BREAK`] —
/// with every cut at an index in `allowed`: each split is the index of a
/// run's first size.
fn splits(m: usize, parts: usize, allowed: &[bool]) -> Vec<Vec<usize>> {
    fn rec(
        start: usize,
        m: usize,
        parts: usize,
        allowed: &[bool],
        acc: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if parts == 0 {
            if m - start >= MIN_SIZES_AFTER_BREAK {
                out.push(acc.clone());
            }
            return;
        }
        let first = if acc.is_empty() {
            MIN_SIZES_FIRST
        } else {
            start + MIN_SIZES_AFTER_BREAK
        };
        for i in first..m {
            if i + MIN_SIZES_AFTER_BREAK * parts > m {
                break;
            }
            if allowed.get(i).copied().unwrap_or(false) {
                acc.push(i);
                rec(i, m, parts - 1, allowed, acc, out);
                acc.pop();
            }
        }
    }
    if parts <= 1 {
        // One regime takes every size, however few.
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    rec(0, m, parts - 1, allowed, &mut Vec::new(), &mut out);
    out
}

/// Minimise `f` over [a, b] (log space) by a coarse grid, then golden
/// section around the best grid point. The error is smooth in a continuous
/// break but need not be unimodal across a whole interval; the grid keeps
/// golden section from settling on the wrong side of a bump.
fn minimise_log(a: f64, b: f64, mut f: impl FnMut(f64) -> f64) -> f64 {
    const GRID: usize = 8;
    let (la, lb) = (a.ln(), b.ln());
    let at = |i: usize| la + (lb - la) * i as f64 / GRID as f64;
    let mut best = (0, f64::INFINITY);
    for i in 0..=GRID {
        let v = f(at(i).exp());
        if v < best.1 {
            best = (i, v);
        }
    }
    let (mut lo, mut hi) = (at(best.0.saturating_sub(1)), at((best.0 + 1).min(GRID)));
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let mut x1 = hi - g * (hi - lo);
    let mut x2 = lo + g * (hi - lo);
    let (mut f1, mut f2) = (f(x1.exp()), f(x2.exp()));
    for _ in 0..40 {
        if f1 <= f2 {
            hi = x2;
            (x2, f2) = (x1, f1);
            x1 = hi - g * (hi - lo);
            f1 = f(x1.exp());
        } else {
            lo = x1;
            (x1, f1) = (x2, f2);
            x2 = lo + g * (hi - lo);
            f2 = f(x2.exp());
        }
    }
    let x = ((lo + hi) / 2.0).exp();
    // Golden section only refines: never return worse than the grid's best.
    if f(x) <= best.1 { x } else { at(best.0).exp() }
}

/// The best model with `parts` regimes, the given join and a latency step
/// just below size index `step` (none when `None`).
fn best_with(
    data: &Data,
    parts: usize,
    join: Join,
    allowed: &[bool],
    step: Option<usize>,
) -> Option<Candidate> {
    let u = &data.sizes;
    let step_at = step.map(|i| data.step_at(i));
    let sse = |breaks: &[f64]| {
        data.solve(breaks, join, step_at)
            .map_or(f64::INFINITY, |s| s.sse)
    };
    let mut best: Option<Candidate> = None;
    for split in splits(u.len(), parts, allowed) {
        if let Some(i) = step {
            let first_end = split.first().copied().unwrap_or(u.len());
            if first_end < i + MIN_SIZES_ABOVE_STEP {
                continue;
            }
        }
        let brackets: Vec<(f64, f64)> = split.iter().map(|&i| (u[i - 1], u[i])).collect();
        let mut breaks: Vec<f64> = brackets.iter().map(|(a, b)| (a * b).sqrt()).collect();
        if join == Join::Continuous {
            // Coordinate descent: each break within its bracket, the others
            // held; two passes settle two breaks, one suffices for one.
            for _ in 0..breaks.len().min(2) {
                for k in 0..breaks.len() {
                    let (a, b) = brackets[k];
                    let mut trial = breaks.clone();
                    breaks[k] = minimise_log(a, b, |c| {
                        trial[k] = c;
                        sse(&trial)
                    });
                }
            }
        }
        let Some(sol) = data.solve(&breaks, join, step_at) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| sol.sse < b.sol.sse) {
            best = Some(Candidate {
                breaks,
                brackets,
                splits: split,
                join,
                step,
                sol,
            });
        }
    }
    best
}

/// For each index i of the distinct sizes: may a break sit just below
/// sizes[i]? Yes when the fastest time at sizes[i − 1] and at every larger
/// size is at least [`PLATEAU_FACTOR`] × the plateau (see there).
fn off_plateau(data: &Data) -> Vec<bool> {
    let u = &data.sizes;
    let fastest: Vec<f64> = u
        .iter()
        .map(|&size| {
            data.s
                .iter()
                .zip(&data.t)
                .filter(|(s, _)| **s == size)
                .map(|(_, t)| *t)
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let mut low: Vec<f64> = fastest.iter().take(3).copied().collect();
    low.sort_by(f64::total_cmp);
    let plateau = low.get(low.len() / 2).copied().unwrap_or(0.0);
    // above[i]: every size from i on is off the plateau.
    let mut above = vec![false; u.len() + 1];
    above[u.len()] = true;
    for i in (0..u.len()).rev() {
        above[i] = above[i + 1] && fastest[i] >= PLATEAU_FACTOR * plateau;
    }
    (0..u.len()).map(|i| i > 0 && above[i - 1]).collect()
}

/// Where a latency step may sit: just below size index i, for every i
/// whose bracket (sizes i − 1 and i) lies on the plateau, i.e. before the
/// run of sizes off it that [`off_plateau`] allows breaks in (every index
/// when the whole curve is plateau), keeping [`MIN_SIZES_ABOVE_STEP`] sizes
/// above it. A rise at the plateau's edge is the bandwidth term's to
/// explain.
fn step_positions(allowed: &[bool]) -> Vec<usize> {
    let m = allowed.len();
    // allowed[i]: sizes i − 1 and up are off the plateau; so the last size
    // on it is i − 2 for the first such i.
    let last = allowed
        .iter()
        .position(|&a| a)
        .map_or(m, |i| i.saturating_sub(2));
    (1..=last.min(m.saturating_sub(MIN_SIZES_ABOVE_STEP))).collect()
}

/// Bayesian information criterion of a weighted error `sse` on `n` points
/// with `params` parameters (lower is better).
fn bic(sse: f64, floor: f64, n: usize, params: usize) -> f64 {
    let n_f = n as f64;
    n_f * (sse.max(floor) / n_f).ln() + params as f64 * n_f.ln()
}

/// Fit the regime model to `(bytes, time_us)` points; `None` with fewer
/// than two distinct usable sizes (as [`crate::fit_alpha_beta`]).
///
/// For each number of regimes (1 to [`MAX_REGIMES`]) and each way to place
/// the breaks between measured sizes (off the latency plateau, each regime
/// keeping [`MIN_SIZES_FIRST`] or [`MIN_SIZES_AFTER_BREAK`] sizes), α and
/// every b_k ≥ 0 are fitted by weighted least squares with weights 1/t² —
/// relative error, as the α–β fit, so that the microsecond sizes keep α.
/// A continuous break is moved within its bracket to the error minimum; a
/// jump cannot be placed more precisely than between two measured sizes.
/// The placement with the least error wins, continuous unless a jump
/// leaves less than 0.8 of its error. Each of these is also tried with a
/// [`LatencyStep`], at the place on the plateau where it fits one regime
/// best. A break or a step is kept
/// only when the Bayesian information criterion says it pays for its two
/// extra parameters (b and the break; the rise and its place), so
/// one-regime data keep one regime and two-regime data two.
///
/// The model knows no collective: [`Regimes::reduction`] is
/// [`Reduction::None`] here; [`crate::fit_dataset`] sets it.
pub fn fit_regimes(points: &[(f64, f64)], factor: f64) -> Option<Regimes> {
    let factor = if factor > 0.0 && factor.is_finite() {
        factor
    } else {
        1.0
    };
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(s, t)| s.is_finite() && t.is_finite() && *s > 0.0 && *t > 0.0)
        .collect();
    let mut sizes: Vec<f64> = pts.iter().map(|p| p.0).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    if sizes.len() < 2 {
        return None;
    }
    let data = Data {
        s: pts.iter().map(|p| p.0).collect(),
        t: pts.iter().map(|p| p.1).collect(),
        w: pts.iter().map(|p| 1.0 / (p.1 * p.1)).collect(),
        sizes,
        factor,
    };
    let n = data.s.len();
    let floor = data.floor();

    let allowed = off_plateau(&data);
    // The step's place is chosen once, with one regime: on the plateau the
    // bandwidth terms are small, so the regimes above barely move it, and
    // trying every place with every placement of breaks would multiply
    // the search by the number of plateau sizes.
    let best_step = step_positions(&allowed)
        .into_iter()
        .filter_map(|i| best_with(&data, 1, Join::Continuous, &allowed, Some(i)))
        .filter(|c| c.sol.coef[1] > 0.0)
        .min_by(|a, b| a.sol.sse.total_cmp(&b.sol.sse))
        .and_then(|c| c.step);
    let steps: Vec<Option<usize>> = std::iter::once(None).chain(best_step.map(Some)).collect();
    let mut chosen: Option<(Candidate, f64)> = None;
    // Fewer parameters first: a later candidate must be strictly better.
    for parts in 1..=MAX_REGIMES {
        for &step in &steps {
            let pick = if parts == 1 {
                best_with(&data, 1, Join::Continuous, &allowed, step)
            } else {
                let cont = best_with(&data, parts, Join::Continuous, &allowed, step);
                let jump = best_with(&data, parts, Join::Jump, &allowed, step);
                match (cont, jump) {
                    (Some(c), Some(j)) => {
                        if j.sol.sse < JUMP_MARGIN * c.sol.sse {
                            Some(j)
                        } else {
                            Some(c)
                        }
                    }
                    (c, j) => c.or(j),
                }
            };
            if let Some(p) = pick {
                // A step that rose by nothing is no step: the same model
                // as without it, charged two parameters more.
                if p.step.is_some() && p.sol.coef[1] <= 0.0 {
                    continue;
                }
                let score = bic(p.sol.sse, floor, n, p.params());
                if chosen.as_ref().is_none_or(|(_, best)| score < *best) {
                    chosen = Some((p, score));
                }
            }
        }
    }
    let (chosen, _) = chosen?;

    let m = data.sizes.len();
    let one_regime =
        chosen
            .breaks
            .is_empty()
            .then_some(if m < MIN_SIZES_FIRST + MIN_SIZES_AFTER_BREAK {
                OneRegime::TooFewSizes { sizes: m }
            } else if splits(m, 2, &allowed).is_empty() {
                OneRegime::Plateau
            } else {
                OneRegime::NoGain
            });
    let b0 = 1 + usize::from(chosen.step.is_some());
    let step = chosen.step.map(|i| LatencyStep {
        from_bytes: data.step_at(i),
        bracket: (data.sizes[i - 1], data.sizes[i]),
        extra_us: chosen.sol.coef[1],
    });
    let mut starts = vec![0usize];
    starts.extend(&chosen.splits);
    let mut regimes = Vec::with_capacity(starts.len());
    for (k, &start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(m);
        regimes.push(Regime {
            from_bytes: if k == 0 { 0.0 } else { chosen.breaks[k - 1] },
            bracket: (k > 0).then(|| chosen.brackets[k - 1]),
            beta_us_per_byte: chosen.sol.coef[b0 + k],
            gamma_us_per_byte: None,
            sizes: end - start,
        });
    }

    // The same R² as the α–β fit.
    let r_squared = weighted_r_squared(&data.t, &data.w, chosen.sol.sse);
    Some(Regimes {
        alpha_us: chosen.sol.coef[0],
        step,
        factor,
        regimes,
        join: chosen.join,
        r_squared,
        points: n,
        sizes: m,
        alpha_pinned: chosen.sol.clamped[0],
        one_regime,
        reduction: Reduction::None,
    })
}
