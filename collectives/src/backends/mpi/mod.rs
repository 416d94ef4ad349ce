//! The MPI backend: the collectives of whatever MPI library the `mpi` crate
//! (rsmpi) links against (OpenMPI 4.1 here).
//!
//! # Starting it
//! Run the program under an MPI launcher (`mpirun -np N`, as root with
//! `--allow-run-as-root --oversubscribe`; or `srun --mpi=pmix`). Run with no
//! launcher, MPI starts as a *singleton* of world 1 (OpenMPI supports this), so
//! `ringside conformance --backend mpi --nproc 1` works without `mpirun`. Ranks
//! that ringside spawns itself (`--nproc 2` without a launcher) are each an MPI
//! world of one: [`connect`] notices that MPI's rank and world size disagree
//! with ringside's and returns [`Error::Rendezvous`] instead of running a
//! collective that could never complete.
//!
//! MPI can be initialised only once per process, so the first [`connect`]
//! initialises it (asking for `MPI_THREAD_MULTIPLE`, or the level
//! [`THREAD_LEVEL_VAR`] names: OpenMPI 4.1 locks inside every call above
//! `single`) and keeps rsmpi's
//! `Universe` in a process-wide slot; MPI is finalised when the process exits.
//! Every communicator is its own `MPI_Comm_dup` of `MPI_COMM_WORLD`, so several
//! can exist and their messages never mix. The store is not used: MPI has its
//! own rendezvous.
//!
//! # Semantics
//! - In-place forms use `MPI_IN_PLACE` (for a library whose `MPI_IN_PLACE` we do
//!   not know, or with `RINGSIDE_MPI_NO_IN_PLACE` set, a copy of the input
//!   stands in for it).
//! - `Avg` is `MPI_SUM` followed by [`finish_avg`].
//! - float16 and bfloat16 have no standard MPI type: they travel as a committed
//!   2-byte contiguous type, and reductions on them use user-defined,
//!   commutative `MPI_Op`s that call [`crate::element::reduce_into`], so each pairwise
//!   reduction rounds exactly as the reference backend's does.
//! - Communicators use `MPI_ERRORS_RETURN`: an MPI failure comes back as an
//!   [`Error::Protocol`] carrying MPI's own error string, not an abort.
//! - MPI calls cannot be interrupted, so [`Options::timeout`] is kept by a
//!   watchdog thread, as NCCL's async error handling does: a call that waits
//!   longer prints an error naming the call, its size and the timeout on the
//!   waiting rank, then ends the whole job with `MPI_Abort` (exit code 124). A
//!   rank that dies is noticed by the launcher, which ends the job.
//!
//! # What a call costs
//! A small call's way to the library is a few loads and stores: the datatype
//! and op come from tables made when MPI starts, the thread-level check and the
//! watch are inline, and every error is built out of line. That work weighs
//! more than its instructions suggest. On the 2-core EPYC VM (2026-11-29,
//! `ringside sweep --backend mpi --beside-bare -b 8 -e 8`, launches in turn
//! with the build before, c50ac63, whose lookups were `match`es compiled to
//! indirect jumps and whose thread-level check and input check were calls):
//! with one rank, where the library returns at once, ringside's call was
//! 0.018 µs over the bare `MPI_Allreduce` by mean against 0.027 (5 launches
//! each, `-n 2000000`); at world 2, 0.030 µs (0.021–0.040) against 0.055
//! (0.040–0.071), medians of 12 launches each (`-n 200000`).

use std::ffi::{c_int, c_void};

use mpi::ffi;

use super::checks::{self, blocked_count, gather_count, input_bytes, per_rank};
use crate::backends::Options;
use crate::buffer::{Buffer, BufferMut};
use crate::copy::copy;
use crate::element::{ReduceOp, finish_avg};
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::{Backend, Communicator, Input};

mod bare;
mod runtime;
mod watchdog;

pub use bare::Bare;

use runtime::*;

const B: Backend = Backend::Mpi;

/// Set (to anything) to pass in-place inputs as copies instead of with
/// `MPI_IN_PLACE`, as for an MPI library whose `MPI_IN_PLACE` we do not know.
pub const NO_IN_PLACE_VAR: &str = "RINGSIDE_MPI_NO_IN_PLACE";

pub use super::MPI_THREAD_LEVEL_VAR as THREAD_LEVEL_VAR;

/// The tag of every point-to-point message: ordering between one pair of ranks
/// on one communicator is what matches sends to receives, as in the reference.
const TAG: c_int = 0;

