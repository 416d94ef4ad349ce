//! OpenMPI's `MPI_Allreduce` called bare, with nothing of ringside around it:
//! the call the C peer (`benches/peers/mpi_allreduce.c`) makes, for timing in
//! the same process, iteration by iteration in turn with ringside's own call
//! ([`crate::bench::all_reduce_f32_beside`]). Two programs' runs differ by
//! more than the binding costs (a tenth of a µs either way between runs of the
//! same two programs on the development VM, against a binding of a few
//! hundredths), so what the binding adds is only seen sharply from inside one
//! process.
//!
//! The timed call takes no lock and arms nothing: it is for a benchmark's
//! single thread (the one that started MPI, which every thread level allows).
//! The job's timeout still holds: the untimed barrier before each call arms
//! the backend's watchdog for the barrier and the call, so a frozen or lost
//! peer ends the job with `MPI_Abort` as it would in ringside's own calls.

use std::ffi::c_int;
use std::time::Duration;

use mpi::ffi;

use super::MpiComm;
use super::runtime::{check, int, noted};
use super::watchdog::{self, Watched};
use crate::bench::BareAllReduce;
use crate::element::DType;
use crate::error::{Error, Result};

/// Bare `MPI_Barrier` and `MPI_Allreduce(MPI_IN_PLACE, …, MPI_FLOAT,
/// MPI_SUM)` on a duplicate of `MPI_COMM_WORLD` of its own.
pub struct Bare {
    // Made as every communicator is (duplicate, MPI_ERRORS_RETURN) and freed
    // by its Drop; only its handle is used.
    comm: MpiComm,
    in_place: *const std::ffi::c_void,
    /// The watch the last barrier armed: until the next barrier, or until a
    /// ringside call on this thread takes the thread's watch slot over (each
    /// of which arms its own), or until this is dropped.
    watched: Option<Watched>,
}

impl Bare {
    /// Duplicates `MPI_COMM_WORLD` (collective: every rank calls it at the
    /// same point). A barrier and the call after it may wait `timeout`
    /// before the job is aborted. `MPI_IN_PLACE` must be known for this
    /// library, as the C peer passes it.
    pub fn new(rank: usize, world: usize, timeout: Duration) -> Result<Bare> {
        let mut comm = MpiComm::new(rank, world)?;
        comm.set_timeout(timeout);
        let Some(in_place) = comm.in_place() else {
            return Err(Error::InvalidArgument(
                "the bare MPI_Allreduce passes MPI_IN_PLACE, whose address in this MPI library \
                 ringside does not know"
                    .into(),
            ));
        };
        Ok(Bare {
            comm,
            in_place,
            watched: None,
        })
    }
}

impl BareAllReduce for Bare {
    fn barrier(&mut self, count: usize) -> Result<()> {
        // The old watch ends before the new one starts: both use this
        // thread's slot.
        self.watched = None;
        self.watched = Some(watchdog::watch(
            &"MPI_Barrier and the bare MPI_Allreduce after it",
            count * DType::F32.size(),
            self.comm.rank,
            self.comm.timeout_ticks,
        ));
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
