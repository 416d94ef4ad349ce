//! Tensors as collective buffers, and a thread that owns a communicator.
//!
//! * [`buffer`] / [`buffer_mut`] view a tch [`Tensor`] as a collectives
//!   [`Buffer`]/[`BufferMut`]: a CPU tensor as a host byte slice, a CUDA tensor as a
//!   device pointer plus device index (what NCCL wants). The tensor must be defined,
//!   dense, contiguous, and of a dtype the collectives know (f32 f64 f16 bf16 i32 i64
//!   u8); anything else is a clear [`Error`], never a wrong view.
//! * [`CommThread`] moves a `Box<dyn Communicator>` onto its own thread and runs
//!   closures there in submission order. A communicator is `Send` but not `Sync`, so
//!   this is how one training thread can keep computing while collectives run: it
//!   hands work over a channel instead of sharing the communicator.
//!
//! # Aliasing
//! A view borrows the tensor *handle* it was made from, but tch handles share
//! storage (`shallow_clone`, `narrow`, the autograd graph). As with tch's own
//! in-place operations, nothing stops another handle from touching the same memory
//! while the view lives: don't, or the collective reads or writes torn data.

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use collectives::{Backend, Buffer, BufferMut, Communicator, DType, Input, Location, ReduceOp};
use tch::{Device, Kind, Tensor};

use crate::{Error, Result};

/// The collectives element type of a tch kind, or an error naming the kind.
pub fn dtype(kind: Kind) -> Result<DType> {
    Ok(match kind {
        Kind::Float => DType::F32,
        Kind::Double => DType::F64,
        Kind::Half => DType::F16,
        Kind::BFloat16 => DType::BF16,
        Kind::Int => DType::I32,
        Kind::Int64 => DType::I64,
        Kind::Uint8 => DType::U8,
        other => {
            return Err(Error::InvalidArgument(format!(
                "tensors of kind {other:?} cannot go through a collective \
                 (supported: f32 f64 f16 bf16 i32 i64 u8)"
            )));
        }
    })
}

/// Where memory on `device` is, as a backend is asked about it
/// ([`Backend::supports`]); anything but CUDA counts as the host.
pub fn location(device: Device) -> Location {
    match device {
        Device::Cuda(i) => Location::Cuda {
            device: i32::try_from(i).unwrap_or(i32::MAX),
        },
        _ => Location::Host,
    }
}

/// Where a tensor's memory is, once checked: host, or CUDA device `i`.
enum Place {
    Host,
    Cuda(i32),
}

/// Checks everything a raw view relies on; returns dtype, element count, byte
/// length and place.
fn check(t: &Tensor) -> Result<(DType, usize, usize, Place)> {
    if !t.defined() {
        return Err(Error::InvalidArgument(
            "an undefined tensor cannot be a collective buffer".into(),
        ));
    }
    if t.is_sparse() || t.is_mkldnn() {
        return Err(Error::InvalidArgument(
            "only dense (strided) tensors can be collective buffers".into(),
        ));
    }
    // A strided view (a transpose, a column) has gaps or a different order than
    // `numel` elements from `data_ptr`: the raw view would read the wrong elements.
    if !t.is_contiguous() {
        return Err(Error::InvalidArgument(format!(
            "a tensor of shape {:?} with strides {:?} is not contiguous; \
             call .contiguous() (a copy) and reduce that",
            t.size(),
            t.stride()
        )));
    }
    let dtype = dtype(t.f_kind()?)?;
    let numel = t.numel();
    let bytes = numel.checked_mul(dtype.size()).ok_or_else(|| {
        Error::InvalidArgument(format!("{numel} elements of {dtype} overflow usize"))
    })?;
    let place =
        match t.device() {
            Device::Cpu => Place::Host,
            Device::Cuda(i) => Place::Cuda(i32::try_from(i).map_err(|_| {
                Error::InvalidArgument(format!("CUDA device index {i} out of range"))
            })?),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "tensors on {other:?} cannot go through a collective (CPU or CUDA only)"
                )));
            }
        };
    Ok((dtype, numel, bytes, place))
}

/// A read-only collectives view of `t`'s elements (see the module docs on aliasing).
pub fn buffer(t: &Tensor) -> Result<Buffer<'_>> {
    let (dtype, numel, bytes, place) = check(t)?;
    Ok(match place {
        Place::Host if bytes == 0 => Buffer::from_bytes(dtype, &[])?,
        Place::Host => {
            // SAFETY: `t` is defined, dense and contiguous on the CPU, so its
            // `numel` elements are the `bytes` bytes from `data_ptr` (which already
            // includes the storage offset); the storage lives at least as long as
            // the borrowed handle.
            let s = unsafe { std::slice::from_raw_parts(t.data_ptr() as *const u8, bytes) };
            Buffer::from_bytes(dtype, s)?
        }
        // SAFETY: as above, on CUDA device `device`.
        Place::Cuda(device) => unsafe {
            Buffer::from_device_ptr(t.data_ptr() as u64, numel, dtype, device)
        },
    })
}

