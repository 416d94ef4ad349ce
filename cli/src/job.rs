//! Shared start-up for subcommands that run as ranks. The job flags and the
//! start-up itself live in `collectives::job` (shared with ringside-train and
//! the labs); what is left here is the sizes the measuring subcommands take and
//! connecting the backends bench and tour visit one after another.

use std::time::Duration;

use collectives::algorithms::Algo;
use collectives::rendezvous::env::Rendezvous;
use collectives::transport::TransportKind;
use collectives::{Backend, Communicator};

pub use collectives::job::{JobArgs, Joined};

/// Parses `8`, `4K`, `1M`, `64MiB`, `1G` into bytes (powers of 1024, as
/// nccl-tests; the one size syntax is `measure::size::parse_size`).
pub fn parse_size(s: &str) -> Result<usize, String> {
    measure::size::parse_size(s)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is not a size (examples: 8, 4K, 1M, 64MiB)"))
}

/// Connects one of the backends a subcommand visits in turn (bench, tour), or
/// says in one line why this job cannot have it. `relaunch` follows a
/// missing-launcher reason and tells how to start a job that can.
pub fn connect_one(
    rdv: &Rendezvous,
    backend: Backend,
    transport: TransportKind,
    algo: Algo,
    timeout: Duration,
    prefix: &str,
    relaunch: &str,
) -> Result<Box<dyn Communicator>, String> {
    if let Some(why) = backend.launcher_problem(rdv.info.launcher) {
        return Err(format!("{why}{relaunch}"));
    }
    collectives::job::connect(rdv, backend, transport, algo, timeout, prefix).map_err(|e| {
        // The chain's last line is the cause a reader can act on.
        format!("{:#}", anyhow::Error::new(e))
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned()
    })
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
        assert_eq!(err, "\"lots\" is not a size (examples: 8, 4K, 1M, 64MiB)");
    }
}
