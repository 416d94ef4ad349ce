//! Choosing among repeated runs of one measurement.
//!
//! A shared machine has slow phases (seconds to a minute) that slow every
//! program measured inside one. Repeating a sweep a few times, apart in
//! time, and keeping per size the run with the median time means one run
//! that fell into such a phase decides nothing. Picking a whole run, not
//! averaging runs, keeps every number shown (median, p99, min) one that a
//! single run measured together.

/// The run whose `time` is the median of the runs' (the lower of the middle
/// two for an even count, so the choice is always a measured run); `None`
/// for no runs. Ties keep the earlier run.
pub fn median_run<T>(runs: &[T], time: impl Fn(&T) -> f64) -> Option<&T> {
    let mut by_time: Vec<&T> = runs.iter().collect();
    // A stable sort: of equal times, the earlier run comes first.
    by_time.sort_by(|a, b| time(a).total_cmp(&time(b)));
    by_time.get(by_time.len().saturating_sub(1) / 2).copied()
}

/// The median of `values` (`None` for none) for judging ringside against a
/// peer: of an even count's middle two, the one that reads worse for
/// ringside (the higher when `higher_is_worse`, as for times and their
/// ratios; the lower for bandwidths), so a tie between two rounds never
/// flatters it.
pub fn cautious_median(values: &[f64], higher_is_worse: bool) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let i = if n % 2 == 0 && !higher_is_worse {
        (n / 2).checked_sub(1)?
    } else {
        n / 2
    };
    v.get(i).copied()
}

/// Per item of the first round, in its order, the matching item (equal
/// `key`) of the round whose `time` for it is the median of the rounds'
/// ([`median_run`]): a sweep repeated in rounds, each size judged on its own.
/// An item some rounds lack is judged on the rounds that have it.
pub fn median_rounds<T, K: PartialEq>(
    rounds: &[Vec<T>],
    key: impl Fn(&T) -> K,
    time: impl Fn(&T) -> f64,
) -> Vec<&T> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    first
        .iter()
        .filter_map(|x| {
            let k = key(x);
            let at: Vec<&T> = rounds
                .iter()
                .filter_map(|round| round.iter().find(|y| key(y) == k))
                .collect();
            median_run(&at, |y| time(y)).copied()
        })
        .collect()
}

/// Whether round `round` (from 1) of a repeated comparison runs its sides in
/// reverse order: the even rounds, so rounds come in ABBA order (ours, peer,
/// peer, ours, …; with more sides A B C, C B A) and a machine whose state
/// drifts through the run favours no side. `ringside bench`, the tour and
/// `peers` all follow it.
pub fn reversed_round(round: u32) -> bool {
    round % 2 == 0
}

/// Ours set against the peer round by round ([`pairings`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pairings {
    /// Rounds in which ours was faster (a tie is no win).
    pub won: usize,
    /// Rounds in which both sides measured the item.
    pub of: usize,
    /// The median over those rounds of ours / the peer's time in the same
    /// round ([`cautious_median`]: of an even count's middle two the higher);
    /// `None` for no rounds.
    pub ratio: Option<f64>,
}

/// Ours against the peer in each round where both measured the item: in
/// how many ours was faster, and the median of the rounds' ratios. Round i of
/// ours is set against round i of the peer, taken next to it (before or
/// after), so the two met nearly the same machine. A ratio of the two sides'
/// median rounds compares rounds taken apart in time; on a busy machine the
/// rounds differ by more than the two sides do (a 16 MiB Gloo call took
/// 6.6–22.8 ms from round to round beside two busy loops), and such a ratio
/// can say one side was slower where it was faster in most pairings. `mine`
/// and `theirs` pick the item in a round.
pub fn pairings<T>(
    ours: &[Vec<T>],
    peer: &[Vec<T>],
    mine: impl Fn(&T) -> bool,
    theirs: impl Fn(&T) -> bool,
    time: impl Fn(&T) -> f64,
) -> Pairings {
    let pairs: Vec<(f64, f64)> = ours
        .iter()
        .zip(peer)
        .filter_map(|(o, p)| {
            Some((
                time(o.iter().find(|x| mine(x))?),
                time(p.iter().find(|x| theirs(x))?),
            ))
        })
        .collect();
    let ratios: Vec<f64> = pairs.iter().map(|(o, p)| o / p).collect();
    Pairings {
        won: pairs.iter().filter(|(o, p)| o < p).count(),
        of: pairs.len(),
        ratio: cautious_median(&ratios, true),
    }
}

#[cfg(test)]
mod tests {
    use super::{Pairings, cautious_median, median_rounds, median_run, pairings};

