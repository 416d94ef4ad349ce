//! The launcher's hang table: one row per rank from the line each rank's
//! flight recorder prints when a call fails ([`crate::flight::LINE_MARK`]),
//! so a job that hung reads as one picture ("rank 0 waits to receive from
//! rank 1; rank 1 waits to receive from rank 0") instead of one rank's error.

use super::report::LaunchReport;
use crate::flight::LINE_MARK;

/// One rank's row: last completed call, current call, whom it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangRow {
    /// The rank.
    pub rank: usize,
    /// "all_reduce#8", or "none".
    pub last: String,
    /// The call it failed in ("all_reduce#9 (1280 × float, avg)").
    pub current: String,
    /// "waits to receive from rank 1 (30.0 s)", or "-".
    pub waits: String,
}

/// Reads a [`LINE_MARK`] line (as printed, or after the launcher's `[rank N] `).
pub fn parse_row(line: &str) -> Option<HangRow> {
    let at = line.find(LINE_MARK)? + LINE_MARK.len();
    let mut f = line[at..].split(" | ");
    let rank = f.next()?.strip_prefix("rank ")?.parse().ok()?;
    let last = f.next()?.strip_prefix("last completed ")?.to_owned();
    let current = f.next()?.strip_prefix("in ")?.to_owned();
    let waits = f.next()?.to_owned();
    Some(HangRow {
        rank,
        last,
        current,
        waits,
    })
}

impl LaunchReport {
    /// Every rank's latest flight row, when at least one rank left one; a
    /// rank without one is shown as still running when stopped, or as exited.
    pub fn hang_table(&self) -> Option<String> {
        let rows: Vec<(usize, Option<HangRow>)> = self
            .ranks
            .iter()
            .map(|r| {
                let row = r.stderr_tail.iter().rev().find_map(|l| parse_row(l));
                (r.rank, row)
            })
            .collect();
        table(&rows, |rank| {
            match self.ranks.iter().find(|o| o.rank == rank) {
                Some(o) if o.stopped.is_some() => "still running when stopped",
                _ => "left no record",
            }
        })
    }
}

/// The table of `rows`, when at least one rank has a row; `missing(rank)`
/// says what became of a rank without one.
pub(crate) fn table(
    rows: &[(usize, Option<HangRow>)],
    missing: impl Fn(usize) -> &'static str,
) -> Option<String> {
    if rows.iter().all(|(_, r)| r.is_none()) {
        return None;
    }
    let mut out = String::from("where every rank was (flight recorder):\n");
    out.push_str(&format!(
        "  {:<5} {:<16} {:<40} {}\n",
        "rank", "last completed", "current call", "waits for"
    ));
    for (rank, row) in rows {
        match row {
            Some(r) => out.push_str(&format!(
                "  {:<5} {:<16} {:<40} {}\n",
                rank, r.last, r.current, r.waits
            )),
            None => out.push_str(&format!("  {rank:<5} {}\n", missing(*rank))),
        }
    }
    Some(out)
}
