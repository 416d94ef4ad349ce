//! The NCCL backend: NVIDIA's collectives on CUDA devices, through cudarc 0.19.
//!
//! # Libraries
//! Nothing CUDA is needed to build: cudarc loads `libcuda.so.1` (from the NVIDIA
//! driver) at run time, and ringside loads `libnccl.so.2` itself, from
//! `RINGSIDE_NCCL_LIB`, the torch wheel next to `LIBTORCH`, or the system (see
//! [`loader`] for the order and why cudarc's own NCCL loader cannot be used).
//! Without a driver or a device, [`connect`] returns an error that says
//! "no CUDA device"; it never panics (cudarc panics when a library or symbol is
//! missing, so every call into it runs behind `catch_unwind`).
//!
//! # Devices
//! Rank `r` uses device `LOCAL_RANK % device_count` when `LOCAL_RANK` is set
//! (launchers set it), else `r % device_count`. NCCL refuses two ranks of one
//! communicator on one device.
//! Rank 0 creates the `ncclUniqueId` and passes it through the job's store (key
//! `{prefix}nccl/unique_id`; the prefix must be unique per communicator).
//!
//! # Buffers, streams and synchronisation
//! - Device buffers ([`Buffer::from_device_ptr`] with this communicator's device)
//!   are the native path: NCCL reads and writes them directly.
//! - Host buffers work too, so the same conformance suite runs here: each call
//!   copies the output (and a host input) into device staging memory, runs the
//!   collective, and copies the output back. That costs two PCIe copies per call:
//!   a convenience, not a benchmark path.
//! - Every call runs on the communicator's own stream. It is created as a
//!   *blocking* stream, so it waits for work queued earlier on the legacy default
//!   stream (where PyTorch queues by default); work on any other stream must be
//!   finished (or synchronised) by the caller before the call.
//! - Every call returns only after the collective has completed on the device
//!   (the stream is polled, bounded by `Options::timeout`), so buffers may be
//!   read, reused or freed as soon as it returns. On device buffers it first tells
//!   a caller who asked ([`crate::queued`]) that the collective is queued, so
//!   another thread can queue the device work that depends on it meanwhile.
//! - A failed or timed-out call aborts the NCCL communicator (`ncclCommAbort`, so
//!   peers fail instead of hanging) and the communicator refuses later calls.
//!
//! # Reductions
//! `Avg` follows [`crate::element`]: sum, then divide once by the world size
//! (integers truncate). Host buffers get exactly that (the sum runs on the device,
//! the division on the host after the copy back). Device buffers of floats use
//! `ncclAvg`, which pre-multiplies each input by 1/n: for world sizes that are not
//! powers of two the result can differ from sum/n in the last bit. Device integer
//! buffers are summed by NCCL and divided on the host (a round trip).
//!
//! # Errors
//! No driver or device: [`Error::Unsupported`] ("… no CUDA device (…)"). A failing
//! CUDA or NCCL call, or an asynchronous NCCL error (`ncclCommGetAsyncError`):
//! [`Error::Io`] whose message is the library's own (`ncclGetErrorString` plus
//! `ncclGetLastError`). A call running past `Options::timeout`: [`Error::Timeout`].
//!
//! # Limits
//! `ncclCommInitRank` is called only after every rank has reached the store, so
//! it does not wait on absent ranks, but a rank dying inside NCCL's own
//! bootstrap is not bounded by `Options::timeout`.

mod device;
pub mod loader;

use std::ffi::c_void;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cudarc::driver::result as cu;
use cudarc::driver::sys as cusys;
use cudarc::nccl::sys::{
    cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId,
};

use super::Options;
use super::checks::{self, blocked_count, check_input, gather_count, per_rank};
use crate::buffer::{Buffer, BufferMut, Location};
use crate::deadline::Deadline;
use crate::element::{DType, ReduceOp, finish_avg};
use crate::error::{Error, Result};
use crate::rendezvous::{Store, barrier};
use crate::{Backend, Collective, Communicator, Input};
use device::{DevMem, Inner, P2p, Pace, StageSlot, last};
use loader::{Api, Res};

pub use loader::{NCCL_LIB_ENV, nccl_in_torch, probe as probe_nccl};

const B: Backend = Backend::Nccl;
const SUCCESS: Res = ncclResult_t::ncclSuccess as Res;
const IN_PROGRESS: Res = ncclResult_t::ncclInProgress as Res;

