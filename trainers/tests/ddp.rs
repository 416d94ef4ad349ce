//! DDP against the one-process reference: R ranks with batch B each must train
//! exactly like one process with batch R·B (same start, same data), because the
//! averaged gradient of R means over B equals the mean over R·B.
//!
//! Ranks are threads of this test, each with its own reference-backend
//! communicator over an in-memory store, its own VarStore and its own optimizer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use collectives::transport::TransportKind;
use collectives::{Communicator, ReduceOp};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use trainers::data::{self, Dataset};
use trainers::ddp::{self, Ddp, DdpOptions, StageSplit, Standard};
use trainers::models;
use trainers::parity::{self, snapshot};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `body(rank, comm)` on `world` threads; returns the results in rank order.
fn with_ranks<T: Send>(
    world: usize,
    body: impl Fn(usize, Box<dyn Communicator>) -> T + Sync,
) -> Vec<T> {
    tch::set_num_threads(1);
    collectives::thread_ranks::with_ranks(world, TransportKind::Shm, TIMEOUT, |rank, comm| {
        body(rank, Box::new(comm))
    })
    .unwrap()
}

/// The named parameters of a freshly seeded CNN: the common starting point.
fn initial_cnn() -> Vec<(String, Tensor)> {
    trainers::seed::seeded(1234, || {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = models::cnn().build(&vs.root());
        snapshot(&vs)
    })
}

fn load(vs: &nn::VarStore, params: &[(String, Tensor)]) {
    parity::load(vs, params).unwrap()
}

fn params_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    parity::max_diff(a, b).unwrap()
}

/// `body(rank, comm, data)` on `world` thread ranks, each with its own handle
/// on `data`; the results in rank order.
fn with_data_ranks<T: Send>(
    world: usize,
    data: &Dataset,
    body: impl Fn(usize, Box<dyn Communicator>, Dataset) -> T + Sync,
) -> Vec<T> {
    tch::set_num_threads(1);
    trainers::thread_ranks::with_data_ranks(world, data, TIMEOUT, |rank, comm, data| {
        Ok(body(rank, comm, data))
    })
    .unwrap()
    .into_iter()
    .map(Result::unwrap)
    .collect()
}

/// The `--json` summary line of a `ringside-train` run that must have succeeded.
fn summary(out: &std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().find(|l| l.starts_with('{')).unwrap();
    serde_json::from_str(line).unwrap()
}

/// Rows `from..from+n` of the data set.
fn rows(data: &Dataset, from: usize, n: usize) -> (Tensor, Tensor) {
    let idx: Vec<usize> = (from..from + n).collect();
    data.batch(&idx).unwrap()
}

fn sgd(vs: &nn::VarStore, lr: f64) -> nn::Optimizer {
    nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(vs, lr)
    .unwrap()
}

fn ce(logits: &Tensor, y: &Tensor) -> Tensor {
    logits.cross_entropy_for_logits(y)
}

/// One process, batch `global` per step, `steps` SGD steps from `init`.
///
/// The step's gradient is accumulated over `global / micro` forward passes of `micro`
/// rows each, every loss divided by their count: the gradient of the mean over
/// `global` rows, computed on the same shapes as the ranks' forwards. One forward on
/// all `global` rows would be the same mathematics but not the same rounding:
/// libtorch's CPU sgemm picks its kernel by row count (≤ 15 vs ≥ 16 rows differ in the
/// last bits), and a ReLU or max-pool input within rounding of its kink then takes
/// the other branch, which training amplifies by a CPU-dependent amount (the
/// DataParallel test failed that way in CI). With equal shapes, what is left is the
/// order of the gradient average: exact for 2 ranks (halving is exact), one rounding
/// per step for 3.
fn single_process(
    init: &[(String, Tensor)],
    data: &Dataset,
    global: usize,
    micro: usize,
    steps: usize,
) -> Vec<(String, Tensor)> {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = models::cnn().build(&vs.root());
    load(&vs, init);
    let mut opt = sgd(&vs, 0.05);
    let parts = global / micro;
    for s in 0..steps {
        opt.zero_grad();
        for p in 0..parts {
            let (x, y) = rows(data, s * global + p * micro, micro);
            (ce(&model.forward_t(&x, true), &y) / parts as f64).backward();
        }
        opt.step();
    }
    snapshot(&vs)
}

