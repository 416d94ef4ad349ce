//! Lab 3: Hogwild! — N worker processes train one set of parameters that lives in
//! shared memory, each updating it whenever it likes, without locks.
//!
//! The learner writes three pieces ([`exercise::YourPieces`]); trainers' Hogwild
//! (`trainers::hogwild`) runs them through its [`Pieces`] seam, and its own
//! [`Reference`] pieces are the solution. The self-check is
//! [`hogwild::check_pieces`], the same function trainers' tests run on the
//! reference, for both of PyTorch's sharing strategies.
//!
//! The optional stretch goal, local SGD's delta push, is the learner's
//! `src/stretch.rs`, compiled only by its own check `tests/stretch.rs`;
//! [`delta`] judges it, and its solution is trainers' own
//! [`trainers::hogwild::push_delta`], which the workers call with `--local-steps`.

pub mod delta;
pub mod diagnose;
pub mod exercise;

use std::path::PathBuf;
use std::time::Duration;

use labkit::{LabError, Variant};
use trainers::hogwild::{self, HogwildConfig, Pieces, Reference, Sharing, WorkerProgram};
use trainers::models::Arch;

/// The pieces of `variant`: the learner's, or trainers' own.
pub fn pieces(variant: Variant) -> &'static dyn Pieces {
    match variant {
        Variant::Exercise => &exercise::YourPieces,
        Variant::Solution => &Reference,
    }
}

/// The self-check's run: 2 workers × 40 steps of 32 Fashion-MNIST images on a small
/// MLP, a few seconds in a debug build.
pub fn check_config(data: PathBuf, sharing: Sharing) -> HogwildConfig {
    HogwildConfig {
        workers: 2,
        steps: 40,
        batch: 32,
        lr: 0.1,
        model: Arch::Mlp,
        hidden: vec![64],
        data: Some(data),
        // Only 2,560 are used; a smaller head keeps each worker's copy small.
        samples: 10_000,
        sharing,
        timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

/// The self-check. First each piece alone, in this process, on three numbers
/// ([`diagnose`]): a recognised mistake fails at once, named. Then, for both
/// sharing strategies: the shared parameters train (the test loss falls below
/// 0.7 × its start), and a worker killed with SIGKILL leaves no shared-memory
/// file behind. `launcher` starts the lab's program, which becomes a worker
/// with the same `variant`'s pieces.
pub fn check(
    variant: Variant,
    data: PathBuf,
    launcher: &WorkerProgram,
) -> Result<Vec<String>, LabError> {
    let named = diagnose::diagnose(pieces(variant));
    if !named.is_empty() {
        return Err(LabError::Wrong(format!(
            "a piece does not do what its contract says:{named}"
        )));
    }
    let mut seen = Vec::new();
    for sharing in [Sharing::FileDescriptor, Sharing::FileSystem] {
        let config = check_config(data.clone(), sharing);
        let c =
            hogwild::check_pieces(&config, launcher, pieces(variant)).map_err(LabError::Wrong)?;
        seen.push(format!(
            "{sharing:?}: test loss {:.3} -> {:.3}; {}, nothing left in {}",
            c.loss.0,
            c.loss.1,
            c.killed,
            hogwild::SHM_DIR
        ));
    }
    Ok(seen)
}
