//! The NCCL backend. Without a CUDA device these check that `connect` fails
//! with a clear "no CUDA device" error (no panic, no wait), and the GPU cases
//! skip visibly through `collectives::testing` (on the real stderr; a failure
//! instead when RINGSIDE_REQUIRE_CUDA=1). With
//! devices they run the conformance suite on one GPU and on all of them (ranks
//! as threads), and a native device-memory all_reduce.
//!
//! On a GPU machine: `scripts/gpu-check.sh` (it sets RINGSIDE_REQUIRE_CUDA=1).
#![cfg(feature = "nccl")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use collectives::backends::nccl::{self, cuda_device_count, nccl_in_torch, probe_nccl};
use collectives::backends::{self, Options};
use collectives::conformance::{self, SuiteConfig};
use collectives::rendezvous::MemStore;
use collectives::testing::{cuda_required, note, skip, skip_without_cuda};
use collectives::{Backend, BufferMut, Communicator, DType, Input, ReduceOp};

/// Runs `body(n)` with the number of CUDA devices, at least `need` of them;
/// otherwise a visible skip (a failure under RINGSIDE_REQUIRE_CUDA=1 when
/// there is no device at all).
fn on_gpus(test: &str, need: usize, body: impl FnOnce(usize)) {
    match cuda_device_count() {
        Ok(n) if n >= need => body(n),
        Ok(n) => skip(test, &format!("needs {need} CUDA devices, found {n}")),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("no CUDA device"), "unclear error: {msg}");
            skip_without_cuda(test, &format!("no CUDA device ({msg})"));
        }
    }
}

fn opts(timeout: Duration) -> Options {
    let mut o = Options::new([3; 16]).unwrap();
    o.timeout = timeout;
    o
}

