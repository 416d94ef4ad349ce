//! The NCCL backend. Without a CUDA device these check that `connect` fails
//! with a clear "no CUDA device" error (no panic, no wait), say "skipped" on the
//! real stderr for the GPU cases (libtest captures `eprintln!`, which would make a
//! skip look like a pass), and fail instead when RINGSIDE_REQUIRE_CUDA=1. With
//! devices they run the conformance suite on one GPU and on all of them (ranks
//! as threads), and a native device-memory all_reduce.
//!
//! On a GPU machine: `scripts/gpu-check.sh` (it sets RINGSIDE_REQUIRE_CUDA=1).
#![cfg(feature = "nccl")]

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use collectives::backends::nccl::{self, cuda_device_count, nccl_in_torch, probe_nccl};
use collectives::backends::{self, Options};
use collectives::conformance::{self, SuiteConfig};
use collectives::rendezvous::MemStore;
use collectives::{Backend, BufferMut, Communicator, DType, Input, ReduceOp};

fn required() -> bool {
    std::env::var_os("RINGSIDE_REQUIRE_CUDA").is_some_and(|v| v == "1")
}

/// Straight to file descriptor 2: libtest does not capture it.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The number of CUDA devices, or `None` after printing why the test is skipped.
fn gpus(test: &str) -> Option<usize> {
    match cuda_device_count() {
        Ok(n) => Some(n),
        Err(e) => {
            assert!(!required(), "RINGSIDE_REQUIRE_CUDA=1 but {e}");
            let msg = e.to_string();
            assert!(msg.contains("no CUDA device"), "unclear error: {msg}");
            say(&format!("{test}: skipped: no CUDA device ({msg})"));
            None
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
        say(&format!(
            "connect_without_a_device_says_no_cuda_device: not applicable: {n} CUDA device(s)"
        ));
        return;
    }
    assert!(
        !required(),
        "RINGSIDE_REQUIRE_CUDA=1 but there is no CUDA device"
    );
    let store = MemStore::new(Duration::from_secs(5));
    let err = connect_err(&store, 0, 1).expect("connect succeeded without a CUDA device");
    assert!(err.contains("no CUDA device"), "{err}");
}

/// A rank other than 0 must fail on the missing device before it waits on the
/// store for rank 0's unique id (which would take the whole store timeout).
#[test]
fn connect_without_a_device_fails_before_waiting_on_the_store() {
    if let Ok(n) = cuda_device_count() {
        say(&format!(
            "connect_without_a_device_fails_before_waiting_on_the_store: not applicable: \
             {n} CUDA device(s)"
        ));
        return;
    }
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

/// cudarc's own loader never tries `libnccl.so.2`, the only name the torch wheel
/// ships; ringside's must find it there with no LD_LIBRARY_PATH, GPU or not.
#[test]
fn libnccl_is_found_in_the_torch_wheel() {
    let Some(torch) = std::env::var_os("LIBTORCH") else {
        assert!(
            !required(),
            "RINGSIDE_REQUIRE_CUDA=1 but LIBTORCH is not set"
        );
        say("libnccl_is_found_in_the_torch_wheel: skipped: LIBTORCH is not set");
        return;
    };
    let expected = nccl_in_torch(std::path::Path::new(&torch));
    if !expected.exists() && std::env::var_os(nccl::NCCL_LIB_ENV).is_none() {
        assert!(!required(), "no {}", expected.display());
        say(&format!(
            "libnccl_is_found_in_the_torch_wheel: skipped: {} does not exist (a CPU-only torch?)",
            expected.display()
        ));
        return;
    }
    let (path, version) = probe_nccl().unwrap();
    assert!(version.starts_with("2."), "version {version} from {path}");
    assert!(path.contains("libnccl.so.2"), "{path}");
    say(&format!(
        "libnccl_is_found_in_the_torch_wheel: NCCL {version} from {path}"
    ));
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
    if gpus("conformance_on_one_gpu").is_none() {
        return;
    }
    let reports = with_ranks(1, |_, comm| {
        conformance::run(comm, &SuiteConfig::full(), |_, _| {}).unwrap()
    });
    check_reports("world 1", &reports);
}

#[test]
fn conformance_on_every_gpu_as_threads() {
    let Some(n) = gpus("conformance_on_every_gpu_as_threads") else {
        return;
    };
    if n < 2 {
        say(&format!(
            "conformance_on_every_gpu_as_threads: skipped: needs 2 CUDA devices, found {n}"
        ));
        return;
    }
    let reports = with_ranks(n, |_, comm| {
        conformance::run(comm, &SuiteConfig::full(), |_, _| {}).unwrap()
    });
    check_reports(&format!("world {n}"), &reports);
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
    let Some(n) = gpus("device_buffers_all_reduce_in_place") else {
        return;
    };
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
}
