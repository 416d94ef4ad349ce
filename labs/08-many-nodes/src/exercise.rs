//! Lab 8, the file you edit: what a launcher tells each rank.
//!
//! `ringside launch` (like torchrun) runs on every node, starts that node's
//! ranks, and gives each a handful of environment variables from which the
//! rank finds its place in the job and rank 0's store. Your function computes
//! them; the lab's launches (one host, then namespaces as hosts) use yours.
//!
//! Check it with `cargo lab check 8`, run the lab with `cargo lab 8`.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished.
#![allow(unused_imports, unused_variables)]

use collectives::launch::RankSlot;

// ANCHOR: rank_env
/// The variables of one rank: `slot.local_rank` on node `slot.spec.node_rank`
/// of `slot.spec.nnodes`, each with `slot.spec.nproc_per_node` ranks; rank 0's
/// store listens at `slot.spec.master_addr`, port `slot.master_port`.
pub fn rank_env(slot: &RankSlot<'_>) -> Result<Vec<(String, String)>, String> {
    // TODO(lab 08): return torchrun's seven variables as (name, value):
    // RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR
    // and MASTER_PORT. The contract the check proves, for jobs of 1 node × 3
    // ranks, 2 × 2 and 4 × 1: no two ranks of any node share a RANK, the
    // RANKs together are exactly 0..WORLD_SIZE, and every rank agrees on the
    // job's size and on where rank 0's store listens. Then a real two-node
    // job on this host must rendezvous with your variables and all-reduce.
    Err(labkit::todo(8, "rank_env", file!()).to_string())
}
// ANCHOR_END: rank_env
