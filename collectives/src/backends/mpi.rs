//! The mpi backend (being written; compiled only with the `mpi` feature).
