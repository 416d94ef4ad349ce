//! The device side of an NCCL communicator: its CUDA context, stream and
//! staging memory, and the steps every collective is made of (stage host
//! buffers in, check NCCL's return codes, wait on the stream with a deadline,
//! group point-to-point calls, copy results back). `mod.rs` composes them
//! into collectives.

use super::*;

/// Device memory owned by the communicator, grown on demand.
#[derive(Default)]
pub(super) struct DevMem {
    pub(super) ptr: u64,
    pub(super) bytes: usize,
}

impl DevMem {
    /// At least `bytes` bytes (0 bytes: a null pointer, never dereferenced).
    pub(super) fn ensure(&mut self, bytes: usize) -> Result<u64> {
        if bytes > self.bytes {
            self.free();
            // Round up so slowly growing sizes do not reallocate every call.
            let want = bytes.next_power_of_two().max(256);
            // SAFETY: the communicator's context is current (every caller sets it).
            self.ptr = unsafe { cu::malloc_sync(want) }.map_err(|e| cuda("cuMemAlloc", e))?;
            self.bytes = want;
        }
        Ok(self.ptr)
    }
    pub(super) fn free(&mut self) {
        if self.ptr != 0 {
            // SAFETY: allocated by malloc_sync and no longer used by the stream
            // (every call waits for its stream before returning).
            let _ = unsafe { cu::free_sync(self.ptr) };
        }
        self.ptr = 0;
        self.bytes = 0;
    }
}

pub(super) struct Inner {
    pub(super) api: &'static Api,
    pub(super) rank: usize,
    pub(super) device: i32,
    pub(super) timeout: Duration,
    pub(super) dev: cusys::CUdevice,
    pub(super) ctx: cusys::CUcontext,
    pub(super) stream: cusys::CUstream,
    pub(super) comm: ncclComm_t,
    pub(super) stage_in: DevMem,
    pub(super) stage_out: DevMem,
    pub(super) scratch: DevMem,
    pub(super) broken: Option<String>,
}

// SAFETY: CUDA contexts, streams and NCCL communicators are plain handles that
// may be used from any thread once the context is made current, which every
// use does (`Inner::bind`). The Mutex makes sure only one thread uses them at a time.
unsafe impl Send for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.ctx.is_null() {
            return;
        }
        let _ = guard("dropping the communicator", || {
            // SAFETY: handles created in `connect`, released once, here.
            unsafe {
                let _ = cu::ctx::set_current(self.ctx);
                if !self.comm.is_null() {
                    if self.broken.is_some() {
                        (self.api.comm_abort)(self.comm);
                    } else {
                        (self.api.comm_destroy)(self.comm);
                    }
                }
                self.stage_in.free();
                self.stage_out.free();
                self.scratch.free();
                if !self.stream.is_null() {
                    let _ = cu::stream::destroy(self.stream);
                }
                let _ = cu::primary_ctx::release(self.dev);
            }
            Ok(())
        });
    }
}

#[derive(Clone, Copy)]
pub(super) enum StageSlot {
    In,
    Out,
}

pub(super) fn last(api: &Api, comm: ncclComm_t) -> String {
    let l = api.last_error(comm);
    if l.is_empty() {
        " (set NCCL_DEBUG=WARN for details)".into()
    } else {
        format!(": {l}")
    }
}

/// How eagerly [`Inner::wait_paced`] looks at the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pace {
    /// The caller waits for the end: spin for the first 2 ms (small messages
    /// end within microseconds), then poll every 100 µs.
    Eager,
    /// The caller was told the collective is queued and goes on without
    /// waiting (DDP queues its copy-back meanwhile): poll every 100 µs from the
    /// start. Each poll (`cuStreamQuery`) takes the driver's lock on the
    /// context, and a thread spinning on it slows the thread that is launching
    /// the next kernels in the same context; PyTorch's NCCL watchdog, likewise,
    /// looks at its work only every so often.
    Relaxed,
}

impl Inner {
    /// Makes this device's context current on the calling thread.
    pub(super) fn bind(&self) -> Result<()> {
        // SAFETY: a live primary context retained in `connect`.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(|e| cuda("cuCtxSetCurrent", e))
    }

    pub(super) fn cu_stream(&self) -> cudaStream_t {
        self.stream.cast()
    }

    /// Marks the communicator broken and aborts NCCL so that peers stop waiting.
    pub(super) fn fail(&mut self, e: &Error) {
        self.broken = Some(e.to_string());
        if !self.comm.is_null() {
            let _ = self.bind();
            // SAFETY: a live communicator; abort also releases it.
            unsafe { (self.api.comm_abort)(self.comm) };
            self.comm = std::ptr::null_mut();
        }
    }

