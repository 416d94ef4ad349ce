//! OpenMPI's `MPI_Allreduce` called bare, with nothing of ringside around it:
//! the call the C peer (`benches/peers/mpi_allreduce.c`) makes, for timing in
//! the same process, iteration by iteration in turn with ringside's own call
//! ([`crate::bench::beside`]). Two programs' runs differ by more than the
//! binding costs (±0.08 µs between runs of the same two programs on the
//! development VM, against a binding of about +0.05 µs), so what the binding
//! adds is only seen sharply from inside one process.
//!
//! No watchdog guards these calls and no lock is taken: they are for a
//! benchmark's single thread (the one that started MPI, which every thread
//! level allows), and a rank that dies ends the job through the launcher.

use std::ffi::c_int;

use mpi::ffi;

use super::MpiComm;
use super::runtime::{check, int, noted};
use crate::bench::BareAllReduce;
use crate::error::{Error, Result};

/// Bare `MPI_Barrier` and `MPI_Allreduce(MPI_IN_PLACE, …, MPI_FLOAT,
/// MPI_SUM)` on a duplicate of `MPI_COMM_WORLD` of its own.
pub struct Bare {
    // Made as every communicator is (duplicate, MPI_ERRORS_RETURN) and freed
    // by its Drop; only its handle is used.
    comm: MpiComm,
    in_place: *const std::ffi::c_void,
}

impl Bare {
    /// Duplicates `MPI_COMM_WORLD` (collective: every rank calls it at the
    /// same point). `MPI_IN_PLACE` must be known for this library, as the C
    /// peer passes it.
    pub fn new(rank: usize, world: usize) -> Result<Bare> {
        let comm = MpiComm::new(rank, world)?;
        let Some(in_place) = comm.in_place() else {
            return Err(Error::InvalidArgument(
                "the bare MPI_Allreduce passes MPI_IN_PLACE, whose address in this MPI library \
                 ringside does not know"
                    .into(),
            ));
        };
        Ok(Bare { comm, in_place })
    }
}

impl BareAllReduce for Bare {
    fn barrier(&mut self) -> Result<()> {
        // SAFETY: a valid communicator handle.
        noted(check(
            unsafe { ffi::MPI_Barrier(self.comm.comm) },
            "MPI_Barrier",
        ))
    }

    fn all_reduce_f32_sum(&mut self, buf: &mut [f32]) -> Result<()> {
        let n: c_int = int(buf.len(), "all_reduce")?;
        // SAFETY: `buf` holds `n` floats; the send buffer is MPI_IN_PLACE.
        let rc = unsafe {
            ffi::MPI_Allreduce(
                self.in_place,
                buf.as_mut_ptr().cast(),
                n,
                ffi::RSMPI_FLOAT,
                ffi::RSMPI_SUM,
                self.comm.comm,
            )
        };
        noted(check(rc, "MPI_Allreduce"))
    }
}
