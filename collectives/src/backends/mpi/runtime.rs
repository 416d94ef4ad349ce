//! MPI's process-wide state: initialised once (MPI cannot be initialised
//! twice), finalised at exit unless this rank failed, the float16/bfloat16
//! types and reduction ops made at start-up, and the small conversions every
//! call needs (return codes to errors, counts to `int`, slices to pointers).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use mpi::Threading;
use mpi::environment::Universe;
use mpi::ffi;

use super::{NO_IN_PLACE_VAR, THREAD_LEVEL_VAR};
use crate::backends::MPI_THREAD_LEVELS;
use crate::element::{DType, ReduceOp, reduce_into};
use crate::error::{Error, Result};

/// rsmpi's handle on the MPI environment; dropping it finalises MPI. Kept here
/// (not in a communicator) because MPI cannot be initialised a second time.
pub(super) static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

/// Process-wide MPI state, built by the first [`connect`].
pub(super) static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// Zero-length buffers are passed as a pointer to this: an empty Rust slice of
/// bytes points at address 1, which is OpenMPI's `MPI_IN_PLACE`.
pub(super) static EMPTY: AtomicU64 = AtomicU64::new(0);

/// Set when a call failed on this rank. `MPI_Finalize` waits for every rank
/// (OpenMPI fences), so a rank that failed alone would hang at exit while its
/// peers wait in a collective for it; instead it exits without finalising,
/// and the launcher ends the whole job.
pub(super) static FAILED: AtomicBool = AtomicBool::new(false);

/// Records a failure (see [`FAILED`]). `Unsupported` is not one: it is
/// returned identically on every rank before anything is sent.
pub(super) fn noted(r: Result<()>) -> Result<()> {
    if let Err(e) = &r {
        if !matches!(e, Error::Unsupported { .. }) {
            FAILED.store(true, Ordering::SeqCst);
        }
    }
    r
}

/// How ringside keeps its MPI calls within the thread level MPI gave.
pub(super) enum Guard {
    /// `MPI_THREAD_MULTIPLE`: MPI keeps concurrent calls apart itself.
    None,
    /// `serialized` (or a level someone else's `MPI_Init` chose): one call at
    /// a time, under this lock.
    Serial(Mutex<()>),
    /// `single` or `funneled`, asked for by [`THREAD_LEVEL_VAR`]: calls only
    /// from the thread that started MPI, which needs no lock (the two atomic
    /// operations of one were a fifth of the binding's cost per small call).
    OneThread(Threading),
}

thread_local! {
    /// Whether this thread started MPI (for [`Guard::OneThread`]).
    static STARTED_MPI: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(super) struct Runtime {
    /// The address `MPI_IN_PLACE` has in this library (a macro, so bindgen
    /// cannot see it), or `None` when we do not know the library.
    pub(super) in_place: Option<usize>,
    /// How calls are kept apart (see [`Runtime::lock`]).
    pub(super) guard: Guard,
    /// Every dtype's MPI datatype, by [`DType::code`] (float16 and bfloat16:
    /// 2-byte contiguous types of our own). A table, not a `match`: it is
    /// read on every call, and a lookup is one load where a `match` was an
    /// indirect jump.
    types: [ffi::MPI_Datatype; DType::ALL.len()],
    /// Every (dtype, op)'s MPI op, by [`DType::code`] and [`ReduceOp::code`]
    /// (`Avg` is a sum; float16 and bfloat16 use user ops of our own).
    ops: [[ffi::MPI_Op; ReduceOp::ALL.len()]; DType::ALL.len()],
    pub(super) world_rank: usize,
    pub(super) world_size: usize,
}

// SAFETY: the handles in `Runtime` are created once, never freed or changed,
// and name process-wide MPI objects. MPI allows any thread to use them at
// MPI_THREAD_MULTIPLE; below that, every call goes through `Runtime::serial`.
unsafe impl Send for Runtime {}
// SAFETY: as above; `Runtime` has no interior mutability besides the mutex.
unsafe impl Sync for Runtime {}

pub(super) fn runtime() -> Result<&'static Runtime> {
    match RUNTIME.get_or_init(init) {
        Ok(rt) => Ok(rt),
        Err(why) => Err(Error::Rendezvous(format!("initialising MPI: {why}"))),
    }
}

