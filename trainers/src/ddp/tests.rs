use std::sync::Arc;
use std::time::Duration;

use collectives::{backends, rendezvous::MemStore};
use tch::nn::{self, ModuleT};
use tch::{Device, Tensor};

use super::{Ddp, DdpOptions, GradSync, StageSplit, Standard};
use crate::autograd::ops::{self, OpCount};
use crate::{data, models, seed};

/// A world-of-one Ddp over `split` with small buckets (several per step), from
/// the CNN seeded with 1234, and the same start for a plain model.
fn one_rank(split: StageSplit) -> (Ddp, nn::VarStore) {
    one_rank_with(split, Arc::new(Standard))
}

/// [`one_rank`] with `sync` moving the gradients.
fn one_rank_with(split: StageSplit, sync: Arc<dyn GradSync>) -> (Ddp, nn::VarStore) {
    let timeout = Duration::from_secs(30);
    let store = MemStore::new(timeout);
    let opts = backends::Options::new([0; 16]).expect("options");
    let comm = backends::reference(&store, 0, 1, &opts).expect("reference backend");
    let vs = nn::VarStore::new(Device::Cpu);
    let model = seed::seeded(1234, || models::cnn().build(&vs.root()));
    let ddp_opts = DdpOptions {
        first_bucket_bytes: 4 << 10,
        bucket_cap_bytes: 64 << 10,
        split,
        timeout,
        ..Default::default()
    };
    let ddp = Ddp::with_sync(model, &vs, Box::new(comm), ddp_opts, sync).expect("ddp");
    (ddp, vs)
}

/// What one DDP step (forward, loss, backward with the bucket all-reduces)
/// dispatches on this thread, and the backward passes it ran.
fn ddp_step(split: StageSplit, x: &Tensor, y: &Tensor) -> (OpCount, u64) {
    let (mut ddp, _vs) = one_rank(split);
    // One warm-up step: the first backward creates the gradients.
    let _ = ddp
        .forward_backward(x, |l| l.cross_entropy_for_logits(y))
        .expect("step");
    let before = ddp.backward_passes();
    let (r, n) =
        ops::count(|| ddp.forward_backward(x, |l| l.cross_entropy_for_logits(y))).expect("counter");
    let _ = r.expect("step");
    (n, ddp.backward_passes() - before)
}

/// The staged backward ran one backward pass per stage (its extra `dot`
/// backward nodes pushed each stage's gradient on); the hooks must leave one
/// pass, with exactly the nodes a plain backward of the same model runs.
#[test]
fn a_ddp_step_runs_backward_once_with_the_nodes_of_a_plain_backward() {
    tch::set_num_threads(1);
    let data = data::synthetic(16, 3).expect("data");
    let (x, y) = data.rows(0, 16).expect("rows");
    let vs = nn::VarStore::new(Device::Cpu);
    let model = seed::seeded(1234, || models::cnn().build(&vs.root()));
    let step = || {
        model
            .forward_t(&x, true)
            .cross_entropy_for_logits(&y)
            .backward()
    };
    step();
    let ((), plain) = ops::count(step).expect("counter");
    assert!(plain.backward_nodes > 10, "{plain:?}");
    for split in [StageSplit::Auto, StageSplit::EveryLayer, StageSplit::Whole] {
        let (n, passes) = ddp_step(split.clone(), &x, &y);
        assert_eq!(passes, 1, "{split:?}");
        assert_eq!(
            n.backward_nodes, plain.backward_nodes,
            "{split:?}: {n:?} vs {plain:?}"
        );
        eprintln!("ops per step, split {split:?}: ddp {n:?}, plain forward+backward {plain:?}");
    }
}

/// Buckets start inside backward: every "bucket b ready" instant of a step
/// but the first (the last layers' bucket waits for nothing else) lies before
/// that step's backward ends, and all of them when stages end at every layer.
#[test]
fn buckets_start_during_the_one_backward() {
    tch::set_num_threads(1);
    let data = data::synthetic(16, 3).expect("data");
    let (x, y) = data.rows(0, 16).expect("rows");
    let (mut ddp, _vs) = one_rank(StageSplit::Auto);
    assert!(ddp.bucket_bytes().len() > 2, "{:?}", ddp.bucket_bytes());
    for _ in 0..2 {
        let _ = ddp
            .forward_backward(&x, |l| l.cross_entropy_for_logits(&y))
            .expect("step");
    }
    let tl = ddp.timeline();
    let st = tl.steps().last().cloned().expect("a step");
    let ready: Vec<_> = tl
        .events()
        .iter()
        .filter(|e| e.step == st.step && e.ph == 'i' && e.name.ends_with(" ready"))
        .map(|e| e.ts_us)
        .collect();
    assert_eq!(ready.len(), ddp.bucket_bytes().len());
    let early = ready.iter().filter(|&&t| t < st.backward_end_us).count();
    // The earliest layers' bucket finishes with backward itself.
    assert!(early + 1 >= ready.len(), "{early} of {} early", ready.len());
}

