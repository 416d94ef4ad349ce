//! `cargo bench -p ringside-benches`: the backends side by side at world 2.
//!
//! Each backend gets one world of two ranks inside this process: rank 0 on
//! criterion's thread, rank 1 on a worker thread, each with its own
//! communicator, rendezvous through a shared in-memory store
//! ([`MemStore`]). For every sample criterion asks for `iters` calls; rank 1
//! is told the case and the count over a channel, both ranks meet at a
//! [`Barrier`] (outside the timed region), run `iters` back-to-back calls and
//! time them; the sample's time is the slower rank's. Unlike `ringside bench`
//! there is no barrier between iterations: this is the throughput of a loop
//! of collectives, as a training step issues them.
//!
//! Groups: one per collective (all_reduce in place, broadcast in place from
//! rank 0, all_gather into a separate output), f32, sizes in nccl-tests'
//! sense (all_gather: the gathered total), `Throughput::Bytes` = that size,
//! so criterion's throughput is nccl-tests' algbw (busbw = algbw x 1 for
//! all_reduce and broadcast at world 2, x 0.5 for all_gather).
//!
//! MPI and NCCL are absent, and say why at start-up: see [`absent`].

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use collectives::algorithms::Algo;
use collectives::backends::{self, Options};
use collectives::rendezvous::MemStore;
use collectives::transport::TransportKind;
use collectives::{Backend, Buffer, BufferMut, Collective, Communicator, Input, ReduceOp};
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};

const WORLD: usize = 2;
/// Bounds every wait inside a collective, so a broken backend fails a bench
/// instead of hanging it.
const TIMEOUT: Duration = Duration::from_secs(60);
const COLLECTIVES: [Collective; 3] = [
    Collective::AllReduce,
    Collective::Broadcast,
    Collective::AllGather,
];
/// Message sizes (nccl-tests' S). 8 B rather than 4 B: all_gather needs at
/// least one f32 per rank.
const SIZES: [usize; 5] = [8, 4 << 10, 64 << 10, 1 << 20, 16 << 20];

/// One measured case: which collective, how many bytes (S).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Case {
    collective: Collective,
    bytes: usize,
}

/// One rank's buffers for a case (f32).
struct Bufs {
    case: Case,
    input: Vec<f32>,
    output: Vec<f32>,
}

impl Bufs {
    fn new(case: Case, rank: usize) -> Bufs {
        let total = case.bytes / 4;
        let (input, output) = match case.collective {
            // In place: the data lives in the output.
            Collective::AllReduce | Collective::Broadcast => (0, total),
            Collective::AllGather => (total / WORLD, total / WORLD * WORLD),
            c => unreachable!("{c} is not benchmarked"),
        };
        // Small integers, as everywhere in ringside (sums stay exact for a while).
        let fill = |n: usize| (0..n).map(|i| ((rank + i) % 7) as f32).collect();
        Bufs {
            case,
            input: fill(input),
            output: fill(output),
        }
    }

    fn run(&mut self, comm: &dyn Communicator) -> collectives::Result<()> {
        let out = &mut BufferMut::from_slice(&mut self.output);
        match self.case.collective {
            Collective::AllReduce => comm.all_reduce(Input::InPlace, out, ReduceOp::Sum),
            Collective::Broadcast => comm.broadcast(Input::InPlace, out, 0),
            Collective::AllGather => {
                comm.all_gather(Input::Buffer(Buffer::from_slice(&self.input)), out)
            }
            c => unreachable!("{c} is not benchmarked"),
        }
    }
}

/// Runs `iters` calls of the case on `comm` (reusing `bufs` when the case is
/// the same as last time), after meeting the other rank at `barrier`.
fn timed(
    comm: &dyn Communicator,
    bufs: &mut Option<Bufs>,
    case: Case,
    iters: u64,
    barrier: &Barrier,
) -> Result<Duration, String> {
    if bufs.as_ref().map(|b| b.case) != Some(case) {
        *bufs = Some(Bufs::new(case, comm.rank()));
    }
    let b = bufs.as_mut().expect("set just above");
    barrier.wait();
    let t0 = Instant::now();
    for _ in 0..iters {
        b.run(comm).map_err(|e| {
            format!(
                "rank {} {} {} B: {e}",
                comm.rank(),
                case.collective,
                case.bytes
            )
        })?;
    }
    Ok(t0.elapsed())
}

enum Cmd {
    Run(Case, u64),
    Stop,
}

/// A world of two ranks: rank 0 here, rank 1 on a worker thread.
struct Lane {
    label: &'static str,
    comm: Box<dyn Communicator>,
    bufs: Option<Bufs>,
    barrier: Arc<Barrier>,
    to_worker: Sender<Cmd>,
    from_worker: Receiver<Result<Duration, String>>,
    worker: Option<JoinHandle<()>>,
}