/// A writable collectives view of `t`'s elements (see the module docs on aliasing).
/// Works on tensors that require grad too: the write bypasses autograd, which is
/// what gradient and parameter synchronisation want.
pub fn buffer_mut(t: &mut Tensor) -> Result<BufferMut<'_>> {
    let (dtype, numel, bytes, place) = check(t)?;
    Ok(match place {
        Place::Host if bytes == 0 => BufferMut::from_bytes(dtype, &mut [])?,
        Place::Host => {
            // SAFETY: as in `buffer`; `&mut` on the handle is the caller's promise
            // that nothing else uses the storage while the view lives.
            let s = unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut u8, bytes) };
            BufferMut::from_bytes(dtype, s)?
        }
        // SAFETY: as above, on CUDA device `device`.
        Place::Cuda(device) => unsafe {
            BufferMut::from_device_ptr(t.data_ptr() as u64, numel, dtype, device)
        },
    })
}

/// Averages `grads` (f32 tensors, e.g. every parameter's gradient) over the
/// ranks in place with one all-reduce of their concatenation: data
/// parallelism's gradient step in its plainest form (DDP with one bucket).
pub fn all_reduce_mean_flat(comm: &dyn Communicator, grads: &[Tensor]) -> Result<()> {
    let parts = grads
        .iter()
        .map(|g| g.f_reshape([-1]))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut flat = Tensor::f_cat(&parts, 0)?.f_to_kind(Kind::Float)?;
    comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut flat)?, ReduceOp::Avg)?;
    let mut offset = 0;
    for g in grads {
        let n = g.numel() as i64;
        g.shallow_clone()
            .f_copy_(&flat.f_narrow(0, offset, n)?.f_view(g.size().as_slice())?)?;
        offset += n;
    }
    Ok(())
}

/// Work for the communicator thread.
type Job = Box<dyn FnOnce(&dyn Communicator) + Send>;

/// A communicator on its own thread, running submitted closures one at a time in
/// submission order (the order every rank must agree on).
///
/// Dropping it lets queued work finish and the thread end; [`CommThread::join`]
/// also hands the communicator back.
pub struct CommThread {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<Box<dyn Communicator>>>,
    backend: Backend,
    rank: usize,
    world_size: usize,
    timeout: Duration,
}

impl std::fmt::Debug for CommThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommThread")
            .field("backend", &self.backend)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .finish()
    }
}

impl CommThread {
    /// Moves `comm` onto a new thread. `timeout` bounds every [`call`](Self::call)
    /// (queued work included): make it longer than the communicator's own timeout,
    /// so that the collective reports its own, more precise, error first.
    pub fn spawn(comm: Box<dyn Communicator>, timeout: Duration) -> Result<CommThread> {
        let (backend, rank, world_size) = (comm.backend(), comm.rank(), comm.world_size());
        let (tx, rx) = mpsc::channel::<Job>();
        let handle = std::thread::Builder::new()
            .name(format!("comm-{rank}"))
            .spawn(move || {
                for job in rx {
                    // A panicking job must not take the communicator down with it:
                    // its reply channel is dropped, which its caller sees as an error.
                    let _ = panic::catch_unwind(AssertUnwindSafe(|| job(comm.as_ref())));
                }
                comm
            })
            .map_err(|e| Error::InvalidArgument(format!("cannot start the comm thread: {e}")))?;
        Ok(CommThread {
            tx: Some(tx),
            handle: Some(handle),
            backend,
            rank,
            world_size,
            timeout,
        })
    }

    /// The communicator's backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The bound on [`call`](Self::call) waits.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Queues `job`; it runs after everything submitted before it. Its result must
    /// travel back through a channel it captures.
    pub fn submit(&self, job: impl FnOnce(&dyn Communicator) + Send + 'static) -> Result<()> {
        let tx = self.tx.as_ref().ok_or_else(gone)?;
        tx.send(Box::new(job)).map_err(|_| gone())
    }

    /// Runs `f` on the communicator thread after the queued work and waits (at most
    /// the timeout) for its result.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Communicator) -> R + Send + 'static,
    ) -> Result<R> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(move |c| {
            let _ = tx.send(f(c));
        })?;
        match rx.recv_timeout(self.timeout) {
            Ok(r) => Ok(r),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(collectives::Error::Timeout {
                what: format!("rank {}'s communicator thread", self.rank),
                after: self.timeout,
            }
            .into()),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Error::InvalidArgument(
                "a job on the communicator thread panicked".into(),
            )),
        }
    }

    /// Stops the thread once its queue is empty and returns the communicator.
    /// Blocks until the running collective ends (each is bounded by the
    /// communicator's own timeout).
    pub fn join(mut self) -> Result<Box<dyn Communicator>> {
        drop(self.tx.take());
        let handle = self.handle.take().ok_or_else(gone)?;
        handle
            .join()
            .map_err(|_| Error::InvalidArgument("the communicator thread panicked".into()))
    }
}