/// Finalises MPI when the process exits: OpenMPI's launcher reports a rank
/// that exits without `MPI_Finalize` as failed (which is what we want after
/// [`FAILED`]).
pub(super) extern "C" fn finalize_at_exit() {
    if FAILED.load(Ordering::SeqCst) {
        return;
    }
    if let Ok(mut slot) = UNIVERSE.lock() {
        // Dropping the Universe calls MPI_Finalize.
        drop(slot.take());
    }
}

pub(super) fn finalized() -> bool {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time, even before MPI_Init.
    unsafe { ffi::MPI_Finalized(&mut flag) };
    flag != 0
}

pub(super) fn init() -> std::result::Result<Runtime, String> {
    if finalized() {
        return Err("MPI was already finalized in this process".into());
    }
    let requested = requested_level(std::env::var(THREAD_LEVEL_VAR).ok().as_deref())?;
    let provided = match mpi::initialize_with_threading(requested) {
        Some((universe, provided)) => {
            let mut slot = UNIVERSE
                .lock()
                .map_err(|_| "the MPI universe lock is poisoned".to_string())?;
            *slot = Some(universe);
            // SAFETY: registers a plain function with no captured state.
            if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                return Err("could not register MPI_Finalize to run at exit".into());
            }
            STARTED_MPI.with(|c| c.set(true));
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

/// MPI's thread levels in the order of [`MPI_THREAD_LEVELS`].
const LEVELS: [Threading; 4] = [
    Threading::Single,
    Threading::Funneled,
    Threading::Serialized,
    Threading::Multiple,
];

/// The thread level [`THREAD_LEVEL_VAR`] asks for (`None` or empty: unset,
/// `multiple`).
pub(super) fn requested_level(value: Option<&str>) -> std::result::Result<Threading, String> {
    let v = value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("multiple");
    MPI_THREAD_LEVELS
        .iter()
        .position(|&l| l == v)
        .map(|i| LEVELS[i])
        .ok_or_else(|| {
            format!(
                "{THREAD_LEVEL_VAR}={v:?} is not a thread level ({} or {})",
                MPI_THREAD_LEVELS[..3].join(", "),
                MPI_THREAD_LEVELS[3]
            )
        })
}

/// The name [`THREAD_LEVEL_VAR`] gives `level`.
fn level_name(level: Threading) -> &'static str {
    let i = LEVELS.iter().position(|&l| l == level).unwrap_or(3);
    MPI_THREAD_LEVELS[i]
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

pub(super) fn build_runtime(provided: Threading) -> Result<Runtime> {
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
        let builtin = [
            ffi::RSMPI_SUM,
            ffi::RSMPI_PROD,
            ffi::RSMPI_MIN,
            ffi::RSMPI_MAX,
        ];
        let types = DType::ALL.map(|d| match d {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::I32 => ffi::RSMPI_INT32_T,
            DType::I64 => ffi::RSMPI_INT64_T,
            DType::U8 => ffi::RSMPI_UINT8_T,
            DType::F16 => half[0],
            DType::BF16 => half[1],
        });
        let ops = DType::ALL.map(|d| {
            let by_op = match d {
                DType::F16 => half_ops[0],
                DType::BF16 => half_ops[1],
                _ => builtin,
            };
            // [Sum, Prod, Min, Max] are codes 0–3; `Avg` sums.
            ReduceOp::ALL.map(|op| by_op[op.combining().code() as usize])
        });
        Ok(Runtime {
            // RINGSIDE_MPI_NO_IN_PLACE=1 forces the copying stand-in, so its
            // path is tested on OpenMPI too.
            in_place: match std::env::var_os(NO_IN_PLACE_VAR) {
                Some(_) => None,
                None => in_place_address(&library_version()),
            },
            guard: match provided {
                Threading::Multiple => Guard::None,
                Threading::Single | Threading::Funneled if STARTED_MPI.with(|c| c.get()) => {
                    Guard::OneThread(provided)
                }
                _ => Guard::Serial(Mutex::new(())),
            },
            types,
            ops,
            world_rank: usize::try_from(rank).unwrap_or(usize::MAX),
            world_size: usize::try_from(size).unwrap_or(0),
        })
    }
}

/// An `MPI_User_function` for dtype code `D` and op code `O`:
/// `inout[i] = op(in[i], inout[i])` over `*len` 2-byte elements.
pub(super) unsafe extern "C" fn half_op<const D: u8, const O: u8>(
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

pub(super) fn library_version() -> String {
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
pub(super) fn in_place_address(library_version: &str) -> Option<usize> {
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

pub(super) fn error_string(rc: c_int) -> String {
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
#[inline]
pub(super) fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(failed(rc, what))
    }
}

#[cold]
#[inline(never)]
fn failed(rc: c_int, what: &str) -> Error {
    Error::Protocol(format!("{what} failed: {}", error_string(rc)))
}

/// A count as MPI's `int`.
#[inline]
pub(super) fn int(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| too_many(n, what))
}

#[cold]
#[inline(never)]
fn too_many(n: usize, what: &str) -> Error {
    Error::InvalidArgument(format!(
        "{what}: {n} elements is more than MPI's int count can say"
    ))
}

pub(super) fn cptr(s: &[u8]) -> *const c_void {
    if s.is_empty() {
        EMPTY.as_ptr().cast_const().cast()
    } else {
        s.as_ptr().cast()
    }
}

pub(super) fn mptr(s: &mut [u8]) -> *mut c_void {
    if s.is_empty() {
        // MPI writes nothing for a count of 0.
        EMPTY.as_ptr().cast()
    } else {
        s.as_mut_ptr().cast()
    }
}

/// Takes the lock of [`Guard::Serial`] (out of line: the lock's own cost is
/// far larger than the call).
#[inline(never)]
fn serial(m: &Mutex<()>) -> Result<Option<MutexGuard<'_, ()>>> {
    m.lock()
        .map(Some)
        .map_err(|_| Error::Protocol("the MPI call lock is poisoned".into()))
}

/// Whether a call may go ahead at `single` or `funneled` (`level`), made on
/// the thread that started MPI or not.
#[inline]
pub(super) fn one_thread(level: Threading, on_mpi_thread: bool) -> Result<()> {
    if on_mpi_thread {
        return Ok(());
    }
    Err(wrong_thread(level))
}

#[cold]
#[inline(never)]
fn wrong_thread(level: Threading) -> Error {
    Error::InvalidArgument(format!(
        "MPI runs at thread level {} ({THREAD_LEVEL_VAR}), which allows MPI calls only \
         from the thread that started MPI, and this call came from another thread: set \
         {THREAD_LEVEL_VAR}=serialized or multiple",
        level_name(level)
    ))
}

impl Runtime {
    /// Enters an MPI call: the lock to hold for it, if any, or an error for a
    /// call from a thread the thread level rules out.
    #[inline(always)]
    pub(super) fn lock(&self) -> Result<Option<MutexGuard<'_, ()>>> {
        match &self.guard {
            Guard::None => Ok(None),
            Guard::Serial(m) => serial(m),
            Guard::OneThread(level) => {
                one_thread(*level, STARTED_MPI.with(|c| c.get())).map(|()| None)
            }
        }
    }

    #[inline]
    pub(super) fn datatype(&self, d: DType) -> ffi::MPI_Datatype {
        self.types[d.code() as usize]
    }

    #[inline]
    pub(super) fn op(&self, d: DType, op: ReduceOp) -> ffi::MPI_Op {
        self.ops[d.code() as usize][op.code() as usize]
    }
}
