//! Lab 14: tensor parallelism. A Megatron-style MLP block (`fc1` split by
//! columns, `fc2` by rows) runs across 2–4 ranks that all see the same batch:
//! one all-reduce in forward, one in backward. The learner writes the
//! row-parallel forward ([`exercise::YourRowParallel`], a [`RowForward`] that
//! trainers' [`TpModel`](trainers::tensor_parallel::TpModel) calls); the
//! solution is trainers' own [`AllReduceRow`]. The program checks the split
//! model against the unsplit one and measures it against data parallelism at
//! the same model size: parameters and activations per rank, bytes all-reduced
//! per step, step time.
//!
//! The optional stretch goal, the column-parallel layer with its output
//! gathered, is the learner's `src/stretch.rs`, compiled only by its own check
//! `tests/stretch.rs`; [`column`](mod@column) judges it against the unsplit layer, and its
//! solution is [`solution::column_forward`] (trainers' model never gathers a
//! column-parallel output: [`solution`] says why).

pub mod column;
pub mod exercise;
pub mod solution;

pub use labkit_torch::{fashion_mnist, lab_error};
use std::sync::Arc;

use labkit::{LabError, Variant};
use trainers::data::{self, Dataset};
use trainers::tensor_parallel::check::{self, Equivalence};
use trainers::tensor_parallel::{AllReduceRow, RowForward, TpConfig};

/// `variant`'s row-parallel forward.
pub fn row(variant: Variant) -> Arc<dyn RowForward> {
    match variant {
        Variant::Exercise => Arc::new(exercise::YourRowParallel),
        Variant::Solution => Arc::new(AllReduceRow),
    }
}

/// The check's model: hidden 160 splits unevenly over 3 ranks (54, 53, 53).
pub fn check_config() -> TpConfig {
    TpConfig {
        input: 784,
        width: 40,
        hidden: 160,
        classes: 10,
    }
}

/// The largest |Δ| the check accepts after 10 SGD steps: the split sums add
/// `world` partial sums where the unsplit model adds one, a rounding of about
/// 1e-7 per step (GELU is smooth, so it does not grow); a wrong output is off
/// by far more.
pub const TOLERANCE: f64 = 1e-5;

/// `variant`'s split model on `world` ranks against the unsplit one, 10
/// steps of 32 rows of `data`, judged: forward values, one all-reduce each
/// way, parameters after training.
pub fn judge(variant: Variant, world: usize, data: &Dataset) -> Result<Equivalence, LabError> {
    judge_row(row(variant), world, data)
}

/// [`judge`] for any row-parallel forward.
pub fn judge_row(
    row: Arc<dyn RowForward>,
    world: usize,
    data: &Dataset,
) -> Result<Equivalence, LabError> {
    let e = check::equivalence(check_config(), world, 32, 10, data, row).map_err(lab_error)?;
    let fwd = e.forward_all_reduces.first().copied().unwrap_or(0);
    if e.forward_all_reduces.iter().any(|&n| n != 1) {
        return Err(LabError::Wrong(format!(
            "on {world} ranks your forward made {fwd} all-reduce call(s) per step; the row-parallel \
             layer needs exactly one (of the partial sums)\nhint: one-all-reduce"
        )));
    }
    if e.first_logits_diff.is_nan() || e.first_logits_diff > TOLERANCE {
        return Err(LabError::Wrong(format!(
            "on {world} ranks the first forward's logits differ from the unsplit MLP's by up to \
             {:.3e} (allowed {TOLERANCE:e}): is every rank's partial sum in the total, and the \
             bias added once, after the all-reduce?",
            e.first_logits_diff
        )));
    }
    if e.max_diff.is_nan() || e.max_diff > TOLERANCE || e.moved < 1e-3 {
        return Err(LabError::Wrong(format!(
            "on {world} ranks the forward is right but after 10 steps the parameters differ \
             from the unsplit MLP's by up to {:.3e} (allowed {TOLERANCE:e}): does the gradient \
             reach `input` and `weight` through your output exactly once (the all-reduce's \
             backward is the identity)?",
            e.max_diff
        )));
    }
    Ok(e)
}

/// The self-check (`cargo lab check 14`): on 2, 3 and 4 ranks the split MLP's
/// first forward and its parameters after 10 SGD steps equal the unsplit
/// MLP's within [`TOLERANCE`], with one all-reduce in each forward and one in
/// each backward.
pub fn check(variant: Variant) -> Result<String, LabError> {
    check_row(row(variant))
}