/// The error for a machine where CUDA cannot run; always contains "no CUDA device".
fn no_device(detail: impl std::fmt::Display) -> Error {
    Error::Unsupported {
        backend: B,
        what: format!("this machine: no CUDA device ({detail})"),
    }
}

/// A failure reported by the CUDA driver or NCCL, with the library's own words.
fn lib_error(context: String, detail: impl std::fmt::Display) -> Error {
    Error::io(context, std::io::Error::other(detail.to_string()))
}

fn cuda(what: &str, e: cu::DriverError) -> Error {
    lib_error(format!("CUDA {what}"), e)
}

/// Runs `f`, turning a panic inside cudarc (a missing library or symbol) into an error.
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        Err(lib_error(
            format!("nccl backend: {what}"),
            format!("the CUDA bindings panicked: {msg}"),
        ))
    })
}

/// Number of CUDA devices; an error containing "no CUDA device" when there is no
/// driver, the driver finds no device, or CUDA cannot initialise.
pub fn cuda_device_count() -> Result<usize> {
    guard("counting CUDA devices", || {
        // SAFETY: only tries to dlopen the driver library under its known names.
        if !unsafe { cusys::is_culib_present() } {
            return Err(no_device(
                "the CUDA driver library libcuda.so.1 could not be loaded: no NVIDIA driver",
            ));
        }
        cu::init().map_err(|e| no_device(format!("cuInit failed: {e}")))?;
        let n = cu::device::get_count().map_err(|e| no_device(format!("cuDeviceGetCount: {e}")))?;
        if n <= 0 {
            return Err(no_device("the driver reports 0 devices"));
        }
        Ok(n as usize)
    })
}

/// The device rank `rank` uses: `LOCAL_RANK % count` when `LOCAL_RANK` is set
/// (modulo, because a launcher that gives each process one GPU through
/// `CUDA_VISIBLE_DEVICES` still numbers local ranks from 0), else `rank % count`.
fn pick_device(rank: usize, count: usize) -> Result<usize> {
    let local = match std::env::var("LOCAL_RANK") {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|_| Error::InvalidArgument(format!("LOCAL_RANK={s:?} is not a number")))?,
        Err(_) => rank,
    };
    Ok(local % count)
}

fn nccl_dtype(d: DType) -> Res {
    (match d {
        DType::F32 => ncclDataType_t::ncclFloat32,
        DType::F64 => ncclDataType_t::ncclFloat64,
        DType::F16 => ncclDataType_t::ncclFloat16,
        DType::BF16 => ncclDataType_t::ncclBfloat16,
        DType::I32 => ncclDataType_t::ncclInt32,
        DType::I64 => ncclDataType_t::ncclInt64,
        DType::U8 => ncclDataType_t::ncclUint8,
    }) as Res
}

/// NCCL's op for `op`; `Avg` is NCCL's own only when `native_avg`, else a sum
/// that the caller finishes with [`finish_avg`].
fn nccl_op(op: ReduceOp, native_avg: bool) -> Res {
    (match op {
        ReduceOp::Sum => ncclRedOp_t::ncclSum,
        ReduceOp::Prod => ncclRedOp_t::ncclProd,
        ReduceOp::Min => ncclRedOp_t::ncclMin,
        ReduceOp::Max => ncclRedOp_t::ncclMax,
        ReduceOp::Avg if native_avg => ncclRedOp_t::ncclAvg,
        ReduceOp::Avg => ncclRedOp_t::ncclSum,
    }) as Res
}

/// Connects rank `rank` of `world` to an NCCL communicator; see the module docs.
pub fn connect(
    store: &dyn Store,
    rank: usize,
    world: usize,
    opts: &Options,
) -> Result<Box<dyn Communicator>> {
    if world == 0 || rank >= world {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is not a rank of a world of {world}"
        )));
    }
    let comm = guard("connect", || NcclComm::connect(store, rank, world, opts))?;
    Ok(Box::new(comm))
}

/// A communicator backed by NCCL on one CUDA device.
pub struct NcclComm {
    rank: usize,
    world: usize,
    device: i32,
    inner: Mutex<Inner>,
}

