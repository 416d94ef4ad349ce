//! Lab 8: launching and many nodes, on one machine. The learner writes the
//! variables a launcher gives each rank ([`exercise::rank_env`]); the lab's
//! launches go through `collectives::launch` (the code of `ringside launch`)
//! with them ([`rank_env`]). The solution is `launch::torchrun_env`.
//!
//! Records of the simulated hosts are labelled `<backend>-tcp@<N>nodes-<rate>`
//! (e.g. `reference-tcp@2nodes-1gbit`, `reference-tcp@4nodes-unshaped`), and
//! the same N ranks on one host `<backend>-tcp@1host-<N>ranks`; lab 9 reads the newest
//! run's records by that convention. (The form had a link latency too:
//! this kernel has no `sch_netem`, so links are shaped in bandwidth only.)
//!
//! The optional stretch goal, a hierarchical all-reduce, is the learner's
//! `src/stretch.rs`, compiled only by its own check `tests/stretch.rs`;
//! [`hierarchical`] judges it, and its solution is the reference backend's
//! `collectives::algorithms::hierarchical::all_reduce` (`--algo hierarchical`).

pub mod exercise;
pub mod hierarchical;

use std::time::Duration;

use collectives::launch::{self, LaunchSpec, RankEnv, RankSlot};
use collectives::rendezvous::store::Token;
use labkit::{LabError, Variant};

/// `variant`'s rank variables: the learner's, or torchrun's (the solution).
pub fn rank_env(variant: Variant) -> RankEnv {
    match variant {
        Variant::Exercise => exercise::rank_env,
        Variant::Solution => launch::torchrun_env,
    }
}

/// The self-check, in two parts. First, for launches of 1 node × 3 ranks,
/// 2 nodes × 2 and 4 nodes × 1, every node's ranks get distinct `RANK`s that
/// together cover `0..WORLD_SIZE`, and the variables name the node and rank 0's
/// store consistently. Then a real two-node job on this host: `program`
/// (the lab's binary) started as two node launchers with `variant`'s
/// variables, whose 4 ranks must rendezvous and all-reduce correctly.
pub fn check(variant: Variant, program: &std::path::Path) -> Result<(), LabError> {
    check_vars(rank_env(variant), program)?;
    two_node_job(variant, program)
}

/// The first part of [`check`] for any `env`: the variables of every rank of
/// launches of 1 node × 3, 2 × 2 and 4 × 1. A failure names the rank, the
/// variable, the value and, for the mistakes we know, ends with a line
/// `hint: <key>` (keys in `labs/info.toml`).
pub fn check_vars(env: RankEnv, program: &std::path::Path) -> Result<(), LabError> {
    for (nnodes, nproc) in [(1, 3), (2, 2), (4, 1)] {
        let mut seen = Vec::new();
        for node in 0..nnodes {
            let mut spec = LaunchSpec::new(program, Vec::<String>::new(), nproc);
            (spec.nnodes, spec.node_rank) = (nnodes, node);
            spec.master_addr = "10.77.0.1".into();
            for local in 0..nproc {
                let slot = RankSlot {
                    spec: &spec,
                    local_rank: local,
                    master_port: 29511,
                };
                let vars = env(&slot).map_err(LabError::Wrong)?;
                let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                let want = [
                    ("WORLD_SIZE", (nnodes * nproc).to_string()),
                    ("LOCAL_RANK", local.to_string()),
                    ("LOCAL_WORLD_SIZE", nproc.to_string()),
                    ("GROUP_RANK", node.to_string()),
                    ("MASTER_ADDR", "10.77.0.1".into()),
                    ("MASTER_PORT", "29511".into()),
                ];
                for (k, v) in want {
                    if get(k) != Some(v.as_str()) {
                        // WORLD_SIZE of one node's ranks: the job looks one node big.
                        let known = (k == "WORLD_SIZE" && get(k) == Some(&nproc.to_string()))
                            .then_some(
                                ": that is this node's ranks, not the job's\n\
                                 hint: world-size-is-one-node",
                            );
                        return Err(LabError::Wrong(format!(
                            "{nnodes} node(s) × {nproc}: node {node}, local rank {local}: \
                             {k} = {:?}, expected {v:?}{}",
                            get(k),
                            known.unwrap_or_default()
                        )));
                    }
                }
                let rank = get("RANK").and_then(|r| r.parse::<usize>().ok());
                match rank {
                    Some(r) if r < nnodes * nproc => seen.push((r, node, local)),
                    other => {
                        // Past the end when the node's offset was scaled by
                        // the number of nodes instead of the ranks per node.
                        let known =
                            (other == Some(node * nnodes + local) && nnodes != nproc).then(|| {
                                format!(
                                    ": {node} × {nnodes} counts nodes, but node {node}'s ranks \
                                     come after the ranks of the nodes before it\n\
                                     hint: node-offset-counts-ranks"
                                )
                            });
                        return Err(LabError::Wrong(format!(
                            "{nnodes} node(s) × {nproc}: node {node}, local rank {local}: \
                             RANK = {other:?} is not a rank of the job (0..{}){}",
                            nnodes * nproc,
                            known.unwrap_or_default()
                        )));
                    }
                }
            }
        }
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0].0 == w[1].0) {
            let ((r, n0, l0), (_, n1, l1)) = (w[0], w[1]);
            // Every rank's RANK its local rank: the nodes' numbers overlap.
            let local_only = seen.iter().all(|&(r, _, l)| r == l);
            return Err(LabError::Wrong(format!(
                "{nnodes} node(s) × {nproc}: node {n0} local rank {l0} and node {n1} local rank \
                 {l1} both got RANK {r}: two ranks in one place{}",
                if local_only {
                    ": every RANK equals its LOCAL_RANK, so each node numbers its ranks from 0\n\
                     hint: rank-ignores-node"
                } else {
                    ""
                }
            )));
        }
        let ranks: Vec<usize> = seen.iter().map(|s| s.0).collect();
        if ranks != (0..nnodes * nproc).collect::<Vec<_>>() {
            return Err(LabError::Wrong(format!(
                "{nnodes} node(s) × {nproc}: the RANKs given are {ranks:?}: a place is empty"
            )));
        }
    }
    Ok(())
}

