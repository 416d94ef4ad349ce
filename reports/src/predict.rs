//! Scale predictions: what the fitted link costs imply for all_reduce on many
//! more ranks than we can run here, under three textbook algorithms.

use crate::fit::SeriesFit;
use crate::results::Collective;

/// Message sizes the report predicts for: 1 KiB, 1 MiB, 64 MiB.
pub const SCALE_SIZES: [u64; 3] = [1 << 10, 1 << 20, 64 << 20];
/// Rank counts the report predicts for.
pub const SCALE_RANKS: [usize; 4] = [8, 64, 512, 1024];

/// all_reduce algorithms with a closed-form α–β cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllReduceAlgorithm {
    /// Reduce-scatter then all-gather around a ring: 2(p−1) steps, each
    /// moving S/p. Bandwidth optimal, latency linear in p.
    Ring,
    /// Recursive halving (reduce-scatter) then doubling (all-gather)
    /// (Rabenseifner): 2·log2 p steps, bandwidth optimal.
    HalvingDoubling,
    /// Binomial-tree reduce to a root, then binomial-tree broadcast:
    /// 2·log2 p steps, each moving the whole message.
    BinomialTree,
}

impl AllReduceAlgorithm {
    /// All three, in table order.
    pub const ALL: [AllReduceAlgorithm; 3] = [
        AllReduceAlgorithm::Ring,
        AllReduceAlgorithm::HalvingDoubling,
        AllReduceAlgorithm::BinomialTree,
    ];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            AllReduceAlgorithm::Ring => "ring",
            AllReduceAlgorithm::HalvingDoubling => "halving-doubling",
            AllReduceAlgorithm::BinomialTree => "binomial tree",
        }
    }

    /// Predicted time (µs) for all_reduce of `bytes` on `p` ranks, with a
    /// per-message latency `alpha_us` and per-byte time `beta_us_per_byte`:
    ///
    /// - ring: 2(p−1)·α + 2(p−1)/p·S·β
    /// - halving-doubling: 2·log2(p)·α + 2(p−1)/p·S·β
    /// - binomial tree: 2·log2(p)·(α + S·β)
    ///
    /// log2 is rounded up for a p that is not a power of two (the extra
    /// fold-in step real implementations take). One rank costs nothing.
    pub fn predict_us(self, p: usize, bytes: f64, alpha_us: f64, beta_us_per_byte: f64) -> f64 {
        if p <= 1 {
            return 0.0;
        }
        let pf = p as f64;
        let log2p = f64::from(usize::BITS - (p - 1).leading_zeros());
        let bw = 2.0 * (pf - 1.0) / pf * bytes * beta_us_per_byte;
        match self {
            AllReduceAlgorithm::Ring => 2.0 * (pf - 1.0) * alpha_us + bw,
            AllReduceAlgorithm::HalvingDoubling => 2.0 * log2p * alpha_us + bw,
            AllReduceAlgorithm::BinomialTree => 2.0 * log2p * (alpha_us + bytes * beta_us_per_byte),
        }
    }
}

/// Where a series' per-message α and per-byte costs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkSource {
    /// The send_recv model: t = α + S·b_k is exactly one message, used as
    /// is (with no reduction cost: a send_recv reduces nothing).
    SendRecv,
    /// The all_reduce model at `world` ranks. Its α is the latency of the
    /// whole collective, which a ring pays 2(n−1) times per call, so the
    /// per-message α is taken as α_fit / 2(n−1) (an assumption: the measured
    /// algorithm may not have been a ring). The b_k need no change: the fit
    /// already divided by the bus factor, so they are times per byte on the
    /// link, reduction γ included. The fitted break is a buffer size, and
    /// stays one: see [`AllReduceAlgorithm::predict_link_us`].
    AllReduce {
        /// Ranks the fit was measured on.
        world: usize,
    },
}

/// The per-byte cost of messages in one size range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkRegime {
    /// Smallest per-rank buffer (bytes) of the regime: 0 for the first.
    pub from_buffer_bytes: f64,
    /// Time per byte on a link (µs/byte).
    pub beta_us_per_byte: f64,
    /// The fitted regime's name (`cache`, `memory`, `all sizes`, …).
    pub name: &'static str,
}

