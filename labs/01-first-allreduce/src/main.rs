//! Lab 1: a first all-reduce.
//!
//! Every rank holds one number; afterwards every rank must hold the sum. First
//! by hand — everyone sends to rank 0, rank 0 adds and sends the total back —
//! then with one `all_reduce` call. Run it plainly (it spawns its own ranks):
//!
//!     cargo run -p lab01-first-allreduce -- --nproc 4
//!
//! or under a launcher: `ringside launch --nproc-per-node 4 -- target/debug/lab01-first-allreduce`.

use anyhow::ensure;
use clap::Parser;
use collectives::job::{JobArgs, Joined};
use collectives::{Buffer, BufferMut, Communicator, Input, ReduceOp};

/// Lab 1: sum one number per rank, by hand and with all_reduce.
#[derive(Parser)]
struct Args {
    /// The job flags every lab shares (4 ranks unless --nproc says otherwise).
    #[command(flatten)]
    job: JobArgs<4>,
}

// ANCHOR: by_hand
/// The naive way: a reduce to rank 0 and a broadcast back, built from
/// point-to-point messages. Rank 0 does all the work — 2(n−1) messages pass
/// through it — which is what ring and tree algorithms fix.
fn sum_by_hand(comm: &dyn Communicator, mine: f64) -> anyhow::Result<f64> {
    let mut total = [mine];
    if comm.rank() == 0 {
        for peer in 1..comm.world_size() {
            let mut theirs = [0.0f64];
            comm.recv(&mut BufferMut::from_slice(&mut theirs), peer)?;
            total[0] += theirs[0];
        }
        for peer in 1..comm.world_size() {
            comm.send(&Buffer::from_slice(&total), peer)?;
        }
    } else {
        comm.send(&Buffer::from_slice(&total), 0)?;
        comm.recv(&mut BufferMut::from_slice(&mut total), 0)?;
    }
    Ok(total[0])
}
// ANCHOR_END: by_hand

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let Joined { rdv, comm, timeout } = match args.job.join("")? {
        Ok(joined) => joined,
        Err(code) => std::process::exit(code),
    };
    let (rank, n) = (comm.rank(), comm.world_size());
    let mine = (rank + 1) as f64;
    let expected = (n * (n + 1) / 2) as f64;

    let by_hand = sum_by_hand(comm.as_ref(), mine)?;

    // ANCHOR: all_reduce
    let mut value = [mine];
    comm.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut value),
        ReduceOp::Sum,
    )?;
    // ANCHOR_END: all_reduce

    println!(
        "rank {rank} of {n}: mine = {mine}, by hand = {by_hand}, all_reduce = {}",
        value[0]
    );
    ensure!(
        by_hand == expected && value[0] == expected,
        "rank {rank}: expected {expected}"
    );
    rdv.close(timeout)?;
    Ok(())
}