/// Connects an MPI communicator. `rank` and `world` (from ringside's launcher
/// discovery) must match what MPI says; the store and options are not used.
pub fn connect(
    _store: &dyn Store,
    rank: usize,
    world: usize,
    opts: &Options,
) -> Result<Box<dyn Communicator>> {
    let mut comm = MpiComm::new(rank, world)?;
    comm.set_timeout(opts.timeout);
    Ok(Box::new(comm))
}

/// A communicator over a private duplicate of `MPI_COMM_WORLD`.
pub struct MpiComm {
    comm: ffi::MPI_Comm,
    rank: usize,
    world: usize,
    rt: &'static Runtime,
    /// How long one call may take before the watchdog aborts the job, in
    /// watchdog ticks, worked out once ([`MpiComm::set_timeout`]).
    timeout_ticks: u64,
}

// SAFETY: MPI runs at MPI_THREAD_MULTIPLE, or every call holds the runtime's
// lock, so the communicator handle may be used from whichever thread owns the
// communicator. It is not Sync: one communicator is not shared between threads.
unsafe impl Send for MpiComm {}

impl MpiComm {
    /// Initialises MPI if this is the first communicator, checks that MPI's
    /// rank and world size are `rank` and `world`, and duplicates `MPI_COMM_WORLD`.
    /// Every rank must create its communicators in the same order (MPI_Comm_dup
    /// is collective).
    pub fn new(rank: usize, world: usize) -> Result<MpiComm> {
        let rt = runtime()?;
        watchdog::start();
        if (rt.world_rank, rt.world_size) != (rank, world) {
            return Err(Error::Rendezvous(format!(
                "MPI says this process is rank {} of {}, but ringside's launcher discovery says \
                 rank {rank} of {world}: start every rank with one MPI launcher (mpirun -np {world} \
                 or srun) and do not mix launchers; ranks spawned by ringside itself (--nproc) are \
                 separate MPI worlds of 1",
                rt.world_rank, rt.world_size
            )));
        }
        let _g = rt.lock()?;
        // SAFETY: MPI is initialised; `comm` is a valid out-pointer.
        let comm = unsafe {
            let mut comm = ffi::RSMPI_COMM_NULL;
            check(
                ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut comm),
                "MPI_Comm_dup",
            )?;
            let set = ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN);
            if let Err(e) = check(set, "MPI_Comm_set_errhandler") {
                ffi::MPI_Comm_free(&mut comm);
                return Err(e);
            }
            comm
        };
        Ok(MpiComm {
            comm,
            rank,
            world,
            rt,
            // `connect` sets the job's; until then, `Options::new`'s default.
            timeout_ticks: watchdog::ticks_of(crate::backends::DEFAULT_TIMEOUT),
        })
    }

    /// How long one call may take before the watchdog aborts the job.
    pub(super) fn set_timeout(&mut self, timeout: std::time::Duration) {
        self.timeout_ticks = watchdog::ticks_of(timeout);
    }

    /// The MPI library's own description (`MPI_Get_library_version`).
    pub fn library_version(&self) -> String {
        library_version()
    }

    /// Runs one MPI call of `bytes` bytes under the runtime's lock (if any) and the
    /// watchdog, and checks its code.
    /// `what` is a reference to a literal (`&"MPI_Bcast"`): one word for the
    /// watchdog to keep.
    #[inline]
    fn call(
        &self,
        what: &'static &'static str,
        bytes: usize,
        f: impl FnOnce() -> c_int,
    ) -> Result<()> {
        let _g = self.rt.lock()?;
        let _watched = watchdog::watch(what, bytes, self.rank, self.timeout_ticks);
        check(f(), what)
    }

    fn check_root(&self, root: usize) -> Result<c_int> {
        checks::check_root(root, self.world)?;
        int(root, "root")
    }

    /// `MPI_IN_PLACE`, if we know its address in this library.
    fn in_place(&self) -> Option<*const c_void> {
        self.rt.in_place.map(|a| a as *const c_void)
    }

    /// The send argument of an in-place call: `MPI_IN_PLACE`, or a copy of
    /// `data` kept alive in `copy`.
    fn in_place_send(&self, data: &[u8], copy: &mut Vec<u8>) -> *const c_void {
        match self.in_place() {
            Some(p) => p,
            None => {
                *copy = data.to_vec();
                cptr(copy)
            }
        }
    }
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        if finalized() {
            return;
        }
        // Dropped on a thread the thread level rules out, the handle is left
        // to MPI_Finalize rather than freed from the wrong thread.
        if let Ok(_g) = self.rt.lock() {
            // SAFETY: `comm` came from MPI_Comm_dup and is freed only here.
            unsafe { ffi::MPI_Comm_free(&mut self.comm) };
        }
    }
}

