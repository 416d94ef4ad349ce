//! The check of lab 14's stretch goal, the column-parallel layer with its
//! output gathered (`cargo lab check 14 --stretch`): a layer of 7 inputs and
//! 10 outputs split by output features over 2, 3 and 4 thread ranks (shards
//! of 5-5, 4-3-3, 3-3-2-2), judged against the unsplit layer: every rank's
//! output, each rank's weight and bias gradients, and the sum of the ranks'
//! input gradients. The inputs, weights and the loss's weights are small
//! multiples of 1/32, so every sum is exact in f32 whatever its order (the
//! 1e-6 tolerance only guards that claim). The communicator counts the calls,
//! so an all-reduce that happens to give the right numbers is named by the
//! bytes it moves.

#[cfg(test)]
mod tests;

use labkit::named;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use collectives::Communicator;
use collectives::transport::TransportKind;
use labkit::LabError;
use tch::{Kind, Tensor};
use trainers::tensor_parallel::shard;
use trainers::traffic::{Counted, Metered, Traffic};

use crate::lab_error;

/// A gathered column-parallel forward, as `stretch::column_forward` and the
/// solution's (so a test can hand in mistaken ones).
pub type ColumnForward =
    fn(&dyn Communicator, &Tensor, &Tensor, &Tensor, i64) -> trainers::Result<Tensor>;

/// Rows of the batch, input features, output features.
const BATCH: i64 = 6;
const IN: i64 = 7;
const OUT: i64 = 10;
/// The worlds the check runs.
const WORLDS: [usize; 3] = [2, 3, 4];
/// Exact by construction; a wrong answer is off by at least 1/32.
const TOLERANCE: f32 = 1e-6;

/// A `[rows, cols]` tensor of small multiples of 1/`den` from `f(i, j)`.
fn table(rows: i64, cols: i64, den: f32, f: impl Fn(i64, i64) -> i64) -> trainers::Result<Tensor> {
    let v: Vec<f32> = (0..rows)
        .flat_map(|i| (0..cols).map(move |j| (i, j)))
        .map(|(i, j)| f(i, j) as f32 / den)
        .collect();
    Ok(Tensor::from_slice(&v).f_reshape([rows, cols])?)
}

/// The whole layer: input, weight, bias, and the weights of the loss
/// `sum(output · loss_weights)` whose backward the check runs.
struct Layer {
    x: Tensor,
    w: Tensor,
    b: Tensor,
    r: Tensor,
}

fn layer() -> trainers::Result<Layer> {
    Ok(Layer {
        x: table(BATCH, IN, 8.0, |i, k| (i * 7 + k * 3) % 11 - 5)?,
        w: table(OUT, IN, 4.0, |j, k| (j * 5 + k * 2) % 9 - 4)?,
        b: table(1, OUT, 2.0, |_, j| j - 4)?.f_reshape([OUT])?,
        r: table(BATCH, OUT, 4.0, |i, j| (i * 5 + j * 2) % 7 - 3)?,
    })
}

/// What one rank's forward and backward gave.
struct Seen {
    shape: Vec<i64>,
    output: Vec<f32>,
    /// Gradients of this rank's weight, bias and input; empty if none arrived.
    weight: Vec<f32>,
    bias: Vec<f32>,
    input: Vec<f32>,
    all_reduces: u64,
}

fn flat(t: &Tensor) -> trainers::Result<Vec<f32>> {
    Ok(Vec::<f32>::try_from(
        &t.f_reshape([-1])?.f_to_kind(Kind::Float)?,
    )?)
}

fn grad(t: &Tensor) -> trainers::Result<Vec<f32>> {
    let g = t.f_grad()?;
    if g.defined() {
        flat(&g)
    } else {
        Ok(Vec::new())
    }
}

