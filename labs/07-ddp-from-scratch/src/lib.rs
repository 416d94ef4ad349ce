//! Lab 7: DDP from scratch. The learner's [`exercise::YourSync`] implements
//! trainers' seam [`GradSync`] in three steps; trainers' [`Ddp`](trainers::ddp::Ddp) runs it. Each
//! step is checked with trainers' own pieces ([`Standard`]) standing in for the
//! later steps ([`Upto`]); the solution is [`Standard`] itself.
//!
//! The optional stretch goal, the bucket assignment, is the learner's
//! `src/stretch.rs`, compiled only by its own check `tests/stretch.rs`;
//! [`buckets`] judges it against PyTorch's rule worked by hand, and its
//! solution is trainers' own [`trainers::bucket::assign`], which [`Ddp`](trainers::ddp::Ddp) calls.

pub mod buckets;
pub mod diagnose;
pub mod exercise;

pub use labkit_torch::{fashion_mnist, lab_error};
use std::sync::Arc;
use std::time::Duration;

use collectives::Communicator;
use labkit::{LabError, Variant};
use tch::Tensor;
use trainers::data::{Dataset, Split};
use trainers::ddp::{self, DdpOptions, GradSync, StageSplit, Standard};

/// The three steps of the exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Broadcast the parameters; one all-reduce per gradient.
    PerParameter = 1,
    /// Flatten gradients into buckets.
    Buckets = 2,
    /// Start each bucket's all-reduce while backward goes on.
    Overlap = 3,
}

impl Step {
    /// All three, in order.
    pub const ALL: [Step; 3] = [Step::PerParameter, Step::Buckets, Step::Overlap];

    /// What the step is called in charts and messages.
    pub fn label(self) -> &'static str {
        match self {
            Step::PerParameter => "1: one all_reduce per parameter",
            Step::Buckets => "2: buckets",
            Step::Overlap => "3: buckets overlapped with backward",
        }
    }

    /// The DDP options the step is run with: one parameter per bucket and no
    /// stages for step 1; PyTorch's buckets (1 MiB, then 25 MiB) in one backward
    /// for step 2; `cap` buckets over backward stages for step 3 (the CNN's
    /// 0.9 MB of gradients fit one PyTorch bucket, which leaves nothing to
    /// overlap).
    pub fn options(self, cap: usize) -> DdpOptions {
        let base = DdpOptions {
            timeout: Duration::from_secs(60),
            ..DdpOptions::default()
        };
        match self {
            Step::PerParameter => DdpOptions {
                first_bucket_bytes: 0,
                bucket_cap_bytes: 0,
                split: StageSplit::Whole,
                ..base
            },
            Step::Buckets => DdpOptions {
                split: StageSplit::Whole,
                ..base
            },
            Step::Overlap => DdpOptions {
                first_bucket_bytes: cap,
                bucket_cap_bytes: cap,
                split: StageSplit::Auto,
                ..base
            },
        }
    }
}

/// Bucket cap of step 3 by default: several buckets for the CNN.
pub const OVERLAP_CAP: usize = 256 << 10;

/// The learner's pieces up to `step`, trainers' own after it.
pub struct Upto {
    step: Step,
    yours: exercise::YourSync,
}

impl GradSync for Upto {
    fn broadcast(
        &self,
        comm: &dyn Communicator,
        tensors: &[Tensor],
        root: usize,
    ) -> trainers::Result<()> {
        self.yours.broadcast(comm, tensors, root)
    }
    fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> trainers::Result<()> {
        self.yours.all_reduce_mean(comm, flat)
    }
    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> trainers::Result<()> {
        if self.step >= Step::Buckets {
            self.yours.flatten(grads, flat)
        } else {
            Standard.flatten(grads, flat)
        }
    }
    fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> trainers::Result<()> {
        if self.step >= Step::Buckets {
            self.yours.unflatten(flat, grads)
        } else {
            Standard.unflatten(flat, grads)
        }
    }
    fn ready(&self, stage: usize, ready_stage: &[usize], next: usize) -> trainers::Result<usize> {
        if self.step >= Step::Overlap {
            self.yours.ready(stage, ready_stage, next)
        } else {
            Standard.ready(stage, ready_stage, next)
        }
    }
}

/// `variant`'s pieces for `step`: the learner's through [`Upto`], or trainers' own.
pub fn sync(variant: Variant, step: Step) -> Arc<dyn GradSync> {
    match variant {
        Variant::Exercise => Arc::new(Upto {
            step,
            yours: exercise::YourSync,
        }),
        Variant::Solution => Arc::new(Standard),
    }
}