/// Per-message link costs derived from one series' fits.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkModel {
    /// Index into the dataset's series.
    pub series: usize,
    /// Display name.
    pub name: String,
    /// Latency of one message (µs).
    pub alpha_us: f64,
    /// Per-byte costs by buffer size, smallest first (one regime when the
    /// fit found no break).
    pub regimes: Vec<LinkRegime>,
    /// Which fit the numbers came from.
    pub source: LinkSource,
}

impl LinkModel {
    /// Index of the regime a per-rank buffer of `bytes` falls into.
    pub fn regime_at(&self, bytes: f64) -> usize {
        self.regimes
            .iter()
            .rposition(|r| bytes >= r.from_buffer_bytes)
            .unwrap_or(0)
    }

    /// Time per byte (µs/byte) on the link when each rank's buffer is `bytes`.
    pub fn beta_at(&self, bytes: f64) -> f64 {
        self.regimes
            .get(self.regime_at(bytes))
            .map_or(0.0, |r| r.beta_us_per_byte)
    }
}

/// One link model per series that has a send_recv or an all_reduce model
/// (send_recv preferred: it measures a single message directly).
pub fn link_models(fits: &[SeriesFit]) -> Vec<LinkModel> {
    let mut out: Vec<LinkModel> = Vec::new();
    let mut ids: Vec<usize> = fits.iter().map(|f| f.series).collect();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        let find = |c: Collective| {
            fits.iter()
                .find(|f| f.series == id && f.collective == c)
                .and_then(|f| f.model.as_ref().map(|m| (f, m)))
        };
        let (f, m, source, alpha_div) = if let Some((f, m)) = find(Collective::SendRecv) {
            (f, m, LinkSource::SendRecv, 1.0)
        } else if let Some((f, m)) = find(Collective::AllReduce) {
            let n = f.world.max(2) as f64;
            (
                f,
                m,
                LinkSource::AllReduce { world: f.world },
                2.0 * (n - 1.0),
            )
        } else {
            continue;
        };
        out.push(LinkModel {
            series: id,
            name: f.name.clone(),
            alpha_us: m.alpha_large_us() / alpha_div,
            regimes: m
                .regimes
                .iter()
                .enumerate()
                .map(|(k, r)| LinkRegime {
                    from_buffer_bytes: r.from_bytes,
                    beta_us_per_byte: r.cost_us_per_byte(),
                    name: m.regime_name(k),
                })
                .collect(),
            source,
        });
    }
    out
}

impl AllReduceAlgorithm {
    /// Predicted time (µs) for all_reduce of `bytes` on `p` ranks over
    /// `link`, at the per-byte cost of the regime the per-rank buffer S
    /// falls into, whatever the algorithm's message sizes.
    ///
    /// Why the buffer and not the message: the regimes are where the
    /// measured buffers stopped fitting in cache (input, output and staging
    /// together), and every algorithm makes each rank read and write its
    /// whole buffer S, in S/p chunks or not: a rank whose buffer is past
    /// its cache streams it from memory however small the chunks. Choosing
    /// by message size instead would let the ring's small chunks at many
    /// ranks ride the cache rate and win on a cost it does not have. What
    /// is still left out: contention between ranks for a shared cache or
    /// memory bus, which makes every prediction here a lower bound.
    pub fn predict_link_us(self, p: usize, bytes: f64, link: &LinkModel) -> f64 {
        self.predict_us(p, bytes, link.alpha_us, link.beta_at(bytes))
    }

    /// The name of the regime a per-rank buffer of `bytes` is priced in.
    pub fn regime_used(bytes: f64, link: &LinkModel) -> &'static str {
        link.regimes
            .get(link.regime_at(bytes))
            .map_or("all sizes", |r| r.name)
    }
}

/// Predictions for one series, size and rank count.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleRow {
    /// Series display name.
    pub name: String,
    /// Message size (bytes).
    pub bytes: u64,
    /// Ranks.
    pub ranks: usize,
    /// Predicted µs, in [`AllReduceAlgorithm::ALL`] order.
    pub times_us: [f64; 3],
    /// The regime each rank's buffer is priced in (the same for every
    /// algorithm).
    pub regime: &'static str,
    /// The fastest algorithm.
    pub winner: AllReduceAlgorithm,
}