    /// Copies a host buffer into staging memory; returns the device pointer.
    pub(super) fn stage_host(&mut self, slot: StageSlot, b: &Buffer<'_>) -> Result<u64> {
        let bytes = b.host_bytes(B)?;
        let mem = match slot {
            StageSlot::In => &mut self.stage_in,
            StageSlot::Out => &mut self.stage_out,
        };
        let p = mem.ensure(bytes.len())?;
        if !bytes.is_empty() {
            // SAFETY: `p` has room for `bytes`; pageable copies finish reading the
            // host memory before returning.
            unsafe { cu::memcpy_htod_async(p, bytes, self.stream) }
                .map_err(|e| cuda("cuMemcpyHtoDAsync", e))?;
        }
        Ok(p)
    }

    /// Copies `host.len()` bytes at device pointer `src` into `host` and waits.
    pub(super) fn copy_back(&self, host: &mut [u8], src: u64, what: &str) -> Result<()> {
        if host.is_empty() {
            return Ok(());
        }
        // SAFETY: `src` holds at least `host.len()` bytes (staging or caller memory).
        unsafe { cu::memcpy_dtoh_async(host, src, self.stream) }
            .map_err(|e| cuda("cuMemcpyDtoHAsync", e))?;
        self.wait(what)
    }

    /// Checks an NCCL return code.
    pub(super) fn check(&self, rc: Res, call: &str) -> Result<()> {
        if rc == SUCCESS {
            return Ok(());
        }
        Err(lib_error(
            format!("NCCL {call}"),
            self.api.error_string(rc) + &last(self.api, self.comm),
        ))
    }

    /// Waits for the stream, watching NCCL's asynchronous errors and the deadline.
    pub(super) fn wait(&self, what: &str) -> Result<()> {
        self.wait_paced(what, Pace::Eager)
    }

    /// [`wait`](Self::wait) at `pace`.
    pub(super) fn wait_paced(&self, what: &str, pace: Pace) -> Result<()> {
        let (rank, device) = (self.rank, self.device);
        let deadline = Deadline::after(self.timeout);
        let start = Instant::now();
        loop {
            // SAFETY: a live stream of the current context.
            match unsafe { cusys::cuStreamQuery(self.stream) } {
                cusys::CUresult::CUDA_SUCCESS => return Ok(()),
                cusys::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(cuda("cuStreamQuery", cu::DriverError(e))),
            }
            let mut async_rc: Res = SUCCESS;
            // SAFETY: a live communicator; writes one int.
            let rc = unsafe { (self.api.comm_get_async_error)(self.comm, &mut async_rc) };
            self.check(rc, "ncclCommGetAsyncError")?;
            if async_rc != SUCCESS && async_rc != IN_PROGRESS {
                return Err(lib_error(
                    format!("NCCL {what} (rank {rank}, device {device}), asynchronously"),
                    self.api.error_string(async_rc) + &last(self.api, self.comm),
                ));
            }
            deadline.check(|| format!("NCCL {what} to finish on rank {rank} (device {device})"))?;
            // Spin briefly for small-message latency, then stop burning a core.
            if pace == Pace::Eager && start.elapsed() < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// Queues `ncclSend`/`ncclRecv` pairs as one group.
    pub(super) fn group(&self, ops: &[P2p]) -> Result<()> {
        // SAFETY: group calls only bracket the calls below.
        self.check(unsafe { (self.api.group_start)() }, "ncclGroupStart")?;
        let mut first_err = Ok(());
        for op in ops {
            let (rc, call) = match *op {
                // SAFETY: pointers and counts were validated by the caller.
                P2p::Send {
                    ptr,
                    count,
                    dt,
                    peer,
                } => (
                    unsafe {
                        (self.api.send)(
                            ptr as *const c_void,
                            count,
                            dt,
                            peer as i32,
                            self.comm,
                            self.cu_stream(),
                        )
                    },
                    "ncclSend",
                ),
                // SAFETY: as above.
                P2p::Recv {
                    ptr,
                    count,
                    dt,
                    peer,
                } => (
                    unsafe {
                        (self.api.recv)(
                            ptr as *mut c_void,
                            count,
                            dt,
                            peer as i32,
                            self.comm,
                            self.cu_stream(),
                        )
                    },
                    "ncclRecv",
                ),
            };
            if first_err.is_ok() {
                first_err = self.check(rc, call);
            }
        }
        // SAFETY: closes the group opened above (always, so NCCL's group depth stays right).
        let end = self.check(unsafe { (self.api.group_end)() }, "ncclGroupEnd");
        first_err.and(end)
    }

    /// Device-to-device copy on the stream.
    pub(super) fn copy_d2d(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 || dst == src {
            return Ok(());
        }
        // SAFETY: both ranges were validated by the caller.
        unsafe { cu::memcpy_dtod_async(dst, src, bytes, self.stream) }
            .map_err(|e| cuda("cuMemcpyDtoDAsync", e))
    }
}

pub(super) enum P2p {
    Send {
        ptr: u64,
        count: usize,
        dt: Res,
        peer: usize,
    },
    Recv {
        ptr: u64,
        count: usize,
        dt: Res,
        peer: usize,
    },
}
