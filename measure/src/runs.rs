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

#[cfg(test)]
mod tests {
    use super::{median_rounds, median_run};

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
}