impl Drop for CommThread {
    fn drop(&mut self) {
        // Closing the channel ends the thread after its queue; it is not joined here,
        // so a drop never blocks on a collective whose peers are gone.
        drop(self.tx.take());
    }
}

fn gone() -> Error {
    Error::InvalidArgument("the communicator thread has stopped".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn cpu_tensor_views_see_its_elements_and_writes_land_in_it() {
        let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([2, 2]);
        let b = buffer(&t).unwrap();
        assert_eq!((b.dtype(), b.len(), b.byte_len()), (DType::F32, 4, 16));
        let bytes = b.host_bytes(Backend::Reference).unwrap();
        assert_eq!(bytes[4..8], 2.0f32.to_ne_bytes());

        // A row of a matrix is contiguous with a storage offset: the view starts there.
        let mut row = t.get(1);
        let mut bm = buffer_mut(&mut row).unwrap();
        let host = bm.host_bytes_mut(Backend::Reference).unwrap();
        host[..4].copy_from_slice(&9.5f32.to_ne_bytes());
        assert_eq!(
            Vec::<f32>::try_from(t.flatten(0, -1)).unwrap(),
            [1.0, 2.0, 9.5, 4.0]
        );
    }

    #[test]
    fn every_supported_kind_maps_and_others_are_named() {
        for (kind, dt) in [
            (Kind::Float, DType::F32),
            (Kind::Double, DType::F64),
            (Kind::Half, DType::F16),
            (Kind::BFloat16, DType::BF16),
            (Kind::Int, DType::I32),
            (Kind::Int64, DType::I64),
            (Kind::Uint8, DType::U8),
        ] {
            let t = Tensor::zeros([3], (kind, Device::Cpu));
            assert_eq!(buffer(&t).unwrap().dtype(), dt);
            assert_eq!(buffer(&t).unwrap().byte_len(), 3 * dt.size());
        }
        let e = buffer(&Tensor::zeros([3], (Kind::Bool, Device::Cpu)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Bool"), "{e}");
    }

    #[test]
    fn non_contiguous_undefined_and_empty_tensors() {
        let t = Tensor::arange(6, (Kind::Float, Device::Cpu)).reshape([2, 3]);
        let e = buffer(&t.tr()).unwrap_err().to_string();
        assert!(e.contains("not contiguous") && e.contains("[3, 2]"), "{e}");
        let e = buffer(&Tensor::new()).unwrap_err().to_string();
        assert!(e.contains("undefined"), "{e}");
        let mut empty = Tensor::zeros([0], (Kind::Float, Device::Cpu));
        assert!(buffer_mut(&mut empty).unwrap().is_empty());
    }

    /// The comm thread runs jobs in order, hands results back, survives a panicking
    /// job, and returns the communicator.
    #[test]
    fn comm_thread_runs_jobs_in_order_and_survives_a_panic() {
        use collectives::backends::{self, Options};
        use collectives::rendezvous::MemStore;
        let store = MemStore::new(Duration::from_secs(10));
        let opts = Options::new([1; 16]).unwrap();
        let comm = backends::reference(&store, 0, 1, &opts).unwrap();
        let ct = CommThread::spawn(Box::new(comm), Duration::from_secs(10)).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..3 {
            let tx = tx.clone();
            ct.submit(move |_| tx.send(i).unwrap()).unwrap();
        }
        assert_eq!(rx.iter().take(3).collect::<Vec<_>>(), [0, 1, 2]);
        let e = ct
            .call(|_| -> usize { panic!("boom") })
            .unwrap_err()
            .to_string();
        assert!(e.contains("panicked"), "{e}");
        assert_eq!(ct.call(|c| c.world_size()).unwrap(), 1);
        let t = Tensor::from_slice(&[3.0f64, 4.0]);
        let t2 = t.shallow_clone();
        let done = ct.call(move |c| {
            let mut t = t2;
            let mut b = buffer_mut(&mut t).unwrap();
            c.all_reduce(
                collectives::Input::InPlace,
                &mut b,
                collectives::ReduceOp::Sum,
            )
            .map_err(|e| e.to_string())
        });
        done.unwrap().unwrap();
        // A world of one: the sum is the input itself.
        assert_eq!(Vec::<f64>::try_from(&t).unwrap(), [3.0, 4.0]);
        assert_eq!(ct.join().unwrap().rank(), 0);
    }
}