/// Runs `f` on `world` thread ranks, then the backward of the loss from its
/// output; a panic in a rank becomes an error.
fn run(f: ColumnForward, world: usize) -> Result<Vec<Seen>, LabError> {
    let ran = catch_unwind(AssertUnwindSafe(|| {
        collectives::thread_ranks::with_ranks(
            world,
            TransportKind::Shm,
            Duration::from_secs(10),
            |rank, comm| -> trainers::Result<Seen> {
                let traffic = Traffic::new();
                let comm = Metered::new(Box::new(comm), traffic.clone());
                let l = layer()?;
                let (start, len) = shard(OUT, rank, world);
                let input = l.x.copy().set_requires_grad(true);
                let weight = l.w.f_narrow(0, start, len)?.copy().set_requires_grad(true);
                let bias = l.b.f_narrow(0, start, len)?.copy().set_requires_grad(true);
                let out = f(&comm, &input, &weight, &bias, OUT)?;
                let shape = out.size();
                let output = flat(&out)?;
                if shape == [BATCH, OUT] {
                    // No path to any leaf is an error of backward: the
                    // empty gradients below name it.
                    let _ = out.f_mul(&l.r)?.f_sum(Kind::Float)?.f_backward();
                }
                Ok(Seen {
                    shape,
                    output,
                    weight: grad(&weight)?,
                    bias: grad(&bias)?,
                    input: grad(&input)?,
                    all_reduces: traffic.calls(Counted::AllReduce),
                })
            },
        )
    }));
    labkit_torch::rank_results(
        ran,
        &format!("your column-parallel forward on {world} ranks"),
    )
}

/// The first index where `got` and `want` differ by more than the tolerance
/// (NaN differs from everything), or nothing.
fn first_difference(got: &[f32], want: &[f32]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(0);
    }
    (0..want.len()).find(|&i| {
        let d = (got[i] - want[i]).abs();
        d.is_nan() || d > TOLERANCE
    })
}

/// The unsplit layer's answers: output, weight, bias and input gradients.
struct Want {
    output: Vec<f32>,
    /// The output's column blocks laid flat one after the other, as a gather
    /// concatenates them, read back as `[batch, out]`: the rows mistake.
    as_rows: Vec<f32>,
    weight: Tensor,
    bias: Tensor,
    input: Vec<f32>,
}

fn want(world: usize) -> trainers::Result<Want> {
    let l = layer()?;
    let out = l.x.f_matmul(&l.w.f_tr()?)?.f_add(&l.b)?;
    let mut blocks = Vec::new();
    for r in 0..world {
        let (start, len) = shard(OUT, r, world);
        blocks.push(
            out.f_narrow(1, start, len)?
                .f_contiguous()?
                .f_reshape([-1])?,
        );
    }
    Ok(Want {
        output: flat(&out)?,
        as_rows: flat(&Tensor::f_cat(&blocks, 0)?)?,
        weight: l.r.f_tr()?.f_matmul(&l.x)?,
        bias: l.r.f_sum_dim_intlist(0, false, Kind::Float)?,
        input: flat(&l.r.f_matmul(&l.w)?)?,
    })
}