/// Two node launchers of `program --role node` on this host (loopback as the
/// network), 2 ranks each.
fn two_node_job(variant: Variant, program: &std::path::Path) -> Result<(), LabError> {
    let token = Token::generate()?;
    let port = free_port()?;
    // Both launchers at once: node 0's ranks wait for node 1's.
    let spawn = |node: usize| {
        let mut c = std::process::Command::new(program);
        c.args([
            "--role",
            "node",
            "--rank-role",
            "show",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "2",
        ])
        .args([
            "--node-rank",
            &node.to_string(),
            "--master-addr",
            "127.0.0.1",
        ])
        .args([
            "--master-port",
            &port.to_string(),
            "--token",
            &token.to_string(),
        ])
        .args(["--timeout", "20"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        match variant {
            Variant::Solution => c.env(labkit::SOLUTION_ENV, "1"),
            Variant::Exercise => c.env_remove(labkit::SOLUTION_ENV),
        };
        c.spawn()
    };
    let a = spawn(0)
        .map_err(|e| LabError::Wrong(format!("cannot start {}: {e}", program.display())))?;
    let b = spawn(1)
        .map_err(|e| LabError::Wrong(format!("cannot start {}: {e}", program.display())))?;
    let (a, b) = (a.wait_with_output(), b.wait_with_output());
    let mut text = String::new();
    let mut ok = true;
    for out in [a, b] {
        let out = out.map_err(|e| LabError::Wrong(e.to_string()))?;
        ok &= out.status.success();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        text.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    if !ok || text.matches("all_reduce ok").count() != 4 {
        return Err(LabError::Wrong(format!(
            "the two-node job on this host did not run its 4 ranks to the end:\n{text}"
        )));
    }
    Ok(())
}

pub use collectives::launch::free_port;

/// How long a rank may wait for a lost peer in the failure drill.
pub const DRILL_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn program() -> &'static std::path::Path {
        std::path::Path::new("lab08-many-nodes")
    }

    /// torchrun's variables with `RANK` and `WORLD_SIZE` replaced.
    fn with(
        slot: &RankSlot<'_>,
        rank: usize,
        world: usize,
    ) -> Result<Vec<(String, String)>, String> {
        let mut v = launch::torchrun_env(slot)?;
        for (k, val) in &mut v {
            match k.as_str() {
                "RANK" => *val = rank.to_string(),
                "WORLD_SIZE" => *val = world.to_string(),
                _ => {}
            }
        }
        Ok(v)
    }

    fn rank_is_local(slot: &RankSlot<'_>) -> Result<Vec<(String, String)>, String> {
        let s = slot.spec;
        with(slot, slot.local_rank, s.nnodes * s.nproc_per_node)
    }

    fn world_of_one_node(slot: &RankSlot<'_>) -> Result<Vec<(String, String)>, String> {
        let s = slot.spec;
        with(
            slot,
            s.node_rank * s.nproc_per_node + slot.local_rank,
            s.nproc_per_node,
        )
    }

    fn offset_by_nodes(slot: &RankSlot<'_>) -> Result<Vec<(String, String)>, String> {
        let s = slot.spec;
        with(
            slot,
            s.node_rank * s.nnodes + slot.local_rank,
            s.nnodes * s.nproc_per_node,
        )
    }

    fn message(env: RankEnv) -> String {
        check_vars(env, program()).unwrap_err().to_string()
    }

    #[test]
    fn rank_without_the_nodes_before_is_named() {
        let msg = message(rank_is_local);
        assert!(msg.contains("both got RANK 0"), "{msg}");
        assert!(msg.contains("hint: rank-ignores-node"), "{msg}");
    }

    #[test]
    fn world_size_of_one_node_is_named() {
        let msg = message(world_of_one_node);
        assert!(
            msg.contains("WORLD_SIZE = Some(\"2\"), expected \"4\""),
            "{msg}"
        );
        assert!(msg.contains("hint: world-size-is-one-node"), "{msg}");
    }

    #[test]
    fn node_offset_in_nodes_is_named() {
        let msg = message(offset_by_nodes);
        assert!(msg.contains("4 node(s) × 1: node 1"), "{msg}");
        assert!(msg.contains("hint: node-offset-counts-ranks"), "{msg}");
    }

    #[test]
    fn torchruns_variables_pass() {
        check_vars(launch::torchrun_env, program()).unwrap();
    }
}