impl Lane {
    fn connect(
        label: &'static str,
        backend: Backend,
        transport: TransportKind,
    ) -> Result<Lane, String> {
        let store = Arc::new(MemStore::new(TIMEOUT));
        let mut opts = Options::new([0x5a; 16]).map_err(|e| e.to_string())?;
        opts.transport = transport;
        opts.algo = Algo::Auto;
        opts.timeout = TIMEOUT;
        let barrier = Arc::new(Barrier::new(WORLD));
        let (to_worker, cmds) = mpsc::channel::<Cmd>();
        let (replies, from_worker) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
        let worker = {
            let (store, opts, barrier) = (store.clone(), opts.clone(), barrier.clone());
            std::thread::Builder::new()
                .name(format!("{label}-rank1"))
                .spawn(move || {
                    let comm = match backends::connect(backend, store.as_ref(), 1, WORLD, &opts) {
                        Ok(c) => {
                            let _ = ready_tx.send(Ok(()));
                            c
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let mut bufs = None;
                    while let Ok(Cmd::Run(case, iters)) = cmds.recv() {
                        let r = timed(comm.as_ref(), &mut bufs, case, iters, &barrier);
                        if replies.send(r).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| e.to_string())?
        };
        let comm = backends::connect(backend, store.as_ref(), 0, WORLD, &opts);
        let rank1 = ready
            .recv()
            .unwrap_or_else(|_| Err("rank 1's thread ended".into()));
        let comm = match (comm, rank1) {
            (Ok(c), Ok(())) => c,
            (Err(e), _) => return Err(format!("rank 0: {e}")),
            (_, Err(e)) => return Err(format!("rank 1: {e}")),
        };
        Ok(Lane {
            label,
            comm,
            bufs: None,
            barrier,
            to_worker,
            from_worker,
            worker: Some(worker),
        })
    }

    /// `iters` calls on both ranks; the slower rank's elapsed time.
    fn sample(&mut self, case: Case, iters: u64) -> Duration {
        self.to_worker
            .send(Cmd::Run(case, iters))
            .unwrap_or_else(|_| panic!("{}: rank 1's thread is gone", self.label));
        let mine = timed(
            self.comm.as_ref(),
            &mut self.bufs,
            case,
            iters,
            &self.barrier,
        );
        let theirs = self
            .from_worker
            .recv()
            .unwrap_or_else(|_| Err("rank 1's thread is gone".into()));
        match (mine, theirs) {
            (Ok(a), Ok(b)) => a.max(b),
            (Err(e), _) | (_, Err(e)) => panic!("{}: {e}", self.label),
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.to_worker.send(Cmd::Stop);
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Backends that cannot take part, and why.
fn absent() -> [(&'static str, &'static str); 2] {
    [
        (
            "mpi",
            "an MPI rank is a process (one MPI_COMM_WORLD per process, MPI_Init once), \
             so world 2 cannot live in one process; compare it with \
             `ringside bench --backend mpi` under mpirun, or the `peers` runner",
        ),
        (
            "nccl",
            "needs one CUDA device per rank (NCCL rejects two ranks on one GPU) and this \
             bench runs host buffers only; use `ringside bench --backend nccl` on a GPU host",
        ),
    ]
}

fn lanes() -> Vec<Lane> {
    for (name, why) in absent() {
        eprintln!("ringside-benches: {name}: not benchmarked: {why}");
    }
    let wanted = [
        ("reference-shm", Backend::Reference, TransportKind::Shm),
        ("reference-tcp", Backend::Reference, TransportKind::Tcp),
        ("gloo", Backend::Gloo, TransportKind::Tcp),
    ];
    let mut out = Vec::new();
    for (label, backend, transport) in wanted {
        match Lane::connect(label, backend, transport) {
            Ok(l) => out.push(l),
            Err(e) => eprintln!("ringside-benches: {label}: skipped: {e}"),
        }
    }
    out
}

fn size_name(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

fn backends(c: &mut Criterion) {
    let mut lanes = lanes();
    for collective in COLLECTIVES {
        let mut group = c.benchmark_group(collective.name());
        for bytes in SIZES {
            let case = Case { collective, bytes };
            group.throughput(Throughput::Bytes(bytes as u64));
            // Large messages take milliseconds per call: criterion's linear
            // sampling would need ~5000 calls for 10 samples; flat needs 10+.
            if bytes >= 1 << 20 {
                group.sampling_mode(SamplingMode::Flat).sample_size(10);
            } else {
                group.sampling_mode(SamplingMode::Auto).sample_size(30);
            }
            for lane in lanes.iter_mut() {
                group.bench_function(BenchmarkId::new(lane.label, size_name(bytes)), |b| {
                    b.iter_custom(|iters| lane.sample(case, iters))
                });
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    // 45 benchmarks (3 collectives x 5 sizes x 3 backends) in about 6 minutes
    // on a 2-core machine: ~1 s warm-up + ~4 s measuring + analysis each.
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .nresamples(20_000);
    targets = backends
}
criterion_main!(benches);