fn small_buckets(split: StageSplit) -> DdpOptions {
    DdpOptions {
        first_bucket_bytes: 4 << 10,
        bucket_cap_bytes: 64 << 10,
        split,
        ..Default::default()
    }
}

fn check_equivalence(world: usize, opts: DdpOptions) {
    let (b, steps) = (8, 10);
    let data = data::synthetic(world * b * steps, 42).unwrap();
    let e = ddp::check::equivalence(world, b, steps, &data, Arc::new(Standard), opts).unwrap();
    // The run must actually move the parameters, or the comparison proves nothing.
    assert!(e.moved > 1e-3, "{e:?}");
    assert!(e.max_diff <= 1e-5, "world {world}: {e:?}");
}

/// With `no_sync` over k − 1 of k micro-batches, one round of all-reduces per
/// optimizer step (one call per bucket), not one per micro-batch.
#[test]
fn no_sync_accumulation_all_reduces_once_per_step() {
    let (world, k, b, steps) = (2, 3, 4, 3);
    let data = data::synthetic(world * k * b * steps, 5).unwrap();
    let opts = small_buckets(StageSplit::Auto);
    let (per_step, buckets) =
        ddp::check::all_reduces_per_step(world, k, b, steps, &data, Arc::new(Standard), opts)
            .unwrap();
    assert!(buckets > 1, "{buckets}");
    assert_eq!(per_step, vec![buckets; steps]);
}

#[test]
fn ddp_two_ranks_equals_one_process_with_twice_the_batch() {
    check_equivalence(2, small_buckets(StageSplit::Auto));
}

#[test]
fn ddp_three_ranks_every_layer_split_equals_one_process() {
    check_equivalence(3, small_buckets(StageSplit::EveryLayer));
}

#[test]
fn ddp_default_options_one_bucket_equals_one_process() {
    check_equivalence(2, DdpOptions::default());
}

/// `no_sync` for one micro-step, then a synchronised one (each loss halved):
/// the same as one step on both micro-batches of every rank.
#[test]
fn no_sync_accumulation_equals_one_step_on_twice_the_batch() {
    let (world, b, steps, k) = (2, 6, 4, 2);
    let global = world * b * k;
    let data = data::synthetic(global * steps, 7).unwrap();
    let init = initial_cnn();
    let want = single_process(&init, &data, global, b, steps);
    let initm = Mutex::new(Some(
        init.iter()
            .map(|(n, t)| (n.clone(), t.copy()))
            .collect::<Vec<_>>(),
    ));
    let got = with_data_ranks(world, &data, |rank, comm, data| {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        if rank == 0 {
            load(&vs, &initm.lock().unwrap().take().unwrap());
        }
        let mut ddp = Ddp::new(model, &vs, comm, small_buckets(StageSplit::Auto)).unwrap();
        let mut opt = sgd(&vs, 0.05);
        for s in 0..steps {
            opt.zero_grad();
            for micro in 0..k {
                // Micro-batch `micro` of rank `rank`: any split of the global batch
                // into world·k parts works; this one is contiguous per rank.
                let from = s * global + rank * b * k + micro * b;
                let (x, y) = rows(&data, from, b);
                let step = |d: &mut Ddp| {
                    let _ = d.forward_backward(&x, |l| ce(l, &y) / k as f64).unwrap();
                };
                if micro + 1 < k {
                    ddp.no_sync(step);
                    assert!(ddp.require_sync());
                } else {
                    step(&mut ddp);
                }
            }
            opt.step();
        }
        let synced: Vec<bool> = ddp.timeline().steps().iter().map(|s| s.synced).collect();
        assert_eq!(synced, [false, true].repeat(steps));
        snapshot(&vs)
    });
    for (rank, g) in got.iter().enumerate() {
        let d = params_diff(g, &want);
        assert!(d <= 1e-5, "rank {rank}: max |Δparam| = {d:e}");
    }
}

