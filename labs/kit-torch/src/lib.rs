//! What the labs that train with libtorch share: a `trainers` error as the
//! lab's, and the data set. A crate of its own rather than a feature of
//! `labkit`: a feature would be on for every lab in a workspace build, and the
//! labs without libtorch would then link it.
#![deny(missing_docs)]

use std::path::Path;

use trainers::data::{self, Dataset, Split};

use labkit::LabError;

/// A trainers error as the lab's. An unsolved TODO travels through a seam as
/// `Error::Seam` holding the [`LabError`] itself, and comes out as it went in,
/// so the learner sees "TODO: …", not a wrapped string.
pub fn lab_error(e: trainers::Error) -> LabError {
    match e {
        trainers::Error::Seam(inner) => match inner.downcast::<LabError>() {
            Ok(lab) => *lab,
            Err(other) => LabError::Wrong(other.to_string()),
        },
        trainers::Error::Collective(e) => LabError::Collective(e),
        other => LabError::Wrong(other.to_string()),
    }
}

/// What thread ranks run under `catch_unwind` gave back: each rank's result,
/// or the error of the first rank that failed, or a panic named as one "in
/// {what}" (e.g. "your gather on 3 ranks").
pub fn rank_results<T>(
    ran: std::thread::Result<collectives::Result<Vec<trainers::Result<T>>>>,
    what: &str,
) -> Result<Vec<T>, LabError> {
    match ran {
        Ok(Ok(outcomes)) => outcomes.into_iter().map(|o| o.map_err(lab_error)).collect(),
        Ok(Err(e)) => Err(LabError::Collective(e)),
        Err(panic) => Err(LabError::Wrong(format!(
            "a rank panicked in {what}: {}",
            labkit::panic_message(&*panic)
        ))),
    }
}

/// Fashion-MNIST's `split` from Debian's `dataset-fashion-mnist`, or an error
/// saying how to get it.
pub fn fashion_mnist(split: Split) -> Result<Dataset, LabError> {
    fashion_mnist_in(Path::new(data::DEFAULT_DIR), split)
}

/// Fashion-MNIST's `split` from `dir` (any MNIST-format IDX files).
pub fn fashion_mnist_in(dir: &Path, split: Split) -> Result<Dataset, LabError> {
    data::load(dir, split).map_err(lab_error)
}
