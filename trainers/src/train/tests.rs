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
    collectives::thread_ranks::with_ranks(
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

/// The reason for the fixed point: any grouping of the same per-example losses gives
/// the very same bits, which an f32/f64 running sum does not promise. The losses are
/// computed once, so this holds by construction (integer addition), on any CPU.
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
    let losses: Vec<f64> = Vec::try_from(
        x.cross_entropy_loss::<Tensor>(&y, None, Reduction::None, -100, 0.0)
            .to_kind(Kind::Double),
    )
    .unwrap();
    let hits: Vec<bool> = Vec::try_from(x.argmax(-1, false).eq_tensor(&y)).unwrap();
    let mut float_sums = std::collections::BTreeSet::new();
    for batch in [1usize, 2, 7, 100] {
        let mut parts = Tally::new();
        let mut float_sum = 0f32;
        for (l, h) in losses.chunks(batch).zip(hits.chunks(batch)) {
            let mut b = Tally::new();
            b.add_examples(l, h.iter().filter(|&&h| h).count() as u64);
            parts.merge(&b);
            float_sum += l.iter().map(|&v| v as f32).sum::<f32>();
        }
        assert_eq!(parts, whole, "batch {batch}");
        float_sums.insert(float_sum.to_bits());
    }
    assert_eq!(whole.count(), n as u64);
    // The control: a float sum of the same losses does depend on the grouping.
    assert!(float_sums.len() > 1, "the control did not vary");
}

/// A CNN with its weights in a file, so every rank (thread) can build an identical
/// copy (tensors are not `Sync`).
struct SavedCnn {
    _dir: tempfile::TempDir,
    weights: std::path::PathBuf,
}

impl SavedCnn {
    fn new() -> SavedCnn {
        let dir = tempfile::tempdir().unwrap();
        let weights = dir.path().join("cnn.safetensors");
        let vs = VarStore::new(Device::Cpu);
        let _model = models::cnn().build(&vs.root());
        checkpoint::save(&weights, &vs, None, &Default::default()).unwrap();
        SavedCnn { _dir: dir, weights }
    }

    fn load(&self) -> (VarStore, models::Stage) {
        let vs = VarStore::new(Device::Cpu);
        let model = models::cnn().build(&vs.root());
        checkpoint::load(&self.weights, &vs, None).unwrap();
        (vs, model)
    }
}

/// The cross-rank sum is exact: each rank's metrics after `all_reduce` are the very
/// bits of one process evaluating the same two shards with the same batch size and
/// merging the tallies. Same ops, same shapes, same order: exact on any CPU.
#[test]
fn evaluate_over_two_ranks_equals_its_shards_summed_in_one_process_exactly() {
    tch::set_num_threads(1);
    let cnn = SavedCnn::new();
    let (n, batch) = (101, 20);
    let (_vs, model) = cnn.load();
    let test_set = data::synthetic(n, 9).unwrap();
    let mut local = Tally::new();
    for rank in 0..2 {
        let sampler = DistributedSampler::for_eval(n, 2, rank).unwrap();
        for b in sampler.indices().chunks(batch) {
            let (x, y) = test_set.batch(b).unwrap();
            let logits = tch::no_grad(|| model.forward_t(&x, false));
            local.add_batch(&logits, &y).unwrap();
        }
    }
    assert_eq!(local.count(), n as u64);

    let per_rank = with_ranks(2, |rank, comm| {
        let (_vs, model) = cnn.load();
        let data = data::synthetic(n, 9).unwrap();
        let sampler = DistributedSampler::for_eval(n, 2, rank).unwrap();
        let shard = sampler.num_samples();
        (
            shard,
            evaluate(&model, &data, &sampler, batch, Some(comm)).unwrap(),
        )
    });
    assert_eq!(per_rank[0].0 + per_rank[1].0, n, "exact shards, no padding");
    assert_ne!(per_rank[0].0, per_rank[1].0, "shards of different lengths");
    for (rank, (_, tally)) in per_rank.iter().enumerate() {
        assert_eq!(*tally, local, "rank {rank}");
        assert_eq!(
            tally.loss().to_bits(),
            local.loss().to_bits(),
            "rank {rank}"
        );
    }
}

