//! Shared start-up for subcommands that run as ranks. The job flags and the
//! start-up itself live in `collectives::job` (shared with ringside-train and
//! the labs); what is left here is the sizes the measuring subcommands take and
//! connecting the backends bench and tour visit one after another.

use collectives::Backend;
use collectives::job::JoinError;
use collectives::rendezvous::env::Rendezvous;

pub use collectives::job::{JobArgs, Joined};

/// Parses `8`, `4K`, `1M`, `64MiB`, `1G` into bytes (powers of 1024, as
/// nccl-tests; the one size syntax is `measure::size::parse_size`).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let n = measure::size::parse_size(s).map_err(|e| {
        format!(
            "{s:?} is not a size: {} (examples: 8, 4K, 1M, 64MiB)",
            e.why
        )
    })?;
    usize::try_from(n).map_err(|_| format!("{s:?} is not a size: number too large"))
}

/// Says why this job cannot run `backend` when it needs a launcher the job
/// was not started under; `relaunch` follows the reason and tells how to start
/// a job that can. bench and tour visit several backends and skip such a one.
pub fn launcher_ok(rdv: &Rendezvous, backend: Backend, relaunch: &str) -> Result<(), String> {
    match backend.launcher_problem(rdv.info.launcher) {
        Some(why) => Err(format!("{why}{relaunch}")),
        None => Ok(()),
    }
}

/// A failed connect in one line: the chain's last line is the cause a reader
/// can act on (bench and tour print it in a table row).
pub fn last_line(e: JoinError) -> String {
    format!("{:#}", anyhow::Error::new(e))
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        let err = parse_size("lots").unwrap_err();
        assert_eq!(
            err,
            "\"lots\" is not a size: expected digits with an optional K/M/G suffix \
             (examples: 8, 4K, 1M, 64MiB)"
        );
    }
}
