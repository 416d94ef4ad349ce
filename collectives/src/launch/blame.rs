//! The launcher's blame: a frozen rank never exits by itself, so the first
//! rank to fail is usually the one that gave up waiting for it. Its error
//! names the rank it waited for ("… waiting for rank N …", "lost rank N"),
//! and the report puts that rank first when it was still running.

use super::report::{LaunchReport, RankOutcome};

impl LaunchReport {
    /// The rank the failed rank blames, when its error says so and that rank was
    /// still running when the launcher stopped it: a frozen rank never exits by
    /// itself, so the first to exit is the one that timed out waiting for it (or
    /// lost it). Read from the error texts of ringside's transports and store
    /// ("… waiting for rank N …", "lost rank N: …"), the last such line winning.
    pub fn blamed(&self) -> Option<(&RankOutcome, &str)> {
        let failed = self.failure()?;
        failed.stderr_tail.iter().rev().find_map(|line| {
            let n = blamed_in(line).filter(|&n| n != failed.rank)?;
            let culprit = self.ranks.iter().find(|r| r.rank == n)?;
            culprit
                .stopped
                .is_some()
                .then_some((culprit, line.as_str()))
        })
    }
}

/// The rank a line of an error blames: `N` in "waiting for rank N" or "lost rank N".
fn blamed_in(line: &str) -> Option<usize> {
    ["waiting for rank ", "lost rank "]
        .iter()
        .find_map(|marker| {
            let at = line.find(marker)? + marker.len();
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
}
