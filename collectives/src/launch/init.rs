//! [`init`], the `mp.spawn`-style entry point: a program run plainly with
//! `--nproc N` re-runs itself as N ranks; run by a launcher it is a rank.

use super::{LaunchReport, LaunchSpec, spawn};
use crate::error::{Error, Result};
use crate::rendezvous::env::{Overrides, RankInfo};

/// Set in the ranks [`init`] starts as copies of the program: their parent is
/// the same program with the same flags, and runs what a job runs once per
/// host beside its ranks (`--load N`'s busy loops, [`super::Load`]).
pub const SELF_LAUNCHED: &str = "RINGSIDE_SELF_LAUNCHED";

/// What [`init`] made of this process.
#[derive(Debug)]
pub enum Role {
    /// Run as this rank.
    Rank(RankInfo),
    /// This process launched the ranks (copies of itself), which have all
    /// ended; exit with `report.exit_code()`.
    Launcher(LaunchReport),
}

/// The `mp.spawn`-style entry point for programs:
/// - started by a launcher (ringside, torchrun, mpirun, srun — see
///   [`crate::rendezvous::env`]) → [`Role::Rank`] from the environment;
/// - else with `nproc > 1` → runs `nproc` copies of this executable with the
///   same arguments under [`super::spawn`] and returns [`Role::Launcher`];
/// - else → [`Role::Rank`], rank 0 of a world of one.
///
/// Call [`super::install_interrupt_handler`] before `init` so Ctrl-C stops the
/// copies cleanly; ranks are unaffected by it.
pub fn init(nproc: Option<usize>) -> Result<Role> {
    if RankInfo::launched_from_env()? {
        return Ok(Role::Rank(RankInfo::from_env(&Overrides::default())?));
    }
    match nproc {
        Some(0) => Err(Error::InvalidArgument(
            "the number of processes must be at least 1".into(),
        )),
        Some(n) if n > 1 => {
            let exe = std::env::current_exe()
                .map_err(|e| Error::io("finding this program's executable to re-run it", e))?;
            let mut spec = LaunchSpec::new(exe, std::env::args_os().skip(1), n);
            spec.env.push((SELF_LAUNCHED.into(), "1".into()));
            Ok(Role::Launcher(spawn(&spec)?))
        }
        _ => Ok(Role::Rank(RankInfo::from_env(&Overrides::default())?)),
    }
}