/// Regression (failed on an AVX-512 Xeon): two ranks batching 101 examples as
/// 20+20+11 / 20+20+10 against one process batching them as 32+32+32+5. MKL's sgemm
/// sums a row's products in an order that depends on the batch's row count (see
/// `evaluate`'s doc), so the loss is compared with a tolerance: per example the
/// logits move by a few f32 ulps (up to 8e-7 of the largest logit measured there),
/// and the mean loss by ~4e-9 relative, far inside the 1e-5 allowed. Counts are exact; correct predictions may differ only on examples whose
/// two top logits are closer than that noise, which the test counts first.
#[test]
fn evaluate_over_two_ranks_matches_single_process_within_batching_noise() {
    tch::set_num_threads(1);
    let cnn = SavedCnn::new();
    let n = 101;
    let (_vs, model) = cnn.load();
    let test_set = data::synthetic(n, 9).unwrap();
    let single = evaluate(
        &model,
        &test_set,
        &DistributedSampler::for_eval(n, 1, 0).unwrap(),
        32,
        None,
    )
    .unwrap();
    assert_eq!(single.count(), n as u64);
    assert!(single.loss().is_finite());
    let logits = tch::no_grad(|| model.forward_t(&test_set.images, false));
    let top2 = logits.topk(2, -1, true, true).0;
    let margins: Vec<f32> = Vec::try_from(top2.select(1, 0) - top2.select(1, 1)).unwrap();
    let near_ties = margins.iter().filter(|&&m| m < 1e-4).count() as u64;

    let per_rank = with_ranks(2, |rank, comm| {
        let (_vs, model) = cnn.load();
        let data = data::synthetic(n, 9).unwrap();
        let sampler = DistributedSampler::for_eval(n, 2, rank).unwrap();
        evaluate(&model, &data, &sampler, 20, Some(comm)).unwrap()
    });
    for (rank, tally) in per_rank.iter().enumerate() {
        assert_eq!(tally.count(), single.count(), "rank {rank}");
        assert!(
            tally.correct().abs_diff(single.correct()) <= near_ties,
            "rank {rank}: {} vs {} correct ({near_ties} near-ties)",
            tally.correct(),
            single.correct()
        );
        let rel = (tally.loss() - single.loss()).abs() / single.loss().abs();
        eprintln!("rank {rank}: relative loss difference {rel:e}");
        assert!(
            rel <= 1e-5,
            "rank {rank}: loss {} vs {} (relative {rel:e})",
            tally.loss(),
            single.loss()
        );
    }
}

/// What `evaluate`'s doc says about batching, shown on this CPU: the same examples'
/// logits in batches of 1 to 101 rows agree with the whole-set batch to within f32
/// noise (1e-5 of the largest logit; ~8e-7 measured on an AVX-512 Xeon, where every
/// row of a batch below 16 rows differs in its bits), whether or not the bits differ
/// here. It prints how many rows did.
#[test]
fn a_batch_changes_an_examples_logits_only_in_the_last_bits() {
    tch::set_num_threads(1);
    let cnn = SavedCnn::new();
    let (_vs, model) = cnn.load();
    let images = data::synthetic(101, 9).unwrap().images;
    let whole = tch::no_grad(|| model.forward_t(&images, false));
    let scale = whole.abs().max().double_value(&[]);
    for batch in [1i64, 5, 15, 16, 20, 32] {
        let parts: Vec<Tensor> = images
            .split(batch, 0)
            .iter()
            .map(|x| tch::no_grad(|| model.forward_t(x, false)))
            .collect();
        let got = Tensor::cat(&parts, 0);
        let diff = (&got - &whole).abs().max().double_value(&[]);
        assert!(diff <= 1e-5 * scale, "batch {batch}: max |Δlogit| {diff:e}");
        let rows = (got.ne_tensor(&whole).any_dim(1, false))
            .sum(Kind::Int64)
            .int64_value(&[]);
        eprintln!(
            "batch {batch}: {rows} of 101 rows differ in their bits (max {diff:e}, largest logit {scale:e})"
        );
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