/// Without the sync the ranks drift apart: the equivalence above is not vacuous.
#[test]
fn always_no_sync_ranks_diverge() {
    let (world, b) = (2, 8);
    let data = data::synthetic(world * b * 3, 9).unwrap();
    let got = with_data_ranks(world, &data, |rank, comm, d| {
        let (x, y) = rows(&d, rank * b, b);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        let mut ddp = Ddp::new(model, &vs, comm, DdpOptions::default()).unwrap();
        let mut opt = sgd(&vs, 0.05);
        ddp.set_require_sync(false);
        opt.zero_grad();
        let _ = ddp.forward_backward(&x, |l| ce(l, &y)).unwrap();
        opt.step();
        snapshot(&vs)
    });
    assert!(params_diff(&got[0], &got[1]) > 1e-4);
}

#[test]
fn clip_grad_norm_scales_to_the_max_norm_like_pytorch() {
    let p = Tensor::from_slice(&[3.0f32, 0.0]).set_requires_grad(true);
    let q = Tensor::from_slice(&[4.0f32]).set_requires_grad(true);
    ((&p * &p).sum(Kind::Float) / 2.0 + (&q * &q).sum(Kind::Float) / 2.0).backward();
    let norm = ddp::clip_grad_norm(&[p.shallow_clone(), q.shallow_clone()], 1.0).unwrap();
    let norm = norm.double_value(&[]);
    assert!((norm - 5.0).abs() < 1e-6, "{norm}");
    let gp: Vec<f32> = Vec::try_from(p.grad()).unwrap();
    let gq: Vec<f32> = Vec::try_from(q.grad()).unwrap();
    // coefficient 1 / (5 + 1e-6)
    assert!((gp[0] - 0.6).abs() < 1e-6 && gp[1] == 0.0 && (gq[0] - 0.8).abs() < 1e-6);
    // Below the max: untouched.
    let n2 = ddp::clip_grad_norm(&[p.shallow_clone(), q.shallow_clone()], 10.0).unwrap();
    assert!((n2.double_value(&[]) - 1.0).abs() < 1e-5);
    assert!((f32::try_from(q.grad().get(0)).unwrap() - 0.8).abs() < 1e-6);
    assert!(ddp::clip_grad_norm(&[p], -1.0).is_err());
}

/// Buckets, stages, the timeline and its Chrome trace for a 2-rank run.
#[test]
fn timeline_records_buckets_and_exports_a_chrome_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.json");
    let data = data::synthetic(64, 3).unwrap();
    let traces = with_data_ranks(2, &data, |rank, comm, data| {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        let mut ddp = Ddp::new(model, &vs, comm, small_buckets(StageSplit::Auto)).unwrap();
        // Reverse registration order (tch registers a layer's bias before its
        // weight); the 4 KiB first bucket closes at fc2.weight (5,120 bytes).
        let names = ddp.bucket_names();
        assert_eq!(names[0], ["fc2.weight"]);
        assert_eq!(names[1], ["fc2.bias", "fc1.weight"]);
        assert_eq!(names[2], ["fc1.bias", "conv2.weight"]);
        assert_eq!(names[3], ["conv2.bias", "conv1.weight", "conv1.bias"]);
        assert_eq!(ddp.bucket_bytes()[1], 4 * (10 + 1600 * 128));
        // Auto cuts where a bucket completes.
        assert_eq!(
            ddp.stage_labels(),
            ["conv1..pool1", "conv2..flatten", "fc1..relu3", "fc2"]
        );
        for s in 0..3 {
            let (x, y) = rows(&data, s * 16 + rank * 8, 8);
            let _ = ddp.forward_backward(&x, |l| ce(l, &y)).unwrap();
        }
        let t = ddp.timeline();
        assert_eq!(t.steps().len(), 3);
        assert!(t.steps().iter().all(|s| s.synced && s.step_us() > 0.0));
        let pct = t.mean_exposed_pct(0).unwrap();
        assert!((0.0..=100.0).contains(&pct), "{pct}");
        t.to_chrome_trace()
    });
    let merged = trainers::timeline::merge_chrome_traces(&traces).unwrap();
    trainers::timeline::write_trace(&merged, &path).unwrap();
    let back: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = back["traceEvents"].as_array().unwrap();
    let count =
        |pred: &dyn Fn(&serde_json::Value) -> bool| events.iter().filter(|e| pred(e)).count();
    // 2 ranks × 3 steps × 4 buckets.
    let reduces = count(&|e| {
        e["name"]
            .as_str()
            .unwrap_or("")
            .starts_with("all_reduce bucket")
            && e["ph"] == "X"
            && e["tid"] == 1
            && e["dur"].as_f64().is_some()
    });
    assert_eq!(reduces, 24);
    assert_eq!(
        count(&|e| e["name"].as_str().unwrap_or("").ends_with(" ready")),
        24
    );
    assert_eq!(count(&|e| e["cat"] == "backward"), 2 * 3 * 4);
    assert_eq!(count(&|e| e["cat"] == "step"), 6);
    for e in events.iter().filter(|e| e["ph"] == "X") {
        assert!(e["ts"].as_f64().unwrap() > 1.0e15, "{e}"); // µs since 1970
        assert!(e["pid"].as_u64().unwrap() < 2);
    }
}