impl Communicator for MpiComm {
    fn backend(&self) -> Backend {
        B
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce(&self, input: Input<'_>, output: &mut BufferMut<'_>, op: ReduceOp) -> Result<()> {
        noted((|| -> Result<()> {
            let (dtype, count) = (output.dtype(), output.len());
            let src = input_bytes(B, &input, dtype, count, "all_reduce")?;
            let (dt, mop, n) = (
                self.rt.datatype(dtype),
                self.rt.op(dtype, op),
                int(count, "all_reduce")?,
            );
            let out = output.host_bytes_mut(B)?;
            let mut copy = Vec::new();
            let send = match src {
                Some(s) => cptr(s),
                None => self.in_place_send(out, &mut copy),
            };
            let recv = mptr(out);
            // SAFETY: `send` and `recv` hold `count` elements of `dt` (or are MPI_IN_PLACE).
            self.call(&"MPI_Allreduce", count * dtype.size(), || unsafe {
                ffi::MPI_Allreduce(send, recv, n, dt, mop, self.comm)
            })?;
            if op == ReduceOp::Avg {
                finish_avg(dtype, out, self.world);
            }
            Ok(())
        })())
    }

    fn broadcast(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        noted((|| -> Result<()> {
            let r = self.check_root(root)?;
            let (dtype, count) = (output.dtype(), output.len());
            let src = if self.rank == root {
                input_bytes(B, &input, dtype, count, "broadcast")?
            } else {
                None
            };
            let (dt, n) = (self.rt.datatype(dtype), int(count, "broadcast")?);
            let out = output.host_bytes_mut(B)?;
            if let Some(s) = src {
                copy(out, s);
            }
            let buf = mptr(out);
            // SAFETY: `buf` holds `count` elements of `dt`.
            self.call(&"MPI_Bcast", count * dtype.size(), || unsafe {
                ffi::MPI_Bcast(buf, n, dt, r, self.comm)
            })
        })())
    }

    fn reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        noted((|| -> Result<()> {
            let r = self.check_root(root)?;
            let me = self.rank;
            let dtype = output.dtype();
            let count = match &input {
                Input::Buffer(b) => b.len(),
                Input::InPlace => output.len(),
            };
            if me == root && output.len() != count {
                return Err(Error::InvalidArgument(format!(
                    "reduce: root output has {} elements, input {count}",
                    output.len()
                )));
            }
            let src = input_bytes(B, &input, dtype, count, "reduce")?;
            let (dt, mop, n) = (
                self.rt.datatype(dtype),
                self.rt.op(dtype, op),
                int(count, "reduce")?,
            );
            let out = output.host_bytes_mut(B)?;
            let mut copy = Vec::new();
            let (send, recv) = match (me == root, src) {
                (true, Some(s)) => (cptr(s), mptr(out)),
                (true, None) => (self.in_place_send(out, &mut copy), mptr(out)),
                // Non-roots: the receive buffer is not used, and in place the
                // input is the output, which MPI leaves unchanged.
                (false, Some(s)) => (cptr(s), mptr(&mut [])),
                (false, None) => (cptr(out), mptr(&mut [])),
            };
            // SAFETY: `send` holds `count` elements of `dt` (or is MPI_IN_PLACE at
            // the root); `recv` holds `count` at the root and is ignored elsewhere.
            self.call(&"MPI_Reduce", count * dtype.size(), || unsafe {
                ffi::MPI_Reduce(send, recv, n, dt, mop, r, self.comm)
            })?;
            if me == root && op == ReduceOp::Avg {
                finish_avg(dtype, out, self.world);
            }
            Ok(())
        })())
    }

    fn all_gather(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        noted((|| -> Result<()> {
            let (nr, me) = (self.world, self.rank);
            let dtype = output.dtype();
            let count = per_rank(output.len(), nr, "all_gather output")?;
            let src = input_bytes(B, &input, dtype, count, "all_gather")?;
            let (dt, n) = (self.rt.datatype(dtype), int(count, "all_gather")?);
            let out = output.host_bytes_mut(B)?;
            let block = count * dtype.size();
            let mut copy = Vec::new();
            let send = match src {
                Some(s) => cptr(s),
                None => self.in_place_send(&out[me * block..][..block], &mut copy),
            };
            let recv = mptr(out);
            // SAFETY: `send` holds `count` elements (or is MPI_IN_PLACE), `recv` world·count.
            self.call(&"MPI_Allgather", nr * count * dtype.size(), || unsafe {
                ffi::MPI_Allgather(send, n, dt, recv, n, dt, self.comm)
            })
        })())
    }

