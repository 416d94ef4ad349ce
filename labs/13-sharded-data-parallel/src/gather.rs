//! The check of lab 13's stretch goal, ZeRO-3's parameter gather
//! (`cargo lab check 13 --stretch`): the check's MLP ([`crate::check_config`])
//! is cut into padded shards as [`Zero`](trainers::zero::Zero) cuts it, on 2,
//! 3 and 4 thread ranks; each rank gathers every unit from its shard, and what
//! it gets must be the unsharded model's parameters, bit for bit (a gather
//! only copies). The communicator counts the calls, so an all-reduce that
//! happens to give the right numbers is named by the bytes it moves.

#[cfg(test)]
mod tests;

use labkit::named;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use collectives::Communicator;
use collectives::transport::TransportKind;
use labkit::LabError;
use tch::Tensor;
use trainers::traffic::{Counted, Metered, Traffic};

use crate::{check_config, lab_error};

/// A parameter gather, as `stretch::gather_unit` and trainers' own
/// `zero::gather_unit` (so a test can hand in mistaken ones).
pub type Gather = fn(&dyn Communicator, &Tensor) -> trainers::Result<Tensor>;

/// The seed of the unsharded model.
const SEED: i64 = 13;
/// The worlds the check runs.
const WORLDS: [usize; 3] = [2, 3, 4];

/// What one rank's gather returned for each unit, and how many all-reduces
/// it called.
struct Gathered {
    units: Vec<Vec<f32>>,
    all_reduces: u64,
}

/// The unsharded model's units, each padded to a multiple of `world` as
/// ZeRO pads it, with its unpadded length.
fn padded_units(world: usize) -> trainers::Result<Vec<(usize, Tensor)>> {
    let w = world as i64;
    check_config()
        .init(SEED)?
        .iter()
        .map(|p| {
            let numel = p.numel() as i64;
            let len = (numel + w - 1) / w;
            Ok((numel as usize, p.f_constant_pad_nd([0, len * w - numel])?))
        })
        .collect()
}

/// Runs `f` on `world` thread ranks, each gathering every unit from its own
/// shard; a panic in a rank becomes an error.
fn run(f: Gather, world: usize) -> Result<Vec<Gathered>, LabError> {
    let ran = catch_unwind(AssertUnwindSafe(|| {
        collectives::thread_ranks::with_ranks(
            world,
            TransportKind::Shm,
            Duration::from_secs(30),
            |rank, comm| -> trainers::Result<Gathered> {
                let traffic = Traffic::new();
                let comm = Metered::new(Box::new(comm), traffic.clone());
                let mut units = Vec::new();
                for (_, padded) in padded_units(world)? {
                    let len = padded.numel() as i64 / world as i64;
                    let shard = padded.f_narrow(0, rank as i64 * len, len)?.copy();
                    let full = f(&comm, &shard)?;
                    units.push(Vec::<f32>::try_from(&full.f_reshape([-1])?)?);
                }
                Ok(Gathered {
                    units,
                    all_reduces: traffic.calls(Counted::AllReduce),
                })
            },
        )
    }));
    labkit_torch::rank_results(ran, &format!("your gather on {world} ranks"))
}

/// Names what is wrong with rank `rank`'s gathered unit `unit` (`got`) against
/// the unsharded model's padded unit (`want`, `world` shards), or nothing.
fn judge_unit(
    world: usize,
    rank: usize,
    unit: usize,
    numel: usize,
    got: &[f32],
    want: &[f32],
) -> Option<String> {
    let len = want.len() / world;
    let head = format!(
        "on {world} ranks, rank {rank}'s gather of unit {unit} ({numel} parameters, {} of \
         padding, shards of {len})",
        want.len() - numel
    );
    if got.len() != want.len() {
        let (why, key) = if got.len() == len {
            (
                "only this rank's shard: the other ranks' shards never arrived",
                "only-your-shard",
            )
        } else if got.len() == numel {
            (
                "the unit without its padding: ZeRO-3 keeps the padded unit (the shards \
                 are its equal blocks)",
                "keep-the-padding",
            )
        } else {
            ("", "")
        };
        let msg = format!(
            "{head} returned {} elements where the padded unit has {}",
            got.len(),
            want.len()
        );
        return Some(match key {
            "" => msg,
            key => named(format!("{msg}: {why}"), key),
        });
    }
    // Bit for bit: a gather only copies (and NaN equals nothing).
    let i = (0..want.len()).find(|&i| got[i].to_bits() != want[i].to_bits())?;
    let k = i / len;
    let block = |v: &[f32], j: usize| v[j * len..(j + 1) * len].to_vec();
    let head = format!(
        "{head}: element {i} (block {k}) is {} where the unsharded model has {}",
        got[i], want[i]
    );
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let mine = bits(block(got, k));
    if let Some(j) = (0..world).find(|&j| j != k && bits(block(want, j)) == mine) {
        return Some(named(
            format!(
                "{head}: block {k} holds rank {j}'s shard; rank r's shard belongs at \
                 r × {len}"
            ),
            "shard-order",
        ));
    }
    if mine.iter().all(|&b| f32::from_bits(b) == 0.0) {
        return Some(named(
            format!("{head}: block {k} is all zeros: rank {k}'s shard never arrived"),
            "only-your-shard",
        ));
    }
    Some(head)
}

/// The stretch goal's check: on 2, 3 and 4 ranks every rank's gather of every
/// unit is the unsharded model's padded unit, bit for bit, and no rank called
/// an all-reduce. Returns what passed.
pub fn check(f: Gather) -> Result<String, LabError> {
    let mut units = 0;
    for world in WORLDS {
        let gathered = run(f, world)?;
        let want = padded_units(world).map_err(lab_error)?;
        units = want.len();
        for (rank, g) in gathered.iter().enumerate() {
            for (unit, (numel, w)) in want.iter().enumerate() {
                let w = Vec::<f32>::try_from(w).map_err(|e| lab_error(e.into()))?;
                let numel = *numel;
                let got = g.units.get(unit).map_or(&[][..], Vec::as_slice);
                if let Some(why) = judge_unit(world, rank, unit, numel, got, &w) {
                    return Err(LabError::Wrong(why));
                }
            }
            if g.all_reduces > 0 {
                return Err(LabError::Wrong(named(
                    format!(
                        "the parameters are right, but on {world} ranks rank {rank} called \
                         all_reduce {} time(s): an all-reduce of a zero-filled unit sends \
                         2(n − 1)/n of it per rank, twice what a gather needs. Which \
                         collective gives every rank every rank's block?",
                        g.all_reduces
                    ),
                    "all-reduce-not-all-gather",
                )));
            }
        }
    }
    Ok(format!(
        "every rank rebuilt every unit of the unsharded model bit for bit on 2, 3 and 4 \
         ranks ({units} units, padded shards), with no all-reduce"
    ))
}
