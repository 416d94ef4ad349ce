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

/// Where a series' per-message α and per-byte β come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkSource {
    /// The send_recv fit: t = α + β·S is exactly one message, used as is.
    SendRecv,
    /// The all_reduce fit at `world` ranks. Its α is the latency of the whole
    /// collective, which a ring pays 2(n−1) times per call, so the per-message
    /// α is taken as α_fit / 2(n−1) (an assumption: the measured algorithm
    /// may not have been a ring). β needs no change: the fit already divided
    /// by the bus factor, so it is the time per byte on the link.
    AllReduce {
        /// Ranks the fit was measured on.
        world: usize,
    },
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
    /// Time per byte on a link (µs/byte).
    pub beta_us_per_byte: f64,
    /// Which fit the numbers came from.
    pub source: LinkSource,
}

/// One link model per series that has a send_recv or an all_reduce fit
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
                .and_then(|f| f.fit.model().map(|m| (f, *m)))
        };
        let model = if let Some((f, m)) = find(Collective::SendRecv) {
            Some((f, m.alpha_us, m.beta_us_per_byte, LinkSource::SendRecv))
        } else if let Some((f, m)) = find(Collective::AllReduce) {
            let steps = 2.0 * (f.world.max(2) as f64 - 1.0);
            Some((
                f,
                m.alpha_us / steps,
                m.beta_us_per_byte,
                LinkSource::AllReduce { world: f.world },
            ))
        } else {
            None
        };
        if let Some((f, alpha_us, beta_us_per_byte, source)) = model {
            out.push(LinkModel {
                series: id,
                name: f.name.clone(),
                alpha_us,
                beta_us_per_byte,
                source,
            });
        }
    }
    out
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
    /// The fastest algorithm.
    pub winner: AllReduceAlgorithm,
}

/// Predict every (series, size, ranks) combination.
pub fn scale_predictions(models: &[LinkModel], sizes: &[u64], ranks: &[usize]) -> Vec<ScaleRow> {
    let mut rows = Vec::new();
    for m in models {
        for &bytes in sizes {
            for &p in ranks {
                let times_us = AllReduceAlgorithm::ALL
                    .map(|a| a.predict_us(p, bytes as f64, m.alpha_us, m.beta_us_per_byte));
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
    use crate::fit::{AlphaBeta, Fit};

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
        let m = LinkModel {
            series: 0,
            name: "x".into(),
            alpha_us: 5.0,
            beta_us_per_byte: 1e-4,
            source: LinkSource::SendRecv,
        };
        let rows = scale_predictions(&[m], &[1024, 64 << 20], &[1024]);
        // Tiny message on many ranks: log-latency algorithms win over ring;
        // tree and halving-doubling tie on α, halving-doubling moves fewer bytes.
        assert_eq!(rows[0].winner, AllReduceAlgorithm::HalvingDoubling);
        // Huge message: the tree's full-message steps lose badly.
        assert_ne!(rows[1].winner, AllReduceAlgorithm::BinomialTree);
        assert!(rows[1].times_us[2] > 5.0 * rows[1].times_us[1]);
    }

    #[test]
    fn all_reduce_alpha_is_divided_by_ring_steps_and_send_recv_preferred() {
        let model = |alpha_us| {
            Fit::Fitted(AlphaBeta {
                alpha_us,
                beta_us_per_byte: 1e-3,
                factor: 1.0,
                r_squared: 1.0,
                points: 3,
                sizes: 3,
                pinned: None,
            })
        };
        let fit = |series, collective, alpha| SeriesFit {
            series,
            name: format!("s{series}"),
            collective,
            world: 4,
            peer: false,
            fit: model(alpha),
        };
        let fits = [
            fit(0, Collective::AllReduce, 60.0),
            fit(1, Collective::AllReduce, 60.0),
            fit(1, Collective::SendRecv, 7.0),
            fit(2, Collective::Broadcast, 9.0),
        ];
        let links = link_models(&fits);
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].alpha_us, 10.0); // 60 / 2(4−1)
        assert_eq!(links[0].source, LinkSource::AllReduce { world: 4 });
        assert_eq!(links[1].alpha_us, 7.0);
        assert_eq!(links[1].source, LinkSource::SendRecv);
    }
}
