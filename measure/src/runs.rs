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

/// In how many rounds ours was faster than the peer, of the rounds where
/// both measured the item: `(won, of)`. Round i of ours is set against round
/// i of the peer, taken next to it (before or after), so the two met nearly the same
/// machine; a ratio of medians can hide that one side was faster in most of
/// those pairings, or slower (a busy machine moves both sides' medians by
/// more than the difference between them). `mine` and `theirs` pick the
/// item in a round; a tie counts as no win.
pub fn rounds_won<T>(
    ours: &[Vec<T>],
    peer: &[Vec<T>],
    mine: impl Fn(&T) -> bool,
    theirs: impl Fn(&T) -> bool,
    time: impl Fn(&T) -> f64,
) -> (usize, usize) {
    ours.iter()
        .zip(peer)
        .filter_map(|(o, p)| Some((o.iter().find(|x| mine(x))?, p.iter().find(|x| theirs(x))?)))
        .fold((0, 0), |(won, of), (o, p)| {
            (won + usize::from(time(o) < time(p)), of + 1)
        })
}

#[cfg(test)]
mod tests {
    use super::{median_rounds, median_run, rounds_won};

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
    fn rounds_won_sets_each_round_against_the_peer_round_after_it() {
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
            vec![(4, 12.0)],
        ];
        let won = |size: i32| rounds_won(&ours, &peer, |r| r.0 == size, |r| r.0 == size, |r| r.1);
        assert_eq!(won(4), (2, 3));
        // A tie (round 1) is no win; round 3 has no peer record for size 8.
        assert_eq!(won(8), (1, 2));
        assert_eq!(won(16), (0, 0));
    }
}
