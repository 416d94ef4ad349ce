//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong in `trainers`: reading data sets, sampling, building
/// and splitting models, and the libtorch calls underneath.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A data file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// Neither the gzip nor the plain form of a data file exists.
    #[error(
        "no {name}(.gz) in {}: install the Debian package dataset-fashion-mnist, \
         or pass --data DIR naming a folder with MNIST-format (IDX) files",
        dir.display()
    )]
    NotFound {
        /// The folder searched.
        dir: PathBuf,
        /// The file name looked for, without `.gz`.
        name: String,
    },
    /// A `.gz` file is not a valid gzip stream (bad header, corrupt or cut short).
    #[error("{}: not a valid gzip stream: {source}", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// What the decompressor said.
        source: std::io::Error,
    },
    /// An IDX file's content is wrong: bad magic number, wrong dimensions, too short,
    /// extra bytes, or a label out of range.
    #[error("{}: {what}", path.display())]
    Idx {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The image and label files of one split disagree on the number of examples.
    #[error(
        "{} holds {images} images but {} holds {labels} labels",
        images_path.display(),
        labels_path.display()
    )]
    CountMismatch {
        /// The image file.
        images_path: PathBuf,
        /// How many images it holds.
        images: usize,
        /// The label file.
        labels_path: PathBuf,
        /// How many labels it holds.
        labels: usize,
    },
    /// An argument is out of range (a rank not below the world size, an index past the
    /// end of a data set, an empty split list...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A model could not be built or split as asked (unknown or misordered split names).
    #[error("model: {0}")]
    Model(String),
    /// A parameter or result holds NaN or an infinity where a check compares
    /// numbers (see [`crate::parity`]).
    #[error("non-finite value: {0}")]
    NonFinite(String),
    /// A pipeline schedule is incomplete or deadlocks, or a pipeline's result is not
    /// the unsplit model's (`pipeline::plan`, `pipeline::check`).
    #[error("pipeline: {0}")]
    Pipeline(String),
    /// A worker of a parallel trainer (a replica or stage thread, a Hogwild process)
    /// failed: it panicked, died, hung up or did not answer in time.
    #[error("worker: {0}")]
    Worker(String),
    /// The operating system refused a call that has no file to name (shared memory,
    /// sockets, processes): `what` says which call and why it was made.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A checkpoint file is unusable: not our format, corrupt (checksum), truncated,
    /// or not matching the model (a tensor missing, extra, or of another shape/dtype).
    #[error("checkpoint {}: {what}", path.display())]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor where one is at fault.
        what: String,
    },
    /// A collective operation (all_reduce, broadcast, barrier...) failed.
    #[error("collective: {0}")]
    Collective(#[from] collectives::Error),
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// Code plugged into one of this crate's seams failed (a lab's exercise standing
    /// in for one piece of a mechanism, e.g. [`data_parallel::Pieces`] or
    /// `hogwild::Pieces`), or did not do what the seam needs; its own error, shown
    /// as it is.
    ///
    /// [`data_parallel::Pieces`]: crate::data_parallel::Pieces
    #[error(transparent)]
    Seam(Box<dyn std::error::Error + Send + Sync>),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