/// Batch norm buffers and parameters agree across ranks after training a ResNet
/// (buffers are broadcast from rank 0 before every forward).
#[test]
fn resnet_replicas_stay_identical() {
    let data = data::synthetic(16, 5).unwrap();
    let got = with_data_ranks(2, &data, |rank, comm, data| {
        let vs = nn::VarStore::new(Device::Cpu);
        let cfg = models::ResNetConfig {
            width: 4,
            ..Default::default()
        };
        let model = models::resnet(&cfg).build(&vs.root());
        let opts = DdpOptions {
            split: StageSplit::EveryLayer,
            ..Default::default()
        };
        let mut ddp = Ddp::new(model, &vs, comm, opts).unwrap();
        let mut opt = sgd(&vs, 0.05);
        for s in 0..2 {
            let (x, y) = rows(&data, s * 8 + rank * 4, 4);
            opt.zero_grad();
            let _ = ddp.forward_backward(&x, |l| ce(l, &y)).unwrap();
            opt.step();
        }
        // Sum of the loss over ranks through the comm thread.
        let total = ddp
            .all_reduce_f64(vec![1.0, rank as f64], ReduceOp::Sum)
            .unwrap();
        assert_eq!(total, [2.0, 1.0]);
        // One more broadcast makes the buffers equal again (each rank's last
        // forward updated its running statistics from its own batch).
        // In the same order on every rank (the VarStore's map order is per process).
        let bufs: Vec<Tensor> = snapshot(&vs)
            .into_iter()
            .filter(|(n, _)| n.contains("running"))
            .map(|(n, _)| vs.variables()[&n].shallow_clone())
            .collect();
        assert!(!bufs.is_empty());
        ddp.broadcast(&bufs, 0).unwrap();
        let (_model, comm) = ddp.into_parts().unwrap();
        assert_eq!(comm.rank(), rank);
        snapshot(&vs)
    });
    let d = params_diff(&got[0], &got[1]);
    assert!(d == 0.0, "replicas differ by {d:e}");
}

#[test]
fn a_model_not_at_the_varstore_root_is_a_clear_error() {
    let e = with_ranks(1, |_, comm| {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = models::cnn().build(&(vs.root() / "net"));
        Ddp::new(model, &vs, comm, DdpOptions::default())
            .unwrap_err()
            .to_string()
    });
    assert!(
        e[0].contains("not under any layer") && e[0].contains("net."),
        "{}",
        e[0]
    );
}

