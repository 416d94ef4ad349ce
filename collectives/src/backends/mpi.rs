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
//! initialises it (asking for `MPI_THREAD_MULTIPLE`) and keeps rsmpi's
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
//!   commutative `MPI_Op`s that call [`reduce_into`], so each pairwise
//!   reduction rounds exactly as the reference backend's does.
//! - Communicators use `MPI_ERRORS_RETURN`: an MPI failure comes back as an
//!   [`Error::Protocol`] carrying MPI's own error string, not an abort.
//! - Waits are bounded by MPI, not by [`Options::timeout`]: MPI collectives have
//!   no timeout. A rank that dies is noticed by the launcher, which ends the job.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use mpi::Threading;
use mpi::environment::Universe;
use mpi::ffi;

use super::args::{self, blocked_count, gather_count, input_bytes, per_rank};
use crate::backends::Options;
use crate::buffer::{Buffer, BufferMut};
use crate::element::{DType, ReduceOp, finish_avg, reduce_into};
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::{Backend, Communicator, Input};

const B: Backend = Backend::Mpi;

/// Set (to anything) to pass in-place inputs as copies instead of with
/// `MPI_IN_PLACE`, as for an MPI library whose `MPI_IN_PLACE` we do not know.
pub const NO_IN_PLACE_VAR: &str = "RINGSIDE_MPI_NO_IN_PLACE";

/// The tag of every point-to-point message: ordering between one pair of ranks
/// on one communicator is what matches sends to receives, as in the reference.
const TAG: c_int = 0;

/// Connects an MPI communicator. `rank` and `world` (from ringside's launcher
/// discovery) must match what MPI says; the store and options are not used.
pub fn connect(
    _store: &dyn Store,
    rank: usize,
    world: usize,
    _opts: &Options,
) -> Result<Box<dyn Communicator>> {
    Ok(Box::new(MpiComm::new(rank, world)?))
}

/// rsmpi's handle on the MPI environment; dropping it finalises MPI. Kept here
/// (not in a communicator) because MPI cannot be initialised a second time.
static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

/// Process-wide MPI state, built by the first [`connect`].
static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// Zero-length buffers are passed as a pointer to this: an empty Rust slice of
/// bytes points at address 1, which is OpenMPI's `MPI_IN_PLACE`.
static EMPTY: AtomicU64 = AtomicU64::new(0);

/// Set when a call failed on this rank. `MPI_Finalize` waits for every rank
/// (OpenMPI fences), so a rank that failed alone would hang at exit while its
/// peers wait in a collective for it; instead it exits without finalising,
/// and the launcher ends the whole job.
static FAILED: AtomicBool = AtomicBool::new(false);

/// Records a failure (see [`FAILED`]). `Unsupported` is not one: it is
/// returned identically on every rank before anything is sent.
fn noted(r: Result<()>) -> Result<()> {
    if let Err(e) = &r {
        if !matches!(e, Error::Unsupported { .. }) {
            FAILED.store(true, Ordering::SeqCst);
        }
    }
    r
}

struct Runtime {
    /// The address `MPI_IN_PLACE` has in this library (a macro, so bindgen
    /// cannot see it), or `None` when we do not know the library.
    in_place: Option<usize>,
    /// Held around every MPI call when the library gave us less than
    /// `MPI_THREAD_MULTIPLE`.
    serial: Option<Mutex<()>>,
    /// float16 and bfloat16: 2-byte contiguous types.
    half: [ffi::MPI_Datatype; 2],
    /// User ops for [`Runtime::half`], indexed [dtype][Sum, Prod, Min, Max].
    half_ops: [[ffi::MPI_Op; 4]; 2],
    world_rank: usize,
    world_size: usize,
}

// SAFETY: the handles in `Runtime` are created once, never freed or changed,
// and name process-wide MPI objects. MPI allows any thread to use them at
// MPI_THREAD_MULTIPLE; below that, every call goes through `Runtime::serial`.
unsafe impl Send for Runtime {}
// SAFETY: as above; `Runtime` has no interior mutability besides the mutex.
unsafe impl Sync for Runtime {}