/// The self-check of `step`: R ranks × batch 8 train like one process with
/// batch 8·R (every parameter within 1e-5 after 10 SGD steps with momentum,
/// from rank 0's start) at R = 2 and 3 on Fashion-MNIST; at step 3 also that
/// some bucket starts before backward ends, and that `no_sync` over 2 of 3
/// micro-batches leaves exactly one all-reduce per bucket per optimizer step.
pub fn check(variant: Variant, step: Step) -> Result<String, LabError> {
    let data = fashion_mnist(Split::Test)?;
    let opts = step.options(64 << 10);
    let mut said = Vec::new();
    for world in [2, 3] {
        let e = ddp::check::equivalence(world, 8, 10, &data, sync(variant, step), opts.clone())
            .map_err(|e| {
                // A bucket started too early can fail inside DDP: say why if we can.
                let named = diagnosis(variant, step);
                if named.is_empty() {
                    lab_error(e)
                } else {
                    LabError::Wrong(format!("step {}, {world} ranks: {e}{named}", step as u8))
                }
            })?;
        // 1e-5: two ranks average exactly (halving); three round once per
        // step, which momentum carries: ~4e-7 after 10 steps on every CPU
        // tried. A wrong average or a missed broadcast is off by > 1e-3.
        // Written so that NaN fails: NaN compares false with everything.
        if !(e.max_diff <= 1e-5 && e.moved >= 1e-3) {
            return Err(LabError::Wrong(format!(
                "step {}, {world} ranks: max |Δparam| against one process = {:.2e} after 10 \
                 steps (allowed 1e-5; the run moved the parameters by {:.2e}){}",
                step as u8,
                e.max_diff,
                e.moved,
                diagnosis(variant, step)
            )));
        }
        said.push(format!(
            "{world} ranks ≡ one process (max |Δ| {:.1e})",
            e.max_diff
        ));
    }
    if step == Step::Overlap {
        let early = overlapped_buckets(variant, &data)?;
        if early == 0 {
            return Err(LabError::Wrong(
                "step 3: every bucket started after backward ended: nothing overlapped \
                 (does `ready` advance past the buckets of the stage just done?)"
                    .to_string()
                    + &diagnosis(variant, step),
            ));
        }
        said.push(format!("{early} bucket(s) started during backward"));
        let (per_step, buckets) =
            ddp::check::all_reduces_per_step(2, 3, 4, 3, &data, sync(variant, step), opts)
                .map_err(lab_error)?;
        if per_step.iter().any(|&n| n != buckets) {
            return Err(LabError::Wrong(format!(
                "no_sync over 2 of 3 micro-batches: all_reduce calls per optimizer step \
                 {per_step:?}, expected {buckets} (one per bucket)"
            )));
        }
        said.push(format!(
            "no_sync: {buckets} all-reduces per step of 3 micro-batches"
        ));
    }
    Ok(said.join("; "))
}

/// What [`diagnose`] names in `variant`'s pieces for `step` (empty if nothing).
fn diagnosis(variant: Variant, step: Step) -> String {
    diagnose::diagnose(sync(variant, step).as_ref())
}

/// Buckets whose all-reduce started before the backward of the second step
/// ended, on 2 ranks (the first step is left out: it is the warm-up).
fn overlapped_buckets(variant: Variant, data: &Dataset) -> Result<usize, LabError> {
    let opts = Step::Overlap.options(64 << 10);
    let counts =
        trainers::thread_ranks::with_data_ranks(2, data, opts.timeout, |rank, comm, data| {
            let vs = tch::nn::VarStore::new(tch::Device::Cpu);
            let model = trainers::models::cnn().build(&vs.root());
            let mut d =
                ddp::Ddp::with_sync(model, &vs, comm, opts.clone(), sync(variant, Step::Overlap))?;
            for s in 0..2i64 {
                let x = data.images.f_narrow(0, (s * 2 + rank as i64) * 8, 8)?;
                let y = data.labels.f_narrow(0, (s * 2 + rank as i64) * 8, 8)?;
                let _ = d.forward_backward(&x, |l| l.cross_entropy_for_logits(&y))?;
            }
            let tl = d.timeline();
            let step = tl.steps().last().cloned();
            Ok(step.map_or(0, |st| {
                tl.events()
                    .iter()
                    .filter(|e| {
                        e.step == st.step
                            && e.ph == 'i'
                            && e.name.ends_with(" ready")
                            && e.ts_us < st.backward_end_us
                    })
                    .count()
            }))
        })
        .map_err(lab_error)?;
    let mut early = usize::MAX;
    for c in counts {
        early = early.min(c.map_err(lab_error)?);
    }
    Ok(early)
}