    fn reduce_scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> Result<()> {
        noted((|| -> Result<()> {
            let (nr, me) = (self.world, self.rank);
            let dtype = output.dtype();
            let count = blocked_count(&input, output.len(), nr, "reduce_scatter")?;
            let src = input_bytes(B, &input, dtype, nr * count, "reduce_scatter")?;
            let (dt, mop, n) = (
                self.rt.datatype(dtype),
                self.rt.op(dtype, op),
                int(count, "reduce_scatter")?,
            );
            let out = output.host_bytes_mut(B)?;
            let block = count * dtype.size();
            let mine = match (src, self.in_place()) {
                (Some(s), _) => {
                    let (send, recv) = (cptr(s), mptr(out));
                    // SAFETY: `send` holds world·count elements of `dt`, `recv` count.
                    self.call(
                        &"MPI_Reduce_scatter_block",
                        nr * count * dtype.size(),
                        || unsafe {
                            ffi::MPI_Reduce_scatter_block(send, recv, n, dt, mop, self.comm)
                        },
                    )?;
                    &mut out[..]
                }
                (None, Some(in_place)) => {
                    let recv = mptr(out);
                    // SAFETY: `recv` holds world·count elements of `dt`.
                    self.call(
                        &"MPI_Reduce_scatter_block",
                        nr * count * dtype.size(),
                        || unsafe {
                            ffi::MPI_Reduce_scatter_block(in_place, recv, n, dt, mop, self.comm)
                        },
                    )?;
                    // MPI leaves the result at the start of the buffer; ours goes
                    // in the caller's own block.
                    out.copy_within(..block, me * block);
                    &mut out[me * block..][..block]
                }
                (None, None) => {
                    let copy = out.to_vec();
                    let mine = &mut out[me * block..][..block];
                    let (send, recv) = (cptr(&copy), mptr(mine));
                    // SAFETY: `send` holds world·count elements of `dt`, `recv` count.
                    self.call(
                        &"MPI_Reduce_scatter_block",
                        nr * count * dtype.size(),
                        || unsafe {
                            ffi::MPI_Reduce_scatter_block(send, recv, n, dt, mop, self.comm)
                        },
                    )?;
                    mine
                }
            };
            if op == ReduceOp::Avg {
                finish_avg(dtype, mine, nr);
            }
            Ok(())
        })())
    }

    fn all_to_all(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        noted((|| -> Result<()> {
            let nr = self.world;
            let dtype = output.dtype();
            let count = per_rank(output.len(), nr, "all_to_all output")?;
            let src = input_bytes(B, &input, dtype, nr * count, "all_to_all")?;
            let (dt, n) = (self.rt.datatype(dtype), int(count, "all_to_all")?);
            let out = output.host_bytes_mut(B)?;
            let mut copy = Vec::new();
            let send = match src {
                Some(s) => cptr(s),
                None => self.in_place_send(out, &mut copy),
            };
            let recv = mptr(out);
            // SAFETY: `send` and `recv` hold world·count elements of `dt` (or send is MPI_IN_PLACE).
            self.call(&"MPI_Alltoall", nr * count * dtype.size(), || unsafe {
                ffi::MPI_Alltoall(send, n, dt, recv, n, dt, self.comm)
            })
        })())
    }

    fn gather(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        noted((|| -> Result<()> {
            let r = self.check_root(root)?;
            let (nr, me) = (self.world, self.rank);
            let dtype = output.dtype();
            let count = gather_count(&input, output.len(), nr, me == root)?;
            let src = input_bytes(B, &input, dtype, count, "gather")?;
            let (dt, n) = (self.rt.datatype(dtype), int(count, "gather")?);
            let out = output.host_bytes_mut(B)?;
            let block = count * dtype.size();
            let mut copy = Vec::new();
            let (send, recv) = match (me == root, src) {
                (true, Some(s)) => (cptr(s), mptr(out)),
                (true, None) => (
                    self.in_place_send(&out[me * block..][..block], &mut copy),
                    mptr(out),
                ),
                (false, Some(s)) => (cptr(s), mptr(&mut [])),
                (false, None) => (cptr(&out[me * block..][..block]), mptr(&mut [])),
            };
            // SAFETY: `send` holds `count` elements of `dt` (or is MPI_IN_PLACE at
            // the root); `recv` holds world·count at the root and is ignored elsewhere.
            self.call(&"MPI_Gather", count * dtype.size(), || unsafe {
                ffi::MPI_Gather(send, n, dt, recv, n, dt, r, self.comm)
            })
        })())
    }