fn runtime() -> Result<&'static Runtime> {
    match RUNTIME.get_or_init(init) {
        Ok(rt) => Ok(rt),
        Err(why) => Err(Error::Rendezvous(format!("initialising MPI: {why}"))),
    }
}

/// Finalises MPI when the process exits: OpenMPI's launcher reports a rank
/// that exits without `MPI_Finalize` as failed (which is what we want after
/// [`FAILED`]).
extern "C" fn finalize_at_exit() {
    if FAILED.load(Ordering::SeqCst) {
        return;
    }
    if let Ok(mut slot) = UNIVERSE.lock() {
        // Dropping the Universe calls MPI_Finalize.
        drop(slot.take());
    }
}

fn finalized() -> bool {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time, even before MPI_Init.
    unsafe { ffi::MPI_Finalized(&mut flag) };
    flag != 0
}

fn init() -> std::result::Result<Runtime, String> {
    if finalized() {
        return Err("MPI was already finalized in this process".into());
    }
    let provided = match mpi::initialize_with_threading(Threading::Multiple) {
        Some((universe, provided)) => {
            let mut slot = UNIVERSE
                .lock()
                .map_err(|_| "the MPI universe lock is poisoned".to_string())?;
            *slot = Some(universe);
            // SAFETY: registers a plain function with no captured state.
            if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                return Err("could not register MPI_Finalize to run at exit".into());
            }
            provided
        }
        None => {
            // Someone else in this process initialised MPI; they finalise it.
            let mut level: c_int = 0;
            // SAFETY: MPI is initialised; `level` is a valid out-pointer.
            check(
                unsafe { ffi::MPI_Query_thread(&mut level) },
                "MPI_Query_thread",
            )
            .map_err(|e| e.to_string())?;
            // SAFETY: reading an immutable constant exported by rsmpi's C shim.
            if level >= unsafe { ffi::RSMPI_THREAD_MULTIPLE } {
                Threading::Multiple
            } else {
                Threading::Serialized
            }
        }
    };
    build_runtime(provided).map_err(|e| e.to_string())
}

/// The four user ops (Sum, Prod, Min, Max) for the dtype with code `$d`.
macro_rules! half_fns {
    ($d:literal) => {
        [
            Some(half_op::<$d, 0> as unsafe extern "C" fn(_, _, _, _)),
            Some(half_op::<$d, 1> as unsafe extern "C" fn(_, _, _, _)),
            Some(half_op::<$d, 2> as unsafe extern "C" fn(_, _, _, _)),
            Some(half_op::<$d, 3> as unsafe extern "C" fn(_, _, _, _)),
        ]
    };
}

fn build_runtime(provided: Threading) -> Result<Runtime> {
    // SAFETY (whole function): MPI is initialised; every pointer passed is a
    // valid out-parameter on our stack, and the constants are rsmpi's.
    unsafe {
        let world = ffi::RSMPI_COMM_WORLD;
        // Errors in calls not tied to one of our communicators (type and op
        // creation) also come back instead of aborting.
        check(
            ffi::MPI_Comm_set_errhandler(world, ffi::RSMPI_ERRORS_RETURN),
            "MPI_Comm_set_errhandler",
        )?;
        let (mut rank, mut size) = (0, 0);
        check(ffi::MPI_Comm_rank(world, &mut rank), "MPI_Comm_rank")?;
        check(ffi::MPI_Comm_size(world, &mut size), "MPI_Comm_size")?;
        let mut half = [ffi::RSMPI_DATATYPE_NULL; 2];
        for t in &mut half {
            check(
                ffi::MPI_Type_contiguous(2, ffi::RSMPI_UINT8_T, t),
                "MPI_Type_contiguous",
            )?;
            check(ffi::MPI_Type_commit(t), "MPI_Type_commit")?;
        }
        let fns: [[ffi::MPI_User_function; 4]; 2] = [half_fns!(2), half_fns!(3)];
        let mut half_ops: [[ffi::MPI_Op; 4]; 2] = [[ffi::RSMPI_SUM; 4]; 2];
        for (ops, fs) in half_ops.iter_mut().zip(fns) {
            for (op, f) in ops.iter_mut().zip(fs) {
                // Commutative: MPI may then combine in any order, which is exact
                // for the conformance suite's small integers and is what the
                // built-in float ops do too.
                check(ffi::MPI_Op_create(f, 1, op), "MPI_Op_create")?;
            }
        }
        Ok(Runtime {
            // RINGSIDE_MPI_NO_IN_PLACE=1 forces the copying stand-in, so its
            // path is tested on OpenMPI too.
            in_place: match std::env::var_os(NO_IN_PLACE_VAR) {
                Some(_) => None,
                None => in_place_address(&library_version()),
            },
            serial: (provided != Threading::Multiple).then(|| Mutex::new(())),
            half,
            half_ops,
            world_rank: usize::try_from(rank).unwrap_or(usize::MAX),
            world_size: usize::try_from(size).unwrap_or(0),
        })
    }
}