impl NcclComm {
    fn connect(store: &dyn Store, rank: usize, world: usize, opts: &Options) -> Result<Self> {
        let count = cuda_device_count()?;
        let device = pick_device(rank, count)?;
        let api = loader::api().map_err(|e| Error::Unsupported {
            backend: B,
            what: format!("this machine: {e}"),
        })?;
        let dev = cu::device::get(device as i32).map_err(|e| cuda("cuDeviceGet", e))?;
        // SAFETY: `dev` came from cuDeviceGet.
        let ctx = unsafe { cu::primary_ctx::retain(dev) }
            .map_err(|e| cuda("cuDevicePrimaryCtxRetain", e))?;
        let mut inner = Inner {
            api,
            rank,
            device: device as i32,
            timeout: opts.timeout,
            dev,
            ctx,
            stream: std::ptr::null_mut(),
            comm: std::ptr::null_mut(),
            stage_in: DevMem::default(),
            stage_out: DevMem::default(),
            scratch: DevMem::default(),
            broken: None,
        };
        inner.bind()?;
        // Blocking (not NON_BLOCKING): orders us after the legacy default stream.
        inner.stream = cu::stream::create(cu::stream::StreamKind::Default)
            .map_err(|e| cuda("cuStreamCreate", e))?;
        inner.scratch.ensure(256)?;

        let key = format!("{}nccl/unique_id", opts.prefix);
        let mut id = ncclUniqueId { internal: [0; 128] };
        if rank == 0 {
            // SAFETY: writes one ncclUniqueId.
            let rc = unsafe { (api.get_unique_id)(&mut id) };
            if rc != SUCCESS {
                return Err(lib_error(
                    "ncclGetUniqueId".into(),
                    api.error_string(rc) + &last(api, std::ptr::null_mut()),
                ));
            }
            store.set(&key, bytemuck::cast_slice(&id.internal))?;
        } else {
            let v = store.get(&key)?;
            if v.len() != id.internal.len() {
                return Err(Error::Rendezvous(format!(
                    "{key} holds {} bytes, expected a {}-byte ncclUniqueId",
                    v.len(),
                    id.internal.len()
                )));
            }
            bytemuck::cast_slice_mut(&mut id.internal).copy_from_slice(&v);
        }
        // Everyone reaches the store before anyone enters ncclCommInitRank, which
        // would otherwise wait without a bound for a rank that never comes.
        barrier::join(
            store,
            &format!("{}nccl/arrived", opts.prefix),
            rank,
            world,
            opts.timeout,
        )?;
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: the device's context is current; `id` is the job's unique id.
        let rc = unsafe { (api.comm_init_rank)(&mut comm, world as i32, id, rank as i32) };
        if rc != SUCCESS {
            return Err(lib_error(
                format!("ncclCommInitRank (rank {rank} of {world}, device {device})"),
                api.error_string(rc) + &last(api, comm),
            ));
        }
        inner.comm = comm;
        Ok(NcclComm {
            rank,
            world,
            device: device as i32,
            inner: Mutex::new(inner),
        })
    }