/// Predict every (series, size, ranks) combination.
pub fn scale_predictions(models: &[LinkModel], sizes: &[u64], ranks: &[usize]) -> Vec<ScaleRow> {
    let mut rows = Vec::new();
    for m in models {
        for &bytes in sizes {
            for &p in ranks {
                let s = bytes as f64;
                let times_us = AllReduceAlgorithm::ALL.map(|a| a.predict_link_us(p, s, m));
                let regime = AllReduceAlgorithm::regime_used(s, m);
                let mut winner = AllReduceAlgorithm::ALL[0];
                let mut best = times_us[0];
                for (a, &t) in AllReduceAlgorithm::ALL.iter().zip(&times_us) {
                    if t < best {
                        (winner, best) = (*a, t);
                    }
                }
                rows.push(ScaleRow {
                    name: m.name.clone(),
                    bytes,
                    ranks: p,
                    times_us,
                    regime,
                    winner,
                });
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::{AlphaBeta, Fit, Join, Reduction, Regime, Regimes, fit_regimes};

    fn one_regime(alpha_us: f64, beta_us_per_byte: f64) -> LinkModel {
        LinkModel {
            series: 0,
            name: "x".into(),
            alpha_us,
            regimes: vec![LinkRegime {
                from_buffer_bytes: 0.0,
                beta_us_per_byte,
                name: "all sizes",
            }],
            source: LinkSource::SendRecv,
        }
    }

    #[test]
    fn formulas_match_the_textbook() {
        let (a, b, s) = (2.0, 1e-3, 1_048_576.0);
        let p = 8usize;
        let ring = AllReduceAlgorithm::Ring.predict_us(p, s, a, b);
        assert_eq!(ring, 2.0 * 7.0 * a + 2.0 * 7.0 / 8.0 * s * b);
        let hd = AllReduceAlgorithm::HalvingDoubling.predict_us(p, s, a, b);
        assert_eq!(hd, 2.0 * 3.0 * a + 2.0 * 7.0 / 8.0 * s * b);
        let tree = AllReduceAlgorithm::BinomialTree.predict_us(p, s, a, b);
        assert_eq!(tree, 2.0 * 3.0 * (a + s * b));
        assert_eq!(AllReduceAlgorithm::Ring.predict_us(1, s, a, b), 0.0);
        // Not a power of two: log2 rounds up (6 ranks → 3 steps each way).
        assert_eq!(
            AllReduceAlgorithm::BinomialTree.predict_us(6, 0.0, 1.0, 0.0),
            6.0
        );
        assert_eq!(
            AllReduceAlgorithm::BinomialTree.predict_us(1024, 0.0, 1.0, 0.0),
            20.0
        );
    }

    #[test]
    fn winners_follow_the_latency_bandwidth_trade() {
        let m = one_regime(5.0, 1e-4);
        let rows = scale_predictions(&[m], &[1024, 64 << 20], &[1024]);
        // Tiny message on many ranks: log-latency algorithms win over ring;
        // tree and halving-doubling tie on α, halving-doubling moves fewer bytes.
        assert_eq!(rows[0].winner, AllReduceAlgorithm::HalvingDoubling);
        // Huge message: the tree's full-message steps lose badly.
        assert_ne!(rows[1].winner, AllReduceAlgorithm::BinomialTree);
        assert!(rows[1].times_us[2] > 5.0 * rows[1].times_us[1]);
    }

    /// A regime model with α and, when `break_bytes` is given, a second
    /// regime three times slower from there on.
    fn regimes(alpha_us: f64, break_bytes: Option<f64>) -> Regimes {
        let regime = |from_bytes, beta_us_per_byte| Regime {
            from_bytes,
            bracket: None,
            beta_us_per_byte,
            gamma_us_per_byte: None,
            sizes: 3,
        };
        let mut rs = vec![regime(0.0, 1e-3)];
        rs.extend(break_bytes.map(|b| regime(b, 3e-3)));
        Regimes {
            alpha_us,
            step: None,
            factor: 1.0,
            regimes: rs,
            join: Join::Continuous,
            r_squared: 1.0,
            points: 6,
            sizes: 6,
            alpha_pinned: false,
            one_regime: None,
            reduction: Reduction::None,
        }
    }

    fn series_fit(series: usize, collective: Collective, model: Regimes) -> SeriesFit {
        SeriesFit {
            series,
            name: format!("s{series}"),
            collective,
            world: 4,
            peer: false,
            fit: Fit::Fitted(AlphaBeta {
                alpha_us: model.alpha_us,
                beta_us_per_byte: 1e-3,
                factor: 1.0,
                r_squared: 1.0,
                points: 3,
                sizes: 3,
                pinned: None,
            }),
            model: Some(model),
        }
    }

    #[test]
    fn all_reduce_alpha_is_divided_by_ring_steps_and_send_recv_preferred() {
        let fits = [
            series_fit(
                0,
                Collective::AllReduce,
                regimes(60.0, Some(4.0 * 1048576.0)),
            ),
            series_fit(1, Collective::AllReduce, regimes(60.0, None)),
            series_fit(1, Collective::SendRecv, regimes(7.0, Some(1048576.0))),
            series_fit(2, Collective::Broadcast, regimes(9.0, None)),
        ];
        let links = link_models(&fits);
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].alpha_us, 10.0); // 60 / 2(4−1)
        assert_eq!(links[0].source, LinkSource::AllReduce { world: 4 });
        // The break stays a buffer size.
        assert_eq!(links[0].regimes[1].from_buffer_bytes, 4.0 * 1048576.0);
        assert_eq!(
            (links[0].regimes[0].name, links[0].regimes[1].name),
            ("cache", "memory")
        );
        assert_eq!(links[1].alpha_us, 7.0);
        assert_eq!(links[1].source, LinkSource::SendRecv);
        // send_recv: message and buffer are one.
        assert_eq!(links[1].regimes[1].from_buffer_bytes, 1048576.0);
    }

    #[test]
    fn every_algorithm_pays_the_regime_of_the_whole_buffer() {
        let mib = 1048576.0;
        let link = LinkModel {
            regimes: vec![
                LinkRegime {
                    from_buffer_bytes: 0.0,
                    beta_us_per_byte: 1e-4,
                    name: "cache",
                },
                LinkRegime {
                    from_buffer_bytes: mib,
                    beta_us_per_byte: 3e-4,
                    name: "memory",
                },
            ],
            ..one_regime(2.0, 0.0)
        };
        let a = 2.0;
        // A 64 MiB buffer is past the break at any rank count: the ring's
        // 64 KiB chunks on 1024 ranks still stream from memory.
        for p in [8, 1024] {
            for alg in AllReduceAlgorithm::ALL {
                assert_eq!(
                    alg.predict_link_us(p, 64.0 * mib, &link),
                    alg.predict_us(p, 64.0 * mib, a, 3e-4),
                    "{alg:?} on {p}"
                );
                assert_eq!(
                    alg.predict_link_us(p, 0.5 * mib, &link),
                    alg.predict_us(p, 0.5 * mib, a, 1e-4),
                    "{alg:?} on {p}"
                );
            }
        }
        assert_eq!(AllReduceAlgorithm::regime_used(64.0 * mib, &link), "memory");
        assert_eq!(AllReduceAlgorithm::regime_used(mib - 1.0, &link), "cache");
        // With one regime the textbook formulas come out unchanged.
        let flat = one_regime(a, 1e-4);
        for alg in AllReduceAlgorithm::ALL {
            assert_eq!(
                alg.predict_link_us(64, 64.0 * mib, &flat),
                alg.predict_us(64, 64.0 * mib, a, 1e-4)
            );
        }
    }

    #[test]
    fn fitted_models_feed_the_links() {
        // A fitted two-regime all_reduce reaches the scale table with its
        // break where it was fitted: a buffer size.
        let mib = 1048576.0;
        let pts: Vec<(f64, f64)> = (3..=26)
            .map(|k| {
                let s = f64::from(1u32 << k);
                (s, 1.0 + s * if s > 2.0 * mib { 2e-4 } else { 5e-5 })
            })
            .collect();
        let m = fit_regimes(&pts, 1.0).unwrap();
        assert_eq!(m.regimes.len(), 2, "{m:?}");
        let links = link_models(&[SeriesFit {
            world: 2,
            ..series_fit(0, Collective::AllReduce, m.clone())
        }]);
        let b = m.break_bytes().unwrap();
        assert_eq!(links[0].regimes[1].from_buffer_bytes, b);
        let rows = scale_predictions(&links, &[64 << 20, 1 << 20], &[8]);
        assert_eq!((rows[0].regime, rows[1].regime), ("memory", "cache"));
    }
}