/// A backward outside the Ddp (a user's, the optimizer's) starts no bucket
/// (the hooks fire, and are off), and its gradient is summed into the next
/// step's, whose buckets carry the accumulated gradient (copied in after the
/// last accumulation, not before).
#[test]
fn a_backward_outside_the_ddp_accumulates_into_the_next_step() {
    tch::set_num_threads(1);
    let data = data::synthetic(8, 5).expect("data");
    let (x, y) = data.rows(0, 8).expect("rows");
    let (mut ddp, _vs) = one_rank(StageSplit::Auto);
    let plain = ddp.forward_t(&x, true).cross_entropy_for_logits(&y);
    plain.backward();
    assert_eq!(ddp.backward_passes(), 0);
    let g0: Vec<Tensor> = ddp.parameters().iter().map(|p| p.grad().copy()).collect();
    let _ = ddp
        .forward_backward(&x, |l| l.cross_entropy_for_logits(&y))
        .expect("step");
    // World 1: the average is the gradient itself, so the step's gradient is
    // exactly twice the first (both backward passes added the same values).
    for (p, g) in ddp.parameters().iter().zip(&g0) {
        let want = g * 2.0;
        let diff = (p.grad() - want).abs().max().double_value(&[]);
        assert_eq!(diff, 0.0);
    }
}

type ReduceFn =
    dyn Fn(&dyn collectives::Communicator, &mut Tensor) -> crate::Result<()> + Send + Sync;

/// trainers' own sync with one piece replaced: `reduce` for `all_reduce_mean`
/// (then `reduces_in_one_call` says yes), or a `ready` that fails (a learner's
/// unfinished lab 7 step 3).
#[derive(Default)]
struct Tweaked {
    reduce: Option<Box<ReduceFn>>,
    failing_ready: bool,
}

impl GradSync for Tweaked {
    fn broadcast(
        &self,
        comm: &dyn collectives::Communicator,
        tensors: &[Tensor],
        root: usize,
    ) -> crate::Result<()> {
        Standard.broadcast(comm, tensors, root)
    }
    fn all_reduce_mean(
        &self,
        comm: &dyn collectives::Communicator,
        flat: &mut Tensor,
    ) -> crate::Result<()> {
        match &self.reduce {
            Some(reduce) => reduce(comm, flat),
            None => Standard.all_reduce_mean(comm, flat),
        }
    }
    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> crate::Result<()> {
        Standard.flatten(grads, flat)
    }
    fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> crate::Result<()> {
        Standard.unflatten(flat, grads)
    }
    fn ready(&self, stage: usize, ready_stage: &[usize], next: usize) -> crate::Result<usize> {
        if self.failing_ready {
            return Err(crate::Error::InvalidArgument("ready is not written".into()));
        }
        Standard.ready(stage, ready_stage, next)
    }
    fn reduces_in_one_call(&self) -> bool {
        self.reduce.is_some()
    }
}

/// `ready` runs inside backward, in a hook that cannot return an error: the
/// error must come out of `backward` (not be lost, not leave the step waiting
/// for buckets that never started), and the communicator must come back, so
/// that the Ddp still answers afterwards.
#[test]
fn an_error_inside_the_backward_hooks_comes_out_of_backward_and_the_ddp_goes_on() {
    tch::set_num_threads(1);
    let data = data::synthetic(8, 5).expect("data");
    let (x, y) = data.rows(0, 8).expect("rows");
    let (mut ddp, _vs) = one_rank_with(
        StageSplit::EveryLayer,
        Arc::new(Tweaked {
            failing_ready: true,
            ..Default::default()
        }),
    );
    for _ in 0..2 {
        let err = ddp
            .forward_backward(&x, |l| l.cross_entropy_for_logits(&y))
            .expect_err("ready fails");
        assert!(err.to_string().contains("ready is not written"), "{err}");
    }
    assert_eq!(ddp.backward_passes(), 2);
    let sum = ddp
        .all_reduce_f64(vec![1.5], collectives::ReduceOp::Sum)
        .expect("the communicator is back");
    assert_eq!(sum, vec![1.5]);
}