/// An `MPI_User_function` for dtype code `D` and op code `O`:
/// `inout[i] = op(in[i], inout[i])` over `*len` 2-byte elements.
unsafe extern "C" fn half_op<const D: u8, const O: u8>(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    _datatype: *mut ffi::MPI_Datatype,
) {
    let (Some(dtype), Some(op)) = (DType::from_code(D), ReduceOp::from_code(O)) else {
        return;
    };
    if len.is_null() || invec.is_null() || inoutvec.is_null() {
        return;
    }
    // SAFETY: MPI passes a valid pointer to the element count.
    let Ok(n) = usize::try_from(unsafe { *len }) else {
        return;
    };
    let bytes = n * dtype.size();
    // SAFETY: MPI passes two distinct buffers of `n` elements of the 2-byte
    // type this op was created for (it is only ever used with that type).
    let (src, dst) = unsafe {
        (
            std::slice::from_raw_parts(invec.cast::<u8>(), bytes),
            std::slice::from_raw_parts_mut(inoutvec.cast::<u8>(), bytes),
        )
    };
    reduce_into(dtype, op, dst, src);
}

fn library_version() -> String {
    let mut buf = vec![0 as c_char; ffi::MPI_MAX_LIBRARY_VERSION_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING characters.
    let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = buf[..usize::try_from(len).unwrap_or(0).min(buf.len())]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `MPI_IN_PLACE` is a macro in `mpi.h`, invisible to bindgen: OpenMPI defines
/// it as `(void *) 1`, MPICH and its derivatives (Intel MPI, MVAPICH) as
/// `(void *) -1`.
fn in_place_address(library_version: &str) -> Option<usize> {
    if library_version.contains("Open MPI") {
        Some(1)
    } else if ["MPICH", "Intel(R) MPI", "MVAPICH"]
        .iter()
        .any(|name| library_version.contains(name))
    {
        Some(usize::MAX)
    } else {
        None
    }
}

fn error_string(rc: c_int) -> String {
    let mut buf = vec![0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters.
    if unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr(), &mut len) } != 0 {
        return format!("MPI error code {rc}");
    }
    let bytes: Vec<u8> = buf[..usize::try_from(len).unwrap_or(0).min(buf.len())]
        .iter()
        .map(|&c| c as u8)
        .collect();
    format!("{} (MPI error code {rc})", String::from_utf8_lossy(&bytes))
}

/// Turns an MPI return code into our error, with MPI's message.
fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(Error::Protocol(format!(
            "{what} failed: {}",
            error_string(rc)
        )))
    }
}

/// A count as MPI's `int`.
fn int(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        Error::InvalidArgument(format!(
            "{what}: {n} elements is more than MPI's int count can say"
        ))
    })
}

fn cptr(s: &[u8]) -> *const c_void {
    if s.is_empty() {
        EMPTY.as_ptr().cast_const().cast()
    } else {
        s.as_ptr().cast()
    }
}