    /// The CUDA device this rank uses.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The loaded NCCL's version and path, e.g. `("2.28.9", "/…/libnccl.so.2")`.
    pub fn nccl_version(&self) -> (String, String) {
        match self.inner.lock() {
            Ok(g) => (g.api.version(), g.api.path.clone()),
            Err(_) => ("unknown".into(), String::new()),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        super::guard::lock_usable(&self.inner, |g| g.broken.as_deref())
    }

    fn check_root(&self, root: usize) -> Result<()> {
        checks::check_root(root, self.world)
    }

    fn check_device(&self, loc: Location, what: &str) -> Result<()> {
        match loc {
            Location::Cuda { device } if device != self.device => {
                Err(Error::InvalidArgument(format!(
                    "{what} is on CUDA device {device}, but rank {} uses device {}",
                    self.rank, self.device
                )))
            }
            _ => Ok(()),
        }
    }

    /// Runs one collective. Stages host buffers through device memory, lets
    /// `body` queue NCCL work on the device pointers (input `None` = in place),
    /// waits for it, copies host outputs back, and finishes a non-native `Avg`
    /// over the byte range `body` returns. Any failure aborts the communicator.
    fn run(
        &self,
        collective: Collective,
        input: &Input<'_>,
        output: &mut BufferMut<'_>,
        body: impl FnOnce(&mut Inner, Option<u64>, u64, bool) -> Result<Option<Range<usize>>>,
    ) -> Result<()> {
        self.check_device(output.location(), "the output")?;
        if let Input::Buffer(b) = input {
            self.check_device(b.location(), "the input")?;
        }
        let world = self.world;
        self.locked(collective.name(), |g| {
            let dtype = output.dtype();
            let out_dev = output.device_ptr();
            // Floats on the device use ncclAvg; everything else sums and divides here.
            let native_avg = dtype.is_float() && out_dev.is_some();
            let in_ptr = match input {
                Input::InPlace => None,
                Input::Buffer(b) => Some(match b.device_ptr() {
                    Some(p) => p,
                    None => g.stage_host(StageSlot::In, b)?,
                }),
            };
            let out_ptr = match out_dev {
                Some(p) => p,
                // The whole output goes down, so parts the collective leaves alone
                // (non-root reduce, other blocks) come back unchanged.
                None => g.stage_host(StageSlot::Out, &output.as_buffer())?,
            };
            let avg = body(g, in_ptr, out_ptr, native_avg)?;
            // On device buffers with nothing left for the host to do, later work
            // on the default stream already runs after the collective: say so to
            // a caller who asked (crate::queued), then wait as always; at a
            // relaxed pace if the caller was told, since nobody waits on the end.
            let told = out_dev.is_some() && avg.is_none() && crate::queued::queued();
            g.wait_paced(
                collective.name(),
                if told { Pace::Relaxed } else { Pace::Eager },
            )?;
            let avg = avg.filter(|r| !r.is_empty());
            if out_dev.is_none() {
                let host = output.host_bytes_mut(B)?;
                g.copy_back(host, out_ptr, collective.name())?;
                if let Some(r) = avg {
                    finish_avg(dtype, &mut host[r], world);
                }
            } else if let Some(r) = avg {
                // Integers on the device: NCCL summed; divide on the host.
                let mut tmp = vec![0u8; r.len()];
                let p = out_ptr + r.start as u64;
                g.copy_back(&mut tmp, p, collective.name())?;
                finish_avg(dtype, &mut tmp, world);
                // SAFETY: `p..p+len` lies inside the caller's device output.
                unsafe { cu::memcpy_htod_async(p, &tmp[..], g.stream) }
                    .map_err(|e| cuda("cuMemcpyHtoDAsync", e))?;
                g.wait(collective.name())?;
            }
            Ok(())
        })
    }

    /// Runs `body` with the device's context current; a failure (or a panic in
    /// the CUDA bindings) aborts the NCCL communicator and marks it broken.
    fn locked(&self, what: &str, body: impl FnOnce(&mut Inner) -> Result<()>) -> Result<()> {
        let mut g = self.lock()?;
        let res = guard(what, || {
            g.bind()?;
            body(&mut g)
        });
        if let Err(e) = &res {
            g.fail(e);
        }
        res
    }
}

impl Communicator for NcclComm {
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
        let (dtype, count) = (output.dtype(), output.len());
        check_input(&input, dtype, count, "all_reduce")?;
        if count == 0 {
            return Ok(());
        }
        let bytes = output.byte_len();
        self.run(Collective::AllReduce, &input, output, |g, i, o, native| {
            // SAFETY: both buffers hold `count` elements on this device.
            let rc = unsafe {
                (g.api.all_reduce)(
                    i.unwrap_or(o) as *const c_void,
                    o as *mut c_void,
                    count,
                    nccl_dtype(dtype),
                    nccl_op(op, native),
                    g.comm,
                    g.cu_stream(),
                )
            };
            g.check(rc, "ncclAllReduce")?;
            Ok((op == ReduceOp::Avg && !native).then_some(0..bytes))
        })
    }

    fn broadcast(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        self.check_root(root)?;
        let (dtype, count) = (output.dtype(), output.len());
        if self.rank == root {
            check_input(&input, dtype, count, "broadcast")?;
        }
        if count == 0 {
            return Ok(());
        }
        // Non-roots' input is ignored: do not stage it.
        let input = if self.rank == root {
            input
        } else {
            Input::InPlace
        };
        self.run(Collective::Broadcast, &input, output, |g, i, o, _| {
            // SAFETY: `count` elements each; only the root's send buffer is read.
            let rc = unsafe {
                (g.api.broadcast)(
                    i.unwrap_or(o) as *const c_void,
                    o as *mut c_void,
                    count,
                    nccl_dtype(dtype),
                    root as i32,
                    g.comm,
                    g.cu_stream(),
                )
            };
            g.check(rc, "ncclBroadcast")?;
            Ok(None)
        })
    }