/// trainers' own sync that says "queued" after its reduction, then takes
/// `late` more to return, as a GPU reduction still running would, and fails
/// then on the call `fail_on` names (0 = the first). Also returns how many calls
/// have returned.
fn queued_then_late(
    late: Duration,
    fail_on: Option<usize>,
) -> (Tweaked, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let calls = AtomicUsize::new(0);
    let returned = Arc::new(AtomicUsize::new(0));
    let count = returned.clone();
    let reduce = move |comm: &dyn collectives::Communicator, flat: &mut Tensor| {
        let call = calls.fetch_add(1, SeqCst);
        // On the CPU the averages must be in place before "queued": here the
        // notice stands for a device's stream order.
        Standard.all_reduce_mean(comm, flat)?;
        collectives::queued::queued();
        std::thread::sleep(late);
        count.fetch_add(1, SeqCst);
        if fail_on == Some(call) {
            return Err(crate::Error::InvalidArgument(format!(
                "reduction {call} failed after it was queued"
            )));
        }
        Ok(())
    };
    let sync = Tweaked {
        reduce: Some(Box::new(reduce)),
        ..Default::default()
    };
    (sync, returned)
}

/// On a GPU the NCCL backend says when a bucket's reduction is queued, and DDP
/// copies the averages back then instead of waiting for the device to finish
/// (the host had waited for the whole backward every step). The step must not
/// wait for the end of the reduction, the gradients must be the same bits, and
/// `settle` must collect every end.
#[test]
fn a_bucket_queued_on_the_device_is_copied_back_without_waiting_for_its_end() {
    use std::sync::atomic::Ordering::SeqCst;
    tch::set_num_threads(1);
    let data = data::synthetic(8, 7).expect("data");
    let (x, y) = data.rows(0, 8).expect("rows");
    let (mut plain, _v0) = one_rank(StageSplit::Whole);
    let _ = plain
        .forward_backward(&x, |l| l.cross_entropy_for_logits(&y))
        .expect("plain step");
    let (sync, returned) = queued_then_late(Duration::from_millis(500), None);
    let (mut ddp, _v1) = one_rank_with(StageSplit::Whole, Arc::new(sync));
    let buckets = ddp.bucket_bytes().len();
    assert!(buckets > 1, "the test wants several buckets, got {buckets}");
    let _ = ddp
        .forward_backward(&x, |l| l.cross_entropy_for_logits(&y))
        .expect("step");
    // Each reduction takes 0.5 s after its notice, and the communicator thread
    // runs them one after the other: backward returned once the last was
    // queued, before its end.
    assert!(
        returned.load(SeqCst) < buckets,
        "backward waited for every reduction's end ({} of {buckets})",
        returned.load(SeqCst)
    );
    for (a, b) in plain.parameters().iter().zip(ddp.parameters()) {
        let diff = (a.grad() - b.grad()).abs().max().double_value(&[]);
        assert_eq!(diff, 0.0, "same ops in the same order: the same bits");
    }
    ddp.settle().expect("settle");
    assert_eq!(returned.load(SeqCst), buckets);
}

/// A reduction that fails after it was queued (a peer lost while the device
/// reduced) already had its "averages" copied back: the failure must still
/// come out, from `settle` (and so before any checkpoint or evaluation).
#[test]
fn a_reduction_that_failed_after_it_was_queued_is_reported_by_settle() {
    tch::set_num_threads(1);
    let data = data::synthetic(8, 9).expect("data");
    let (x, y) = data.rows(0, 8).expect("rows");
    let (sync, _) = queued_then_late(Duration::from_millis(50), Some(0));
    let (mut ddp, _vs) = one_rank_with(StageSplit::Whole, Arc::new(sync));
    let first = ddp.forward_backward(&x, |l| l.cross_entropy_for_logits(&y));
    let settled = ddp.settle();
    // Reported once: by the step if its end came in time, else by settle.
    let err = match (first, settled) {
        (Err(e), Ok(())) | (Ok(_), Err(e)) => e,
        (a, b) => panic!("want exactly one error, got {a:?} and {b:?}"),
    };
    assert!(
        err.to_string().contains("failed after it was queued"),
        "{err}"
    );
    let err = ddp.with_communicator(|_, _| ()).map(|_| ()).and_then(|_| {
        ddp.forward_backward(&x, |l| l.cross_entropy_for_logits(&y))
            .map(|_| ())
    });
    assert!(
        err.is_ok(),
        "the Ddp goes on after the error was reported: {err:?}"
    );
}