fn connect_err(store: &MemStore, rank: usize, world: usize) -> Option<String> {
    match backends::connect(
        Backend::Nccl,
        store,
        rank,
        world,
        &opts(Duration::from_secs(5)),
    ) {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// Without a device, connect said something vague or panicked inside cudarc.
#[test]
fn connect_without_a_device_says_no_cuda_device() {
    if let Ok(n) = cuda_device_count() {
        note(&format!(
            "connect_without_a_device_says_no_cuda_device: not applicable: {n} CUDA device(s)"
        ));
    } else {
        assert!(
            !cuda_required(),
            "RINGSIDE_REQUIRE_CUDA=1 but there is no CUDA device"
        );
        let store = MemStore::new(Duration::from_secs(5));
        let err = connect_err(&store, 0, 1).expect("connect succeeded without a CUDA device");
        assert!(err.contains("no CUDA device"), "{err}");
    }
}

/// A rank other than 0 must fail on the missing device before it waits on the
/// store for rank 0's unique id (which would take the whole store timeout).
#[test]
fn connect_without_a_device_fails_before_waiting_on_the_store() {
    if let Ok(n) = cuda_device_count() {
        note(&format!(
            "connect_without_a_device_fails_before_waiting_on_the_store: not applicable: \
             {n} CUDA device(s)"
        ));
    } else {
        let store = MemStore::new(Duration::from_secs(30));
        let start = Instant::now();
        let err = connect_err(&store, 1, 2).expect("connect succeeded without a CUDA device");
        assert!(err.contains("no CUDA device"), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }
}

/// cudarc's own loader never tries `libnccl.so.2`, the only name the torch wheel
/// ships; ringside's must find it there with no LD_LIBRARY_PATH, GPU or not.
#[test]
fn libnccl_is_found_in_the_torch_wheel() {
    const TEST: &str = "libnccl_is_found_in_the_torch_wheel";
    let Some(torch) = std::env::var_os("LIBTORCH") else {
        return skip_without_cuda(TEST, "LIBTORCH is not set");
    };
    let expected = nccl_in_torch(std::path::Path::new(&torch));
    if !expected.exists() && std::env::var_os(nccl::NCCL_LIB_ENV).is_none() {
        return skip_without_cuda(
            TEST,
            &format!("{} does not exist (a CPU-only torch?)", expected.display()),
        );
    }
    let (path, version) = probe_nccl().unwrap();
    assert!(version.starts_with("2."), "version {version} from {path}");
    assert!(path.contains("libnccl.so.2"), "{path}");
    note(&format!("{TEST}: NCCL {version} from {path}"));
}

fn check_reports(what: &str, reports: &[conformance::SuiteReport]) {
    for (rank, r) in reports.iter().enumerate() {
        assert!(
            r.cases > 300,
            "{what} rank {rank}: only {} cases ran",
            r.cases
        );
        assert!(
            r.failures.is_empty(),
            "{what} rank {rank}: {:#?}",
            r.failures
        );
        assert!(
            r.unsupported.is_empty(),
            "{what} rank {rank}: {:#?}",
            r.unsupported
        );
    }
}

/// Runs `body(rank, comm)` on `world` threads, one NCCL rank (and device) each.
fn with_ranks<T: Send>(
    world: usize,
    body: impl Fn(usize, &dyn Communicator) -> T + Sync,
) -> Vec<T> {
    let store = Arc::new(MemStore::new(Duration::from_secs(60)));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let store = store.clone();
                let body = &body;
                s.spawn(move || {
                    let comm = backends::connect(
                        Backend::Nccl,
                        store.as_ref(),
                        rank,
                        world,
                        &opts(Duration::from_secs(60)),
                    )
                    .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                    body(rank, comm.as_ref())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn conformance_on_one_gpu() {
    on_gpus("conformance_on_one_gpu", 1, |_| {
        let reports = with_ranks(1, |_, comm| {
            conformance::run(comm, &SuiteConfig::full(), |_, _| {}).unwrap()
        });
        check_reports("world 1", &reports);
    });
}

#[test]
fn conformance_on_every_gpu_as_threads() {
    on_gpus("conformance_on_every_gpu_as_threads", 2, |n| {
        let reports = with_ranks(n, |_, comm| {
            conformance::run(comm, &SuiteConfig::full(), |_, _| {}).unwrap()
        });
        check_reports(&format!("world {n}"), &reports);
    });
}

/// Device memory for one test thread on `device`, through the driver API.
struct DeviceVec {
    ptr: u64,
    bytes: usize,
}

impl DeviceVec {
    fn from_host(device: i32, host: &[u8]) -> Self {
        use cudarc::driver::result as cu;
        cu::init().unwrap();
        let dev = cu::device::get(device).unwrap();
        unsafe {
            let ctx = cu::primary_ctx::retain(dev).unwrap();
            cu::ctx::set_current(ctx).unwrap();
            let ptr = cu::malloc_sync(host.len()).unwrap();
            cu::memcpy_htod_sync(ptr, host).unwrap();
            DeviceVec {
                ptr,
                bytes: host.len(),
            }
        }
    }
    fn to_host(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes];
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut out, self.ptr).unwrap() };
        out
    }
}

impl Drop for DeviceVec {
    fn drop(&mut self) {
        unsafe {
            let _ = cudarc::driver::result::free_sync(self.ptr);
        }
    }
}

/// The native path: buffers in device memory, f32 (ncclAvg) and i32 (sum, then
/// divided on the host) averages, on every device at once.
#[test]
fn device_buffers_all_reduce_in_place() {
    on_gpus("device_buffers_all_reduce_in_place", 1, |n| {
        let results = with_ranks(n, |rank, comm| {
            let device = rank as i32 % n as i32;
            let len = 1000;
            let f: Vec<f32> = (0..len)
                .map(|i| (i % 7) as f32 * 4.0 + rank as f32)
                .collect();
            let i: Vec<i32> = (0..len).map(|i| (i % 5) as i32 - 7 + rank as i32).collect();
            let df = DeviceVec::from_host(device, bytemuck::cast_slice(&f));
            let di = DeviceVec::from_host(device, bytemuck::cast_slice(&i));
            for (d, dtype) in [(&df, DType::F32), (&di, DType::I32)] {
                for op in [ReduceOp::Sum, ReduceOp::Avg] {
                    // Restore the inputs: each pass works in place.
                    let host: Vec<u8> = if dtype == DType::F32 {
                        bytemuck::cast_slice(&f).to_vec()
                    } else {
                        bytemuck::cast_slice(&i).to_vec()
                    };
                    unsafe { cudarc::driver::result::memcpy_htod_sync(d.ptr, &host).unwrap() };
                    let mut out = unsafe { BufferMut::from_device_ptr(d.ptr, len, dtype, device) };
                    comm.all_reduce(Input::InPlace, &mut out, op).unwrap();
                    let got = d.to_host();
                    let world = n as i64;
                    let ranks_sum: i64 = (0..world).sum();
                    for k in 0..len {
                        let (want_f, want_i) = {
                            let fs = ((k % 7) as i64 * 4 * world + ranks_sum) as f32;
                            let is = ((k % 5) as i64 - 7) * world + ranks_sum;
                            match op {
                                ReduceOp::Avg => (fs / n as f32, (is / world) as i32),
                                _ => (fs, is as i32),
                            }
                        };
                        if dtype == DType::F32 {
                            let v: f32 = bytemuck::pod_read_unaligned(&got[4 * k..4 * k + 4]);
                            // ncclAvg pre-multiplies by 1/n: allow one rounding.
                            assert!(
                                (v - want_f).abs() <= want_f.abs() * 1e-6,
                                "rank {rank} {op} f32[{k}] = {v}, expected {want_f}"
                            );
                        } else {
                            let v: i32 = bytemuck::pod_read_unaligned(&got[4 * k..4 * k + 4]);
                            assert_eq!(v, want_i, "rank {rank} {op} i32[{k}]");
                        }
                    }
                }
            }
            comm.barrier().unwrap();
        });
        assert_eq!(results.len(), n);
    });
}