/// Names what is wrong with `seen` (every rank's) on `world` ranks, or nothing.
fn judge(world: usize, seen: &[Seen], want: &Want) -> Result<Option<String>, LabError> {
    for (rank, s) in seen.iter().enumerate() {
        let (start, len) = shard(OUT, rank, world);
        let head = format!(
            "on {world} ranks (shards of {}), rank {rank}",
            shards(world)
        );
        if s.shape != [BATCH, OUT] {
            let msg = format!(
                "{head} returned shape {:?}; the whole layer's output is [{BATCH}, {OUT}]",
                s.shape
            );
            return Ok(Some(if s.shape == [BATCH, len] {
                named(
                    format!("{msg}: that is only this rank's {len} columns, never gathered"),
                    "gather-the-columns",
                )
            } else {
                msg
            }));
        }
        if let Some(i) = first_difference(&s.output, &want.output) {
            let (row, col) = (i as i64 / OUT, i as i64 % OUT);
            let owner = (0..world).find(|&r| {
                let (a, n) = shard(OUT, r, world);
                (a..a + n).contains(&col)
            });
            let msg = format!(
                "{head}'s output [{row}, {col}] (rank {}'s column) is {} where the unsplit \
                 layer's is {}",
                owner.unwrap_or(0),
                s.output[i],
                want.output[i]
            );
            return Ok(Some(
                if first_difference(&s.output, &want.as_rows).is_none() {
                    named(
                        format!(
                            "{msg}: your output is the ranks' blocks laid one after the other \
                         in memory, read as [{BATCH}, {OUT}]: each block is a [{BATCH}, len] \
                         matrix of columns, so the blocks go side by side"
                        ),
                        "columns-not-rows",
                    )
                } else {
                    msg
                },
            ));
        }
        if s.all_reduces > 0 {
            return Ok(Some(named(
                format!(
                    "the output is right, but {head} called all_reduce {} time(s): an \
                     all-reduce of a zero-filled output sends 2(n − 1)/n of it per rank, twice \
                     what a gather needs",
                    s.all_reduces
                ),
                "all-gather-not-all-reduce",
            )));
        }
        if s.weight.is_empty() || s.bias.is_empty() || s.input.is_empty() {
            return Ok(Some(named(
                format!(
                    "the output is right, but {head}: the backward from its output never \
                     reached its {}: the gathered tensor has no autograd history",
                    if s.weight.is_empty() {
                        "weight"
                    } else if s.bias.is_empty() {
                        "bias"
                    } else {
                        "input"
                    }
                ),
                "keep-the-graph",
            )));
        }
        let rows = |t: &Tensor| -> Result<Vec<f32>, LabError> {
            flat(&t.f_narrow(0, start, len).map_err(|e| lab_error(e.into()))?).map_err(lab_error)
        };
        for (what, got, w) in [
            ("weight", &s.weight, rows(&want.weight)?),
            ("bias", &s.bias, rows(&want.bias)?),
        ] {
            if let Some(i) = first_difference(got, &w) {
                return Ok(Some(named(
                    format!(
                        "the output is right, but {head}'s {what} gradient element {i} is {} \
                         where the unsplit layer's is {} (its rows {start}..{}): the gradient \
                         of the output must reach this rank's columns once, and the other \
                         ranks' columns not at all",
                        got.get(i).copied().unwrap_or(f32::NAN),
                        w[i],
                        start + len
                    ),
                    "own-columns-gradient",
                )));
            }
        }
    }
    let mut sum = vec![0f32; want.input.len()];
    for s in seen {
        for (a, g) in sum.iter_mut().zip(&s.input) {
            *a += g;
        }
    }
    if let Some(i) = first_difference(&sum, &want.input) {
        return Ok(Some(named(
            format!(
                "on {world} ranks the output and the weights' gradients are right, but the \
                 ranks' input gradients add up to {} at element {i} where the unsplit layer's \
                 is {}: each rank's input gradient is its own columns' part",
                sum[i], want.input[i]
            ),
            "own-columns-gradient",
        )));
    }
    Ok(None)
}

/// "5-5", "4-3-3", …
fn shards(world: usize) -> String {
    (0..world)
        .map(|r| shard(OUT, r, world).1.to_string())
        .collect::<Vec<_>>()
        .join("-")
}

/// The stretch goal's check: on 2, 3 and 4 ranks every rank's output is the
/// unsplit layer's, its gradients the unsplit layer's rows, with no
/// all-reduce. Returns what passed.
pub fn check(f: ColumnForward) -> Result<String, LabError> {
    for world in WORLDS {
        let seen = run(f, world).map_err(|e| {
            let said = e.to_string();
            // The flight recorder names a gather whose ranks bring blocks of
            // different sizes ("ranks disagree: … all_gather … (18 × float) …").
            if said.contains("disagree") && said.contains("all_gather") {
                LabError::Wrong(named(
                    format!(
                        "on {world} ranks (shards of {}): {said}: an all-gather moves equal \
                         blocks, and these ranks' columns differ in number",
                        shards(world)
                    ),
                    "pad-the-blocks",
                ))
            } else {
                e
            }
        })?;
        let want = want(world).map_err(lab_error)?;
        if let Some(why) = judge(world, &seen, &want)? {
            return Err(LabError::Wrong(why));
        }
    }
    Ok(format!(
        "every rank's output, weight and bias gradients equal the unsplit layer's on 2, 3 and 4 \
         ranks (shards of {}, {}, {}), the input gradients add up to its, with no all-reduce",
        shards(2),
        shards(3),
        shards(4)
    ))
}