/// Evaluation through `with_communicator` (code written for `&dyn Communicator`),
/// after which training goes on with the restarted communicator thread.
#[test]
fn with_communicator_evaluates_across_ranks_and_training_goes_on() {
    let data = data::synthetic(30, 8).unwrap();
    let got = with_data_ranks(2, &data, |rank, comm, data| {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        let mut ddp = Ddp::new(model, &vs, comm, DdpOptions::default()).unwrap();
        let eval = trainers::sampler::DistributedSampler::for_eval(data.len(), 2, rank).unwrap();
        let tally = ddp
            .with_communicator(|model, c| {
                trainers::train::evaluate(model, &data, &eval, 7, Some(c))
            })
            .unwrap()
            .unwrap();
        let (x, y) = rows(&data, rank * 4, 4);
        let _ = ddp.forward_backward(&x, |l| ce(l, &y)).unwrap();
        assert_eq!(ddp.timeline().steps().len(), 1);
        (tally.count(), tally.correct(), snapshot(&vs))
    });
    assert_eq!(got[0].0, 30);
    assert_eq!((got[0].0, got[0].1), (got[1].0, got[1].1));
    assert_eq!(params_diff(&got[0].2, &got[1].2), 0.0);
}

/// The binary end to end on two ranks: metrics, merged trace, checkpoint, and a
/// resumed run that ends exactly where an uninterrupted one does.
#[test]
fn ringside_train_two_ranks_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let run = |steps: u64, ckpt: &str, resume: bool| -> serde_json::Value {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ringside-train"));
        cmd.args([
            "--nproc",
            "2",
            "--synthetic",
            "512",
            "--batch",
            "16",
            "--json",
        ])
        .args([
            "--bucket-cap-mb",
            "0.1",
            "--timeout",
            "60",
            "--log-every",
            "2",
        ])
        .args(["--steps", &steps.to_string()])
        .arg("--checkpoint")
        .arg(dir.path().join(ckpt))
        .arg("--metrics")
        .arg(dir.path().join(format!("{ckpt}.jsonl")))
        .arg("--trace")
        .arg(dir.path().join(format!("{ckpt}.json")))
        .env("RUST_BACKTRACE", "0");
        if resume {
            cmd.arg("--resume");
        }
        summary(&cmd.output().unwrap())
    };
    let straight = run(10, "a", false);
    assert!(straight["test_loss"].as_f64().is_some(), "{straight}");
    assert_eq!(
        (straight["steps"].as_u64(), straight["world_size"].as_u64()),
        (Some(10), Some(2))
    );
    let _ = run(6, "b", false);
    let resumed = run(10, "b", true);
    assert_eq!(resumed["steps"], 10);
    assert_eq!(
        resumed["test_loss"], straight["test_loss"],
        "{resumed} vs {straight}"
    );

    let metrics = std::fs::read_to_string(dir.path().join("b.jsonl")).unwrap();
    let steps: Vec<u64> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "step")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [2, 4, 6, 8, 10]);
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("a.json")).unwrap()).unwrap();
    let pids: std::collections::BTreeSet<u64> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "comm")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.into_iter().collect::<Vec<_>>(), [0, 1]);
}

/// Regression: with the gloo backend, `ringside-train` crashed (SIGSEGV) in the
/// first Gloo call — libtorch's bundled Gloo served the shim's gloo:: symbols.
/// The binary now preloads Debian's libgloo; the replicas must train and agree.
#[test]
fn ringside_train_with_gloo_does_not_call_libtorchs_bundled_gloo() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ringside-train"))
        .args(["--nproc", "2", "--backend", "gloo", "--model", "mlp"])
        .args([
            "--synthetic",
            "256",
            "--batch",
            "16",
            "--steps",
            "4",
            "--json",
        ])
        .args(["--timeout", "60"])
        .env_remove("LD_PRELOAD")
        .env_remove("RINGSIDE_GLOO_PRELOADED")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let v = summary(&out);
    assert_eq!(v["world_size"], 2, "{v}");
    assert!(v["test_loss"].as_f64().is_some_and(f64::is_finite), "{v}");
}
