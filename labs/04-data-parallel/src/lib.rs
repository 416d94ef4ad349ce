//! Lab 4: DataParallel. The learner writes the five pieces of a data-parallel
//! step ([`exercise::YourPieces`]); they plug into trainers' real `DataParallel`
//! through its seam, [`trainers::data_parallel::Pieces`], whose [`Standard`]
//! implementation is the reference solution. The self-check is trainers' own equivalence check
//! ([`trainers::data_parallel::check::equivalence`]) on Fashion-MNIST.
//!
//! The optional stretch goal, gradient accumulation over micro-batches, is
//! the learner's `src/stretch.rs`, compiled only by its own check
//! `tests/stretch.rs`; [`accumulate`] judges it against the whole-batch step,
//! and [`solution::accumulated_step`] is its solution.

#![deny(missing_docs)]

pub mod accumulate;
pub mod diagnose;
pub mod exercise;
pub mod solution;

pub use labkit_torch::{fashion_mnist_in as fashion_mnist, lab_error};

use labkit::{LabError, Variant};
use tch::{Cuda, Device};
use trainers::data::{self, Split};
use trainers::data_parallel::check::{self, CheckError};
use trainers::data_parallel::{Pieces, Replication, Standard};

/// The pieces of `variant`: the learner's, or trainers' own.
pub fn pieces(variant: Variant) -> Box<dyn Pieces> {
    match variant {
        Variant::Exercise => Box::new(exercise::YourPieces),
        Variant::Solution => Box::new(Standard),
    }
}

/// The self-check. First [`diagnose`] calls the pieces one by one on a few
/// numbers: a recognised mistake fails at once, named. Then trainers'
/// equivalence check, on the pieces of `variant`, over
/// 2 and 3 CPU replicas with batches that split evenly and unevenly, a batch
/// smaller than the replica count, both replications, and the GPUs when there are
/// any: 10 SGD steps each, every one within max |Δparam| ≤ 1e-6 of the one-device
/// step from the same parameters, then the same outputs in inference.
///
/// The model is trainers' smooth check model (`flatten, fc 784→32, tanh, fc`):
/// with ReLU a sample whose pre-activation lies within rounding of 0 may take the
/// other branch on a replica (which multiplies fewer rows, so rounds differently),
/// and a bound that holds on every CPU would have to be loose.
pub fn check(variant: Variant) -> Result<(), LabError> {
    let named = diagnose::diagnose(pieces(variant).as_ref());
    if !named.is_empty() {
        return Err(LabError::Wrong(format!(
            "a piece does not do what its contract says:{named}"
        )));
    }
    let data = fashion_mnist(std::path::Path::new(data::DEFAULT_DIR), Split::Test)?;
    let cpu = Device::Cpu;
    let mut cases: Vec<(Vec<Device>, Replication, usize)> = vec![
        (vec![cpu; 2], Replication::Copy, 30),
        (vec![cpu; 3], Replication::Copy, 31),
        (vec![cpu; 3], Replication::Copy, 2),
        (vec![cpu; 2], Replication::Share, 31),
    ];
    let gpus = if Cuda::is_available() {
        Cuda::device_count()
    } else {
        0
    };
    if gpus > 0 {
        // Two replicas on one GPU still copy, scatter and gather through it.
        let devices = if gpus == 1 {
            vec![Device::Cuda(0); 2]
        } else {
            (0..gpus as usize).map(Device::Cuda).collect()
        };
        cases.push((devices, Replication::Copy, 30));
    } else {
        collectives::testing::skip(
            "lab 4's GPU case",
            "no CUDA device (tch::Cuda::is_available() is false); CPU replicas only",
        );
    }
    for (devices, replication, batch) in cases {
        let verdict = check::equivalence(
            check::smooth_mlp,
            pieces(variant),
            &devices,
            replication,
            &data,
            batch,
            1e-6,
        );
        match verdict {
            Ok(_) => {}
            Err(CheckError::Failed(e)) => return Err(lab_error(e)),
            Err(e @ CheckError::Differs(_)) => {
                return Err(LabError::Wrong(format!(
                    "{e} — not the one-device step (over {devices:?})"
                )));
            }
        }
    }
    Ok(())
}
