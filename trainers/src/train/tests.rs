use super::*;
use std::time::Duration;

use collectives::backends::reference::ReferenceComm;
use collectives::transport::TransportKind;
use tch::Device;
use tch::nn::VarStore;

use crate::{checkpoint, data, models};

/// Runs `body(rank, comm)` on `world` threads joined by the reference backend over
/// TCP on loopback (as collectives' own tests do); returns the results in rank order.
pub(crate) fn with_ranks<T: Send>(
    world: usize,
    body: impl Fn(usize, &ReferenceComm) -> T + Sync,
) -> Vec<T> {
    collectives::threads::with_ranks(
        world,
        TransportKind::Tcp,
        Duration::from_secs(60),
        |rank, comm| body(rank, &comm),
    )
    .unwrap()
}

fn logits(rows: &[[f32; 3]]) -> Tensor {
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    Tensor::from_slice(&flat).reshape([rows.len() as i64, 3])
}

#[test]
fn cross_entropy_and_accuracy_by_hand() {
    let x = logits(&[[0.0, 0.0, 0.0], [2.0, 1.0, 0.0], [0.0, 5.0, 1.0]]);
    let y = Tensor::from_slice(&[1i64, 0, 2]);
    // Row 0 is uniform: ln 3. Row 1: ln(e² + e + 1) − 2. Row 2: ln(1 + e⁵ + e) − 1.
    let want = (3f64.ln()
        + ((2f64.exp() + 1f64.exp() + 1.0).ln() - 2.0)
        + ((1.0 + 5f64.exp() + 1f64.exp()).ln() - 1.0))
        / 3.0;
    let got = cross_entropy(&x, &y).unwrap().double_value(&[]);
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    assert!(
        cross_entropy(&x, &y)
            .unwrap()
            .equal(&x.cross_entropy_for_logits(&y))
    );
    // Row 0's arg-max is class 0 (first of ties): wrong; row 1 right; row 2 wrong.
    assert_eq!(accuracy(&x, &y).unwrap(), 1.0 / 3.0);
    let empty = Tensor::zeros([0, 3], tch::kind::FLOAT_CPU);
    assert_eq!(
        accuracy(&empty, &Tensor::zeros([0], tch::kind::INT64_CPU)).unwrap(),
        0.0
    );
}

#[test]
fn tally_counts_and_sums_by_hand() {
    let mut t = Tally::new();
    // Uniform logits: every example's loss is ln 3.
    t.add_batch(
        &Tensor::zeros([4, 3], tch::kind::FLOAT_CPU),
        &Tensor::from_slice(&[0i64, 1, 2, 0]),
    )
    .unwrap();
    assert_eq!((t.count(), t.correct()), (4, 2));
    let ln3 = f64::from(3f32.ln());
    assert!((t.loss() - ln3).abs() < 1e-7, "{}", t.loss());
    assert_eq!(t.accuracy(), 0.5);
    let mut u = t;
    u.merge(&t);
    assert_eq!((u.count(), u.correct()), (8, 4));
    assert_eq!(u.loss_sum(), 2.0 * t.loss_sum());

    let mut nan = Tally::new();
    nan.add_batch(
        &logits(&[[f32::NAN, 0.0, 0.0]]),
        &Tensor::from_slice(&[0i64]),
    )
    .unwrap();
    assert!(nan.loss_sum().is_nan());
    u.merge(&nan);
    assert!(u.loss().is_nan() && u.count() == 9);
    assert!(Tally::new().loss().is_nan() && Tally::new().accuracy().is_nan());
}

/// The reason for the fixed point: any split of the examples into batches gives the
/// very same bits, which an f32/f64 running sum does not promise.
#[test]
fn tally_is_independent_of_batching() {
    // Logits with widely different magnitudes, so float sums would round differently.
    let n = 257usize;
    let vals: Vec<f32> = (0..n * 3)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * if i % 5 == 0 { 0.3 } else { 0.001 })
        .collect();
    let x = Tensor::from_slice(&vals).reshape([n as i64, 3]);
    let labels: Vec<i64> = (0..n as i64).map(|i| i % 3).collect();
    let y = Tensor::from_slice(&labels);
    let mut whole = Tally::new();
    whole.add_batch(&x, &y).unwrap();
    for batch in [1usize, 2, 7, 100] {
        let mut parts = Tally::new();
        for start in (0..n).step_by(batch) {
            let len = batch.min(n - start) as i64;
            let mut b = Tally::new();
            b.add_batch(
                &x.narrow(0, start as i64, len),
                &y.narrow(0, start as i64, len),
            )
            .unwrap();
            parts.merge(&b);
        }
        assert_eq!(parts, whole, "batch {batch}");
    }
    assert_eq!(whole.count(), n as u64);
}