    #[test]
    fn a_cautious_median_takes_the_middle_value_that_reads_worse() {
        assert_eq!(cautious_median(&[1.3, 0.9, 1.1, 2.0], true), Some(1.3));
        assert_eq!(cautious_median(&[1.3, 0.9, 1.1, 2.0], false), Some(1.1));
        assert_eq!(cautious_median(&[0.3, 0.1, 0.2], true), Some(0.2));
        assert_eq!(cautious_median(&[0.3, 0.1, 0.2], false), Some(0.2));
        assert_eq!(cautious_median(&[], true), None);
        assert_eq!(cautious_median(&[], false), None);
    }

    #[test]
    fn each_size_takes_its_own_median_round() {
        // (size, time, round): round 2 stalled at size 4, round 3 at size 8.
        let rounds = vec![
            vec![(4, 50.0, 1), (8, 60.0, 1)],
            vec![(4, 4000.0, 2), (8, 61.0, 2)],
            vec![(4, 52.0, 3), (8, 4000.0, 3), (16, 1.0, 3)],
        ];
        let picked = median_rounds(&rounds, |r| r.0, |r| r.1);
        // Size 16 is not in the first round, so not in the result.
        assert_eq!(picked, vec![&(4, 52.0, 3), &(8, 61.0, 2)]);
        assert!(median_rounds::<(i32, f64, i32), i32>(&[], |r| r.0, |r| r.1).is_empty());
    }

    #[test]
    fn the_middle_run_wins_and_an_outlier_decides_nothing() {
        // The second run fell into a slow phase.
        let runs = [(1, 70.0), (2, 650.0), (3, 75.0)];
        assert_eq!(median_run(&runs, |r| r.1), Some(&(3, 75.0)));
        // Even counts take the lower middle run, never an average.
        let four = [(1, 4.0), (2, 1.0), (3, 3.0), (4, 2.0)];
        assert_eq!(median_run(&four, |r| r.1), Some(&(4, 2.0)));
        assert_eq!(median_run(&[(1, 9.0)], |r| r.1), Some(&(1, 9.0)));
        assert_eq!(median_run::<(i32, f64)>(&[], |r| r.1), None);
    }

    #[test]
    fn pairings_set_each_round_against_the_peer_round_beside_it() {
        // (size, time): ours fast in rounds 1 and 3, slow in round 2; the
        // peer's round 3 lacks size 8, and a fourth round of ours has no peer.
        let ours = vec![
            vec![(4, 10.0), (8, 20.0)],
            vec![(4, 30.0), (8, 20.0)],
            vec![(4, 10.0), (8, 20.0)],
            vec![(4, 1.0), (8, 1.0)],
        ];
        let peer = vec![
            vec![(4, 12.0), (8, 20.0)],
            vec![(4, 12.0), (8, 25.0)],
            vec![(4, 16.0)],
        ];
        let at = |size: i32| pairings(&ours, &peer, |r| r.0 == size, |r| r.0 == size, |r| r.1);
        // Ratios 10/12, 30/12, 10/16: the middle one.
        let p = at(4);
        assert_eq!((p.won, p.of), (2, 3));
        assert_eq!(p.ratio, Some(10.0 / 12.0));
        // A tie (round 1) is no win; round 3 has no peer record for size 8;
        // of two ratios (1.0, 0.8) the higher, which reads worse for ours.
        assert_eq!(
            at(8),
            Pairings {
                won: 1,
                of: 2,
                ratio: Some(1.0)
            }
        );
        assert_eq!(
            at(16),
            Pairings {
                won: 0,
                of: 0,
                ratio: None
            }
        );
    }

    /// What the paired ratio is for: the rounds swing more than the sides
    /// differ. Ours is faster than the peer beside it in 3 of 5 rounds, yet
    /// its median round is slower than the peer's median round.
    #[test]
    fn a_ratio_of_median_rounds_can_disagree_with_the_pairings() {
        let ours: Vec<Vec<f64>> = [6.0, 7.0, 14.0, 20.0, 22.0].map(|t| vec![t]).into();
        let peer: Vec<Vec<f64>> = [8.0, 9.0, 12.0, 21.0, 21.5].map(|t| vec![t]).into();
        let median = |rounds: &[Vec<f64>]| *median_run(rounds, |r| r[0]).unwrap().first().unwrap();
        assert!(median(&ours) / median(&peer) > 1.0);
        let p = pairings(&ours, &peer, |_| true, |_| true, |t| *t);
        assert_eq!((p.won, p.of), (3, 5));
        assert!(p.ratio.unwrap() < 1.0, "{p:?}");
    }
}