fn mptr(s: &mut [u8]) -> *mut c_void {
    if s.is_empty() {
        // MPI writes nothing for a count of 0.
        EMPTY.as_ptr().cast()
    } else {
        s.as_mut_ptr().cast()
    }
}

impl Runtime {
    fn lock(&self) -> Result<Option<MutexGuard<'_, ()>>> {
        match &self.serial {
            None => Ok(None),
            Some(m) => m
                .lock()
                .map(Some)
                .map_err(|_| Error::Protocol("the MPI call lock is poisoned".into())),
        }
    }

    fn datatype(&self, d: DType) -> ffi::MPI_Datatype {
        // SAFETY: reading immutable handles exported by rsmpi's C shim.
        unsafe {
            match d {
                DType::F32 => ffi::RSMPI_FLOAT,
                DType::F64 => ffi::RSMPI_DOUBLE,
                DType::I32 => ffi::RSMPI_INT32_T,
                DType::I64 => ffi::RSMPI_INT64_T,
                DType::U8 => ffi::RSMPI_UINT8_T,
                DType::F16 => self.half[0],
                DType::BF16 => self.half[1],
            }
        }
    }

    fn op(&self, d: DType, op: ReduceOp) -> ffi::MPI_Op {
        let i = match op {
            ReduceOp::Sum | ReduceOp::Avg => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
        };
        // SAFETY: reading immutable handles exported by rsmpi's C shim.
        unsafe {
            match d {
                DType::F16 => self.half_ops[0][i],
                DType::BF16 => self.half_ops[1][i],
                _ => [
                    ffi::RSMPI_SUM,
                    ffi::RSMPI_PROD,
                    ffi::RSMPI_MIN,
                    ffi::RSMPI_MAX,
                ][i],
            }
        }
    }
}