    fn scatter(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        noted((|| -> Result<()> {
            let r = self.check_root(root)?;
            let (nr, me) = (self.world, self.rank);
            let dtype = output.dtype();
            let count = blocked_count(&input, output.len(), nr, "scatter")?;
            let src = if me == root {
                input_bytes(B, &input, dtype, nr * count, "scatter")?
            } else {
                None
            };
            let (dt, n) = (self.rt.datatype(dtype), int(count, "scatter")?);
            let out = output.host_bytes_mut(B)?;
            let block = count * dtype.size();
            let mut discard = Vec::new();
            let (send, recv) = match (me == root, &input, src) {
                (true, _, Some(s)) => (cptr(s), mptr(out)),
                // The root's own block is already where the result belongs.
                (true, _, None) => match self.in_place() {
                    Some(p) => (cptr(out), p.cast_mut()),
                    None => {
                        discard.resize(block, 0);
                        (cptr(out), mptr(&mut discard))
                    }
                },
                (false, Input::InPlace, _) => (cptr(&[]), mptr(&mut out[me * block..][..block])),
                (false, _, _) => (cptr(&[]), mptr(out)),
            };
            // SAFETY: at the root `send` holds world·count elements of `dt`; `recv`
            // holds `count` (or is MPI_IN_PLACE at the root).
            self.call(&"MPI_Scatter", count * dtype.size(), || unsafe {
                ffi::MPI_Scatter(send, n, dt, recv, n, dt, r, self.comm)
            })
        })())
    }

    fn barrier(&self) -> Result<()> {
        // SAFETY: a plain collective on our communicator.
        noted(self.call(&"MPI_Barrier", 0, || unsafe { ffi::MPI_Barrier(self.comm) }))
    }

    fn send(&self, buf: &Buffer<'_>, peer: usize) -> Result<()> {
        noted((|| -> Result<()> {
            let p = self.check_peer(peer)?;
            let (dt, n) = (self.rt.datatype(buf.dtype()), int(buf.len(), "send")?);
            let data = cptr(buf.host_bytes(B)?);
            // SAFETY: `data` holds `n` elements of `dt`.
            self.call(&"MPI_Send", n as usize * buf.dtype().size(), || unsafe {
                ffi::MPI_Send(data, n, dt, p, TAG, self.comm)
            })
        })())
    }

    fn recv(&self, buf: &mut BufferMut<'_>, peer: usize) -> Result<()> {
        noted((|| -> Result<()> {
            let p = self.check_peer(peer)?;
            let dtype = buf.dtype();
            let (dt, n) = (self.rt.datatype(dtype), int(buf.len(), "recv")?);
            let data = mptr(buf.host_bytes_mut(B)?);
            // SAFETY: MPI_Status is plain data; MPI fills it in.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            // SAFETY: `data` holds `n` elements of `dt`; a longer message is an
            // MPI_ERR_TRUNCATE error, not an overrun.
            self.call(&"MPI_Recv", n as usize * dtype.size(), || unsafe {
                ffi::MPI_Recv(data, n, dt, p, TAG, self.comm, &mut status)
            })?;
            let mut got: c_int = 0;
            // SAFETY: `status` was filled in by MPI_Recv.
            self.call(&"MPI_Get_count", 0, || unsafe {
                ffi::MPI_Get_count(&status, dt, &mut got)
            })?;
            if got != n {
                return Err(Error::Mismatch(format!(
                    "recv from rank {peer}: expected {n} {dtype} elements, the send had {got}"
                )));
            }
            Ok(())
        })())
    }
}

impl MpiComm {
    fn check_peer(&self, peer: usize) -> Result<c_int> {
        if peer >= self.world || peer == self.rank {
            return Err(Error::InvalidArgument(format!(
                "peer {peer} is not another rank of this world of {}",
                self.world
            )));
        }
        int(peer, "peer")
    }
}

#[cfg(test)]
mod tests;
