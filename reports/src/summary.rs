//! The one-screen summary: who is fastest where, and the fitted costs.

use std::collections::BTreeMap;
use std::fmt;

use crate::charts::{ChartFailure, MAX_CHART_SERIES};
use crate::dataset::Dataset;
use crate::fit::{Fit, SeriesFit};
use crate::results::Collective;
use crate::units::{fmt_alpha, fmt_bytes, sig3};

/// Size classes used to name "the best backend" (by median time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SizeRange {
    /// S ≤ 4 KiB: latency bound.
    Small,
    /// 4 KiB < S ≤ 1 MiB.
    Medium,
    /// S > 1 MiB: bandwidth bound.
    Large,
}

impl SizeRange {
    /// All three, smallest first.
    pub const ALL: [SizeRange; 3] = [SizeRange::Small, SizeRange::Medium, SizeRange::Large];

    /// The class of a size.
    pub fn of(bytes: u64) -> SizeRange {
        if bytes <= 4 << 10 {
            SizeRange::Small
        } else if bytes <= 1 << 20 {
            SizeRange::Medium
        } else {
            SizeRange::Large
        }
    }

    /// Name with bounds, e.g. `small (≤ 4 KiB)`.
    pub fn label(self) -> &'static str {
        match self {
            SizeRange::Small => "small (≤ 4 KiB)",
            SizeRange::Medium => "medium (≤ 1 MiB)",
            SizeRange::Large => "large (> 1 MiB)",
        }
    }
}

/// The best series of one collective in one size range.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeBest {
    /// Which collective.
    pub collective: Collective,
    /// Which sizes.
    pub range: SizeRange,
    /// Display name of the winner.
    pub series: String,
    /// Sizes in the range where it had the lowest median.
    pub wins: usize,
    /// Sizes in the range measured by any series.
    pub sizes: usize,
    /// Series that measured this range at all.
    pub contenders: usize,
    /// The runner-up and how many times slower it is (geometric mean of the
    /// median ratio over the sizes both measured), when there is one.
    pub runner_up: Option<(String, f64)>,
}

/// What a caller prints after writing a report.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Input files.
    pub files: usize,
    /// Records read.
    pub records: usize,
    /// Series found.
    pub series: usize,
    /// Best series per collective and size range.
    pub best: Vec<RangeBest>,
    /// The fits (regime model and α–β baseline).
    pub fits: Vec<SeriesFit>,
    /// Charts that could not be drawn (filled in by [`crate::write_report`]):
    /// the rest of the report is there, and this says what is missing.
    pub charts_not_drawn: Vec<ChartFailure>,
}