/// [`check()`] for any row-parallel forward: first the probe of [`diagnose`],
/// then the training against the unsplit MLP.
pub fn check_row(row: Arc<dyn RowForward>) -> Result<String, LabError> {
    if let Some(why) = diagnose(row.clone()) {
        return Err(LabError::Wrong(why));
    }
    let data = data::synthetic(320, 14).map_err(lab_error)?;
    let mut said = Vec::new();
    for world in [2, 3, 4] {
        let e = judge_row(row.clone(), world, &data)?;
        said.push(format!("{world} ranks: max |Δ| {:.1e}", e.max_diff));
    }
    Ok(format!(
        "the split MLP trains like the unsplit one ({}), one all-reduce in each forward and \
         one in each backward",
        said.join(", ")
    ))
}

/// Names the mistake in row-parallel forward `row`, if it is one we know, from
/// one call on 2 thread ranks: rank 0 holds input `[[1, 2]]`, rank 1 `[[3,
/// 4]]`, both weight `[[1, 1]]` and bias `[0.5]`. The whole layer's output is
/// 1 + 2 + 3 + 4 + 0.5 = 10.5 on both ranks, and the backward of the output's
/// sum gives each rank's `input` the gradient `[[1, 1]]` (its weight) and its
/// `weight` its input. `None` when the forward does that, or fails (the check
/// then reports its error).
pub fn diagnose(row: Arc<dyn RowForward>) -> Option<String> {
    use collectives::transport::TransportKind;
    use tch::{Kind, Tensor};
    // (output, input's gradient, weight's gradient); a gradient that never
    // arrived is empty.
    type Seen = (f64, Vec<f32>, Vec<f32>);
    let out = collectives::thread_ranks::with_ranks(
        2,
        TransportKind::Shm,
        std::time::Duration::from_secs(10),
        |rank, comm| -> trainers::Result<Seen> {
            let first = 2.0 * rank as f32 + 1.0;
            let input = Tensor::from_slice(&[first, first + 1.0])
                .f_reshape([1, 2])?
                .set_requires_grad(true);
            let weight = Tensor::from_slice(&[1f32, 1.0])
                .f_reshape([1, 2])?
                .set_requires_grad(true);
            let bias = Tensor::from_slice(&[0.5f32]).set_requires_grad(true);
            let y = row.forward(&comm, &input, &weight, &bias)?;
            let value = y.f_sum(Kind::Double)?.f_double_value(&[])?;
            let grads = match y.f_sum(Kind::Float)?.f_backward() {
                Ok(()) => {
                    let g = |t: &Tensor| {
                        let g = t.grad();
                        if g.defined() {
                            Vec::<f32>::try_from(&g.f_flatten(0, -1)?)
                                .map_err(trainers::Error::from)
                        } else {
                            Ok(Vec::new())
                        }
                    };
                    (g(&input)?, g(&weight)?)
                }
                // No tensor of the output's history needs a gradient.
                Err(_) => (Vec::new(), Vec::new()),
            };
            Ok((value, grads.0, grads.1))
        },
    )
    .ok()?;
    let seen: Vec<Seen> = out.into_iter().collect::<trainers::Result<_>>().ok()?;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-5;
    let values: Vec<f64> = seen.iter().map(|s| s.0).collect();
    let said = format!(
        "on 2 ranks holding inputs [[1, 2]] and [[3, 4]], weights [[1, 1]] and bias 0.5, the \
         output should be 10.5 on both ranks; yours gave {} and {}",
        values[0], values[1]
    );
    let (why, key) = if values.iter().all(|&v| close(v, 11.0)) {
        (
            "11 is the bias twice: each rank added it before the sum",
            "bias-once",
        )
    } else if close(values[0], 3.5) && close(values[1], 7.5) {
        (
            "each rank's own part plus the bias: the parts were never summed across the ranks",
            "sum-the-partials",
        )
    } else if !values.iter().all(|&v| close(v, 10.5)) {
        ("", "")
    } else if seen.iter().any(|s| s.1.is_empty() || s.2.is_empty()) {
        (
            "the values are right, but the backward of the output never reached `input` or \
             `weight`: the all-reduced tensor has no autograd history",
            "keep-the-graph",
        )
    } else {
        let want = [[1f32, 1.0], [1.0, 1.0]];
        let inputs = [[1f32, 2.0], [3.0, 4.0]];
        let wrong = (0..2).find_map(|r| {
            let (gi, gw) = (&seen[r].1, &seen[r].2);
            (0..2).find_map(|i| {
                if (gi[i] - want[r][i]).abs() > 1e-5 {
                    Some(format!(
                        "rank {r} input gradient element {i}: got {}, expected {}",
                        gi[i], want[r][i]
                    ))
                } else if (gw[i] - inputs[r][i]).abs() > 1e-5 {
                    Some(format!(
                        "rank {r} weight gradient element {i}: got {}, expected {}",
                        gw[i], inputs[r][i]
                    ))
                } else {
                    None
                }
            })
        })?;
        return Some(format!(
            "{said}, right, but {wrong}: the output's gradient must reach `partial` once, \
             unchanged (the all-reduce's backward is the identity)\nhint: keep-the-graph"
        ));
    };
    Some(if key.is_empty() {
        said
    } else {
        format!("{said}: {why}\nhint: {key}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use collectives::{Communicator, Input, ReduceOp};
    use tch::Tensor;
    use trainers::comm::buffer_mut;

    /// A row-parallel forward with one of the known mistakes.
    #[derive(Clone, Copy)]
    enum Mistake {
        /// The bias added on every rank before the all-reduce.
        BiasPerRank,
        /// The all-reduced values returned as they are: no autograd history.
        NoGraph,
        /// Each rank's own partial sum plus the bias: never all-reduced.
        NoSum,
        /// The bias spread over the ranks and all-reduced on its own: right
        /// values, two all-reduces per forward.
        TwoAllReduces,
    }

    impl RowForward for Mistake {
        fn forward(
            &self,
            comm: &dyn Communicator,
            input: &Tensor,
            weight: &Tensor,
            bias: &Tensor,
        ) -> trainers::Result<Tensor> {
            let mut partial = input.f_matmul(&weight.f_tr()?)?;
            if let Mistake::NoSum = self {
                return Ok(partial.f_add(bias)?);
            }
            if let Mistake::BiasPerRank = self {
                partial = partial.f_add(bias)?;
            }
            let mut total = partial.f_detach()?.f_contiguous()?.copy();
            comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut total)?, ReduceOp::Sum)?;
            match self {
                Mistake::BiasPerRank => Ok(total.f_add(&partial.f_sub(&partial.f_detach()?)?)?),
                Mistake::NoGraph => Ok(total.f_add(bias)?),
                Mistake::TwoAllReduces => {
                    let world = comm.world_size() as f64;
                    let mut b = bias.f_detach()?.f_div_scalar(world)?.f_contiguous()?;
                    comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut b)?, ReduceOp::Sum)?;
                    let with_graph = total.f_add(&partial.f_sub(&partial.f_detach()?)?)?;
                    // b's values are the bias; the gradient still reaches
                    // `bias` through the added zero.
                    Ok(with_graph
                        .f_add(&b)?
                        .f_add(&bias.f_sub(&bias.f_detach()?)?)?)
                }
                Mistake::NoSum => unreachable!("returned before the all-reduce"),
            }
        }
    }

    fn message(m: Mistake) -> String {
        check_row(Arc::new(m)).unwrap_err().to_string()
    }

    #[test]
    fn bias_added_on_every_rank_is_named() {
        let msg = message(Mistake::BiasPerRank);
        assert!(msg.contains("yours gave 11 and 11"), "{msg}");
        assert!(msg.contains("hint: bias-once"), "{msg}");
    }

    #[test]
    fn output_without_autograd_history_is_named() {
        let msg = message(Mistake::NoGraph);
        assert!(msg.contains("never reached `input`"), "{msg}");
        assert!(msg.contains("hint: keep-the-graph"), "{msg}");
    }

    #[test]
    fn partials_never_summed_are_named() {
        let msg = message(Mistake::NoSum);
        assert!(msg.contains("yours gave 3.5 and 7.5"), "{msg}");
        assert!(msg.contains("hint: sum-the-partials"), "{msg}");
    }

    #[test]
    fn a_second_all_reduce_in_the_forward_is_named() {
        let msg = message(Mistake::TwoAllReduces);
        assert!(msg.contains("made 2 all-reduce call(s)"), "{msg}");
        assert!(msg.contains("hint: one-all-reduce"), "{msg}");
    }

    #[test]
    fn the_solution_passes_the_probe() {
        assert_eq!(diagnose(Arc::new(AllReduceRow)), None);
    }
}