    fn reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        let dtype = output.dtype();
        let count = match &input {
            Input::Buffer(b) => b.len(),
            Input::InPlace => output.len(),
        };
        if self.rank == root && output.len() != count {
            return Err(Error::InvalidArgument(format!(
                "reduce: root output has {} elements, input {count}",
                output.len()
            )));
        }
        check_input(&input, dtype, count, "reduce")?;
        if count == 0 {
            return Ok(());
        }
        let is_root = self.rank == root;
        let bytes = count * dtype.size();
        self.run(Collective::Reduce, &input, output, |g, i, o, native| {
            // SAFETY: `count` elements in the send buffer; NCCL writes the receive
            // buffer (sized `count`, checked above) at the root only.
            let rc = unsafe {
                (g.api.reduce)(
                    i.unwrap_or(o) as *const c_void,
                    o as *mut c_void,
                    count,
                    nccl_dtype(dtype),
                    nccl_op(op, native),
                    root as i32,
                    g.comm,
                    g.cu_stream(),
                )
            };
            g.check(rc, "ncclReduce")?;
            Ok((is_root && op == ReduceOp::Avg && !native).then_some(0..bytes))
        })
    }

    fn all_gather(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        let dtype = output.dtype();
        let count = per_rank(output.len(), n, "all_gather output")?;
        check_input(&input, dtype, count, "all_gather")?;
        if count == 0 {
            return Ok(());
        }
        let block = (count * dtype.size()) as u64;
        self.run(Collective::AllGather, &input, output, |g, i, o, _| {
            // In place, NCCL wants the input at `output + rank * count`.
            let src = i.unwrap_or(o + me as u64 * block);
            // SAFETY: `count` elements in, `n * count` out.
            let rc = unsafe {
                (g.api.all_gather)(
                    src as *const c_void,
                    o as *mut c_void,
                    count,
                    nccl_dtype(dtype),
                    g.comm,
                    g.cu_stream(),
                )
            };
            g.check(rc, "ncclAllGather")?;
            Ok(None)
        })
    }

    fn reduce_scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        let dtype = output.dtype();
        let count = blocked_count(&input, output.len(), n, "reduce_scatter")?;
        check_input(&input, dtype, n * count, "reduce_scatter")?;
        if count == 0 {
            return Ok(());
        }
        let block = count * dtype.size();
        self.run(
            Collective::ReduceScatter,
            &input,
            output,
            |g, i, o, native| {
                // In place, NCCL wants the result at `input + rank * count`.
                let (src, dst, mine) = match i {
                    Some(i) => (i, o, 0..block),
                    None => (o, o + (me * block) as u64, me * block..(me + 1) * block),
                };
                // SAFETY: `n * count` elements in, `count` out.
                let rc = unsafe {
                    (g.api.reduce_scatter)(
                        src as *const c_void,
                        dst as *mut c_void,
                        count,
                        nccl_dtype(dtype),
                        nccl_op(op, native),
                        g.comm,
                        g.cu_stream(),
                    )
                };
                g.check(rc, "ncclReduceScatter")?;
                Ok((op == ReduceOp::Avg && !native).then_some(mine))
            },
        )
    }

    fn all_to_all(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        let dtype = output.dtype();
        let count = per_rank(output.len(), n, "all_to_all output")?;
        check_input(&input, dtype, n * count, "all_to_all")?;
        if count == 0 {
            return Ok(());
        }
        let (block, total) = (count * dtype.size(), output.byte_len());
        let dt = nccl_dtype(dtype);
        self.run(Collective::AllToAll, &input, output, |g, i, o, _| {
            let src = match i {
                Some(i) => i,
                // In place, send from a copy: arriving blocks would overwrite
                // blocks not yet sent.
                None => {
                    let copy = g.scratch.ensure(total)?;
                    g.copy_d2d(copy, o, total)?;
                    copy
                }
            };
            let at = |base: u64, r: usize| base + (r * block) as u64;
            g.copy_d2d(at(o, me), at(src, me), block)?;
            let mut ops = Vec::with_capacity(2 * n);
            for peer in (0..n).filter(|&p| p != me) {
                ops.push(P2p::Send {
                    ptr: at(src, peer),
                    count,
                    dt,
                    peer,
                });
                ops.push(P2p::Recv {
                    ptr: at(o, peer),
                    count,
                    dt,
                    peer,
                });
            }
            g.group(&ops)?;
            Ok(None)
        })
    }

    fn gather(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        self.check_root(root)?;
        let (n, me) = (self.world, self.rank);
        let dtype = output.dtype();
        let count = gather_count(&input, output.len(), n, me == root)?;
        check_input(&input, dtype, count, "gather")?;
        if count == 0 {
            return Ok(());
        }
        let block = count * dtype.size();
        let dt = nccl_dtype(dtype);
        self.run(Collective::Gather, &input, output, |g, i, o, _| {
            let at = |base: u64, r: usize| base + (r * block) as u64;
            let src = i.unwrap_or(at(o, me));
            if me == root {
                g.copy_d2d(at(o, me), src, block)?;
                let ops: Vec<P2p> = (0..n)
                    .filter(|&p| p != me)
                    .map(|peer| P2p::Recv {
                        ptr: at(o, peer),
                        count,
                        dt,
                        peer,
                    })
                    .collect();
                g.group(&ops)?;
            } else {
                g.group(&[P2p::Send {
                    ptr: src,
                    count,
                    dt,
                    peer: root,
                }])?;
            }
            Ok(None)
        })
    }

    fn scatter(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        self.check_root(root)?;
        let (n, me) = (self.world, self.rank);
        let dtype = output.dtype();
        let in_place = matches!(input, Input::InPlace);
        let count = blocked_count(&input, output.len(), n, "scatter")?;
        if me == root {
            check_input(&input, dtype, n * count, "scatter")?;
        }
        if count == 0 {
            return Ok(());
        }
        let block = count * dtype.size();
        let dt = nccl_dtype(dtype);
        // Non-roots' input is ignored: do not stage it.
        let input = if me == root { input } else { Input::InPlace };
        self.run(Collective::Scatter, &input, output, |g, i, o, _| {
            let at = |base: u64, r: usize| base + (r * block) as u64;
            // Where this rank's block lands: the start of a separate output, or
            // its own block of an in-place one.
            let dst = if in_place { at(o, me) } else { o };
            if me == root {
                let src = i.unwrap_or(o);
                g.copy_d2d(dst, at(src, me), block)?;
                let ops: Vec<P2p> = (0..n)
                    .filter(|&p| p != me)
                    .map(|peer| P2p::Send {
                        ptr: at(src, peer),
                        count,
                        dt,
                        peer,
                    })
                    .collect();
                g.group(&ops)?;
            } else {
                g.group(&[P2p::Recv {
                    ptr: dst,
                    count,
                    dt,
                    peer: root,
                }])?;
            }
            Ok(None)
        })
    }

    fn barrier(&self) -> Result<()> {
        self.locked("barrier", |g| {
            let p = g.scratch.ptr;
            // One-element all_reduce: nobody's finishes before everyone's started.
            // SAFETY: the scratch area holds at least 256 bytes.
            let rc = unsafe {
                (g.api.all_reduce)(
                    p as *const c_void,
                    p as *mut c_void,
                    1,
                    nccl_dtype(DType::U8),
                    nccl_op(ReduceOp::Sum, false),
                    g.comm,
                    g.cu_stream(),
                )
            };
            g.check(rc, "ncclAllReduce (barrier)")?;
            g.wait("barrier")
        })
    }

    fn send(&self, buf: &Buffer<'_>, peer: usize) -> Result<()> {
        self.check_peer(peer)?;
        self.check_device(buf.location(), "the send buffer")?;
        if buf.is_empty() {
            return Ok(());
        }
        let (count, dt) = (buf.len(), nccl_dtype(buf.dtype()));
        self.locked("send", |g| {
            let ptr = match buf.device_ptr() {
                Some(p) => p,
                None => g.stage_host(StageSlot::In, buf)?,
            };
            g.group(&[P2p::Send {
                ptr,
                count,
                dt,
                peer,
            }])?;
            g.wait("send")
        })
    }

    fn recv(&self, buf: &mut BufferMut<'_>, peer: usize) -> Result<()> {
        self.check_peer(peer)?;
        self.check_device(buf.location(), "the receive buffer")?;
        if buf.is_empty() {
            return Ok(());
        }
        let (count, dt) = (buf.len(), nccl_dtype(buf.dtype()));
        self.locked("recv", |g| {
            let dev = buf.device_ptr();
            let ptr = match dev {
                Some(p) => p,
                None => g.stage_out.ensure(buf.byte_len())?,
            };
            g.group(&[P2p::Recv {
                ptr,
                count,
                dt,
                peer,
            }])?;
            g.wait("recv")?;
            if dev.is_none() {
                g.copy_back(buf.host_bytes_mut(B)?, ptr, "recv")?;
            }
            Ok(())
        })
    }
}

impl NcclComm {
    fn check_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.world || peer == self.rank {
            return Err(Error::InvalidArgument(format!(
                "peer {peer} is not another rank of this world of {}",
                self.world
            )));
        }
        Ok(())
    }
}