/// Validation metrics over 2 thread ranks (odd set size, so shards differ in
/// length, and batches cut differently) equal the single-process metrics exactly.
#[test]
fn evaluate_over_two_ranks_equals_single_process_exactly() {
    tch::set_num_threads(1);
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("cnn.safetensors");
    let test_set = data::synthetic(101, 9).unwrap();
    {
        let vs = VarStore::new(Device::Cpu);
        let _model = models::cnn().build(&vs.root());
        checkpoint::save(&weights, &vs, None, &Default::default()).unwrap();
    }
    let model_from_file = || {
        let vs = VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        checkpoint::load(&weights, &vs, None).unwrap();
        (vs, model)
    };

    let (_vs, model) = model_from_file();
    let single = evaluate(
        &model,
        &test_set,
        &DistributedSampler::for_eval(101, 1, 0).unwrap(),
        32,
        None,
    )
    .unwrap();
    assert_eq!(single.count(), 101);
    assert!(single.loss().is_finite());

    let per_rank = with_ranks(2, |rank, comm| {
        let (_vs, model) = model_from_file();
        // Tensors are not Sync: each rank makes its own (identical) copy.
        let data = data::synthetic(101, 9).unwrap();
        let sampler = DistributedSampler::for_eval(101, 2, rank).unwrap();
        let local = sampler.num_samples();
        let tally = evaluate(&model, &data, &sampler, 20, Some(comm)).unwrap();
        (local, tally)
    });
    assert_eq!(
        per_rank[0].0 + per_rank[1].0,
        101,
        "exact shards, no padding"
    );
    assert_ne!(per_rank[0].0, per_rank[1].0);
    for (rank, (_, tally)) in per_rank.iter().enumerate() {
        assert_eq!(*tally, single, "rank {rank}");
        assert_eq!(tally.loss().to_bits(), single.loss().to_bits());
    }
}

#[test]
fn evaluate_rejects_padding_samplers_and_mismatched_worlds() {
    let data = data::synthetic(10, 1).unwrap();
    let vs = VarStore::new(Device::Cpu);
    let model = models::mlp(&Default::default()).build(&vs.root());
    let padded = DistributedSampler::new(10, 1, 0).unwrap();
    let e = evaluate(&model, &data, &padded, 4, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("exact"), "{e}");
    let shard = DistributedSampler::for_eval(10, 2, 1).unwrap();
    let e = evaluate(&model, &data, &shard, 4, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 1 of 2"), "{e}");
    let other_len = DistributedSampler::for_eval(9, 1, 0).unwrap();
    assert!(evaluate(&model, &data, &other_len, 4, None).is_err());
    let whole = DistributedSampler::for_eval(10, 1, 0).unwrap();
    assert!(evaluate(&model, &data, &whole, 0, None).is_err());
    let t = evaluate(&model, &data, &whole, 3, None).unwrap();
    assert_eq!(t.count(), 10);
}

#[test]
fn step_timer_counts_samples_and_rates() {
    let mut t = StepTimer::start();
    std::thread::sleep(Duration::from_millis(20));
    let r = t.lap(100);
    assert!(r > 0.0 && r < 100.0 / 0.019, "{r}");
    t.lap(50);
    assert_eq!(t.samples(), 150);
    assert!(t.samples_per_s() > 0.0);
    assert!(t.elapsed() >= Duration::from_millis(20));
}

#[test]
fn step_seed_depends_on_every_counter() {
    let s = step_seed(1, 2, 3);
    assert_eq!(s, step_seed(1, 2, 3));
    for other in [
        step_seed(0, 2, 3),
        step_seed(1, 3, 3),
        step_seed(1, 2, 4),
        step_seed(1, 3, 2),
    ] {
        assert_ne!(s, other);
    }
}