/// Geometric mean of `b/a` over the sizes both maps have.
fn ratio_geomean(a: &BTreeMap<u64, f64>, b: &BTreeMap<u64, f64>) -> Option<f64> {
    let logs: Vec<f64> = a
        .iter()
        .filter_map(|(s, ta)| b.get(s).map(|tb| (tb / ta).ln()))
        .filter(|v| v.is_finite())
        .collect();
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// Geometric mean of a series' times (its tie-breaker).
fn geomean(t: &BTreeMap<u64, f64>) -> f64 {
    let logs: Vec<f64> = t.values().filter(|v| **v > 0.0).map(|v| v.ln()).collect();
    if logs.is_empty() {
        f64::INFINITY
    } else {
        (logs.iter().sum::<f64>() / logs.len() as f64).exp()
    }
}

/// Rank the series per collective and size range, and collect the fits.
///
/// Series rarely share every size, so "best" is counted per size: the series
/// with the lowest median at the most sizes of the range wins; ties go to the
/// lower geometric-mean time.
pub fn summarize(ds: &Dataset, fits: &[SeriesFit]) -> Summary {
    let mut best = Vec::new();
    for collective in ds.collectives() {
        for range in SizeRange::ALL {
            // series → (size → median)
            let mut times: BTreeMap<usize, BTreeMap<u64, f64>> = BTreeMap::new();
            for id in ds.series_for(collective) {
                for r in ds.points(id, collective) {
                    if SizeRange::of(r.bytes) == range {
                        times.entry(id).or_default().insert(r.bytes, r.median_us);
                    }
                }
            }
            if times.is_empty() {
                continue;
            }
            let mut sizes: BTreeMap<u64, (usize, f64)> = BTreeMap::new();
            for (&id, t) in &times {
                for (&s, &m) in t {
                    let e = sizes.entry(s).or_insert((id, m));
                    if m < e.1 {
                        *e = (id, m);
                    }
                }
            }
            let mut wins: BTreeMap<usize, usize> = times.keys().map(|&id| (id, 0)).collect();
            for (id, _) in sizes.values() {
                *wins.entry(*id).or_default() += 1;
            }
            let mut ranked: Vec<usize> = times.keys().copied().collect();
            ranked.sort_by(|a, b| {
                wins[b]
                    .cmp(&wins[a])
                    .then_with(|| geomean(&times[a]).total_cmp(&geomean(&times[b])))
            });
            let Some(&first) = ranked.first() else {
                continue;
            };
            let runner_up = ranked.get(1).and_then(|&second| {
                ratio_geomean(&times[&first], &times[&second])
                    .map(|r| (ds.series[second].name.clone(), r))
            });
            best.push(RangeBest {
                collective,
                range,
                series: ds.series[first].name.clone(),
                wins: wins[&first],
                sizes: sizes.len(),
                contenders: times.len(),
                runner_up,
            });
        }
    }
    Summary {
        files: ds.sources.len(),
        records: ds.entries.len(),
        series: ds.series.len(),
        best,
        fits: fits.to_vec(),
        charts_not_drawn: Vec::new(),
    }
}

impl Summary {
    /// One fit per series for the headline: its all_reduce fit when there is
    /// one (the collective training lives on), otherwise its first fitted
    /// collective, otherwise its first entry.
    pub fn headline_fits(&self) -> Vec<&SeriesFit> {
        let mut ids: Vec<usize> = self.fits.iter().map(|f| f.series).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .filter_map(|id| {
                let mine = || self.fits.iter().filter(move |f| f.series == id);
                mine()
                    .find(|f| f.collective == Collective::AllReduce && f.model.is_some())
                    .or_else(|| mine().find(|f| f.model.is_some()))
                    .or_else(|| mine().next())
            })
            .collect()
    }
}

/// Cut a name to `width` characters (with an ellipsis) so columns hold.
fn clip(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        name.to_string()
    } else {
        let mut s: String = name.chars().take(width.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

impl fmt::Display for Summary {
    /// About one screen: a line per collective, a line per series.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} record(s), {} series, from {} file(s)",
            self.records, self.series, self.files
        )?;
        let names = self
            .best
            .iter()
            .map(|b| b.series.chars().count())
            .chain(self.fits.iter().map(|s| s.name.chars().count()));
        let w = names.max().unwrap_or(6).clamp(10, 28);
        writeln!(f, "fastest by median time:")?;
        writeln!(
            f,
            "  {:<14} {:<w$} {:<w$} {:<w$}",
            "", "S ≤ 4 KiB", "S ≤ 1 MiB", "S > 1 MiB"
        )?;
        let mut collectives: Vec<Collective> = self.best.iter().map(|b| b.collective).collect();
        collectives.dedup();
        for c in collectives {
            let cell = |r: SizeRange| {
                self.best
                    .iter()
                    .find(|b| b.collective == c && b.range == r)
                    .map_or("-".into(), |b| clip(&b.series, w))
            };
            writeln!(
                f,
                "  {:<14} {:<w$} {:<w$} {:<w$}",
                c.key(),
                cell(SizeRange::Small),
                cell(SizeRange::Medium),
                cell(SizeRange::Large)
            )?;
        }
        writeln!(
            f,
            "model t = α + S·f·b_k, bandwidth 1/b per regime (all_reduce where measured):"
        )?;
        // α is wider where a latency step gives it two values.
        let aw = self
            .headline_fits()
            .into_iter()
            .filter_map(|s| s.model.as_ref())
            .map(|m| fmt_alpha(m).chars().count())
            .max()
            .unwrap_or(0)
            .max(9);
        writeln!(
            f,
            "  {:<w$} {:<14} {:>aw$}  {:<22} {:<20} {:>5} {:>5}",
            "series", "collective", "α", "1/b (GB/s)", "breaks", "R²", "α–β"
        )?;
        // A line per series, for the first dozen: a terminal is one screen.
        let headline = self.headline_fits();
        if headline.len() > MAX_CHART_SERIES {
            writeln!(
                f,
                "  (the first {MAX_CHART_SERIES} of {} series; the page has more)",
                headline.len()
            )?;
        }
        for s in headline.into_iter().take(MAX_CHART_SERIES) {
            let name = clip(&s.name, w);
            let old = s
                .fit
                .model()
                .map_or("—".into(), |m| format!("{:.3}", m.r_squared));
            match &s.model {
                Some(m) => {
                    let bw: Vec<String> = m
                        .regimes
                        .iter()
                        .map(|r| r.bandwidth_gbps().map_or("∞".into(), sig3))
                        .collect();
                    let br: Vec<String> = m.regimes[1..]
                        .iter()
                        .map(|r| fmt_bytes(r.from_bytes))
                        .collect();
                    writeln!(
                        f,
                        "  {:<w$} {:<14} {:>aw$}  {:<22} {:<20} {:>5.3} {:>5}",
                        name,
                        s.collective.key(),
                        fmt_alpha(m),
                        bw.join(" → "),
                        if br.is_empty() {
                            "none".into()
                        } else {
                            br.join(", ")
                        },
                        m.r_squared,
                        old
                    )?
                }
                None => {
                    let sizes = match s.fit {
                        Fit::TooFewSizes { sizes } => sizes,
                        Fit::Fitted(m) => m.sizes,
                    };
                    writeln!(
                        f,
                        "  {:<w$} {:<14} no fit ({sizes} distinct size(s), need 2)",
                        name,
                        s.collective.key()
                    )?
                }
            }
        }
        for failure in &self.charts_not_drawn {
            writeln!(f, "{failure}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::fit_dataset;
    use crate::results::Record;
    use crate::testing;

    fn rec(label: &str, bytes: u64, median: f64) -> Record {
        testing::record(label, Collective::AllReduce, 2, bytes, median)
    }

    #[test]
    fn best_per_range_counts_wins_per_size() {
        let mut records = Vec::new();
        // "lat" has low latency, "bw" high bandwidth.
        for k in 3..=26 {
            let s = 1u64 << k;
            records.push(rec("lat", s, 2.0 + s as f64 * 1e-3));
            records.push(rec("bw", s, 20.0 + s as f64 * 1e-4));
        }
        let ds = testing::dataset(records);
        let fits = fit_dataset(&ds);
        let s = summarize(&ds, &fits);
        let winners: Vec<(SizeRange, &str)> = s
            .best
            .iter()
            .map(|b| (b.range, b.series.as_str()))
            .collect();
        assert_eq!(
            winners,
            [
                (SizeRange::Small, "lat"),
                (SizeRange::Medium, "bw"),
                (SizeRange::Large, "bw")
            ]
        );
        assert_eq!((s.best[0].wins, s.best[0].sizes), (10, 10));
        let (runner, ratio) = s.best[0].runner_up.clone().unwrap();
        assert_eq!(runner, "bw");
        assert!(ratio > 1.0);
        let text = s.to_string();
        let all_reduce = text
            .lines()
            .find(|l| l.trim_start().starts_with("all_reduce"))
            .unwrap();
        let cells: Vec<&str> = all_reduce.split_whitespace().collect();
        assert_eq!(cells, ["all_reduce", "lat", "bw", "bw"], "{text}");
        assert!(text.lines().count() < 25, "{text}");
    }

    #[test]
    fn size_ranges_have_inclusive_upper_bounds() {
        assert_eq!(SizeRange::of(4096), SizeRange::Small);
        assert_eq!(SizeRange::of(4097), SizeRange::Medium);
        assert_eq!(SizeRange::of(1 << 20), SizeRange::Medium);
        assert_eq!(SizeRange::of((1 << 20) + 1), SizeRange::Large);
    }
}
