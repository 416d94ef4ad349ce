//! Hierarchical (two-level) all_reduce, as NCCL and Horovod run it across
//! nodes: (1) reduce inside each node to the node's leader (its local rank 0),
//! (2) all_reduce among the leaders only, (3) broadcast inside each node.
//!
//! Between nodes the link is the slow part. A flat ring over nodes × per_node
//! ranks (node by node in rank order) crosses each node boundary with
//! 2(n − 1)/n of the buffer; here only the leaders' ring crosses, with
//! 2(nodes − 1)/nodes of it per boundary. The price is more rounds inside the
//! node, where the link is fast.
//!
//! Ranks r with equal r / per_node share a node (launchers number a node's
//! ranks consecutively: torchrun's RANK = node_rank × per_node + local_rank).

use super::group::Group;
use super::{TaggedTransport, ring, tree};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};

/// Checks a layout of `per_node` ranks per node for `world` ranks.
pub fn check_layout(world: usize, per_node: usize) -> Result<()> {
    if per_node == 0 || world % per_node != 0 {
        return Err(Error::InvalidArgument(format!(
            "hierarchical all_reduce: {per_node} ranks per node do not divide the \
             {world}-rank world into whole nodes"
        )));
    }
    Ok(())
}

/// Ranks per node for the backend's `--algo hierarchical` when the
/// rendezvous did not say ([`crate::backends::Options::per_node`]: a job
/// joined through [`crate::job`] takes its launcher's local world size, under
/// any launcher): `LOCAL_WORLD_SIZE` (torchrun's and `ringside launch`'s name
/// for this node's ranks). Unset, the job is taken as one node: the algorithm
/// then degenerates to a tree reduce and broadcast (correct, with no link to
/// save).
pub fn per_node_from_env(world: usize) -> Result<usize> {
    match std::env::var("LOCAL_WORLD_SIZE") {
        Err(_) => Ok(world),
        Ok(s) => s.trim().parse().map_err(|_| {
            Error::InvalidArgument(format!(
                "hierarchical all_reduce: LOCAL_WORLD_SIZE={s:?} is not a number of ranks"
            ))
        }),
    }
}

// ANCHOR: all_reduce
/// In-place hierarchical all_reduce of `buf` over nodes of `per_node`
/// consecutive ranks (`Avg` is left as a sum; the caller divides). `per_node`
/// must divide the world size; `per_node` = world size is one node (a tree
/// reduce and broadcast), `per_node` = 1 is the leaders' ring alone.
pub fn all_reduce(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    per_node: usize,
) -> Result<()> {
    let (r, n, tag) = (p.rank(), p.world(), p.tag);
    check_layout(n, per_node)?;
    // Every rank derives the same leader for its node: local rank 0.
    let leader = r / per_node * per_node;
    let node: Vec<usize> = (leader..leader + per_node).collect();
    // 1. The node's sum into its leader (group rank 0).
    tree::reduce(
        &mut TaggedTransport {
            t: &mut Group::new(&mut *p.t, node.clone())?,
            tag,
        },
        buf,
        dtype,
        op,
        0,
    )?;
    // 2. Only the leaders cross node boundaries.
    if r == leader {
        let leaders: Vec<usize> = (0..n).step_by(per_node).collect();
        ring::all_reduce(
            &mut TaggedTransport {
                t: &mut Group::new(&mut *p.t, leaders)?,
                tag,
            },
            buf,
            dtype,
            op,
        )?;
    }
    // 3. The total from the leader to the rest of its node.
    tree::broadcast(
        &mut TaggedTransport {
            t: &mut Group::new(&mut *p.t, node)?,
            tag,
        },
        buf,
        0,
    )
}
// ANCHOR_END: all_reduce

#[cfg(test)]
mod tests;