/// A communicator over a private duplicate of `MPI_COMM_WORLD`.
pub struct MpiComm {
    comm: ffi::MPI_Comm,
    rank: usize,
    world: usize,
    rt: &'static Runtime,
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
        })
    }

    /// The MPI library's own description (`MPI_Get_library_version`).
    pub fn library_version(&self) -> String {
        library_version()
    }

    /// Runs one MPI call under the runtime's lock (if any) and checks its code.
    fn call(&self, what: &str, f: impl FnOnce() -> c_int) -> Result<()> {
        let _g = self.rt.lock()?;
        check(f(), what)
    }

    fn check_root(&self, root: usize) -> Result<c_int> {
        args::check_root(root, self.world)?;
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
            self.call("MPI_Allreduce", || unsafe {
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
                out.copy_from_slice(s);
            }
            let buf = mptr(out);
            // SAFETY: `buf` holds `count` elements of `dt`.
            self.call("MPI_Bcast", || unsafe {
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
            self.call("MPI_Reduce", || unsafe {
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
            self.call("MPI_Allgather", || unsafe {
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
                    self.call("MPI_Reduce_scatter_block", || unsafe {
                        ffi::MPI_Reduce_scatter_block(send, recv, n, dt, mop, self.comm)
                    })?;
                    &mut out[..]
                }
                (None, Some(in_place)) => {
                    let recv = mptr(out);
                    // SAFETY: `recv` holds world·count elements of `dt`.
                    self.call("MPI_Reduce_scatter_block", || unsafe {
                        ffi::MPI_Reduce_scatter_block(in_place, recv, n, dt, mop, self.comm)
                    })?;
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
                    self.call("MPI_Reduce_scatter_block", || unsafe {
                        ffi::MPI_Reduce_scatter_block(send, recv, n, dt, mop, self.comm)
                    })?;
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
            self.call("MPI_Alltoall", || unsafe {
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
            self.call("MPI_Gather", || unsafe {
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
            self.call("MPI_Scatter", || unsafe {
                ffi::MPI_Scatter(send, n, dt, recv, n, dt, r, self.comm)
            })
        })())
    }

    fn barrier(&self) -> Result<()> {
        // SAFETY: a plain collective on our communicator.
        noted(self.call("MPI_Barrier", || unsafe { ffi::MPI_Barrier(self.comm) }))
    }

    fn send(&self, buf: &Buffer<'_>, peer: usize) -> Result<()> {
        noted((|| -> Result<()> {
            let p = self.check_peer(peer)?;
            let (dt, n) = (self.rt.datatype(buf.dtype()), int(buf.len(), "send")?);
            let data = cptr(buf.host_bytes(B)?);
            // SAFETY: `data` holds `n` elements of `dt`.
            self.call("MPI_Send", || unsafe {
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
            self.call("MPI_Recv", || unsafe {
                ffi::MPI_Recv(data, n, dt, p, TAG, self.comm, &mut status)
            })?;
            let mut got: c_int = 0;
            // SAFETY: `status` was filled in by MPI_Recv.
            self.call("MPI_Get_count", || unsafe {
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
mod tests {
    use super::*;

    #[test]
    fn in_place_address_by_library() {
        let ompi = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4";
        assert_eq!(in_place_address(ompi), Some(1));
        assert_eq!(
            in_place_address("MPICH Version:\t4.0.2\nMPICH Release date: ..."),
            Some(usize::MAX)
        );
        assert_eq!(in_place_address("Some Other MPI 1.0"), None);
    }

    #[test]
    fn counts_beyond_int_are_refused() {
        assert_eq!(int(7, "x").unwrap(), 7);
        let e = int(1 << 40, "all_reduce").unwrap_err();
        assert!(e.to_string().contains("all_reduce"), "{e}");
    }

    /// One process without a launcher is an MPI singleton (world 1). The tests
    /// below share it: MPI is initialised once per process.
    #[test]
    fn singleton_communicators_coexist_and_reduce_half_types() {
        let a = MpiComm::new(0, 1).unwrap();
        let b = MpiComm::new(0, 1).unwrap();
        assert!(
            a.library_version().contains("MPI"),
            "{}",
            a.library_version()
        );
        let x = [half::f16::from_f32(1.5), half::f16::from_f32(-2.0)];
        let mut y = [half::f16::ZERO; 2];
        let mut out = BufferMut::from_slice(&mut y);
        a.all_reduce(Buffer::from_slice(&x).into(), &mut out, ReduceOp::Max)
            .unwrap();
        assert_eq!(y, x);
        let mut z = [half::bf16::from_f32(3.0)];
        b.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut z),
            ReduceOp::Avg,
        )
        .unwrap();
        assert_eq!(z[0].to_f32(), 3.0);
        b.barrier().unwrap();
    }

    #[test]
    fn disagreeing_with_mpi_about_the_world_is_a_rendezvous_error() {
        let e = MpiComm::new(1, 2).err().unwrap();
        assert!(matches!(e, Error::Rendezvous(_)), "{e}");
        assert!(
            e.to_string()
                .contains("MPI says this process is rank 0 of 1"),
            "{e}"
        );
    }

    /// MPI_ERRORS_RETURN is set: a bad call comes back as our error with
    /// MPI's message instead of aborting the process.
    #[test]
    fn mpi_errors_come_back_as_errors() {
        let c = MpiComm::new(0, 1).unwrap();
        let dt = c.rt.datatype(DType::F32);
        let mut x = [0f32; 1];
        let p = x.as_mut_ptr().cast();
        // SAFETY: a negative count is rejected by MPI before it touches `p`.
        let e = c
            .call("MPI_Bcast", || unsafe {
                ffi::MPI_Bcast(p, -1, dt, 0, c.comm)
            })
            .unwrap_err();
        assert!(e.to_string().contains("MPI_Bcast failed"), "{e}");
        assert!(e.to_string().contains("MPI error code"), "{e}");
    }

    #[test]
    fn empty_slices_never_pass_as_in_place() {
        // An empty byte slice points at address 1: OpenMPI's MPI_IN_PLACE.
        assert_ne!(cptr(&[]) as usize, 1);
        assert_ne!(mptr(&mut []) as usize, 1);
    }
}
