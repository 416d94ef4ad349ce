//! `ringside launch`: start the ranks of a job on this node and supervise them.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use collectives::launch::{self, LaunchSpec};
use collectives::rendezvous::store::Token;

/// Arguments of `ringside launch` (torchrun's names, with dashes).
#[derive(Debug, Args)]
#[command(
    after_help = "Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, \
MASTER_ADDR, MASTER_PORT and RINGSIDE_JOB_TOKEN. If a rank fails, the others get SIGTERM, \
then SIGKILL after the grace period; the launcher exits with the failed rank's code \
(128 + signal if a signal killed it), or 130 after Ctrl-C.\n\n\
Multi-node: run `ringside launch` on every node with the same --nnodes, --master-addr, \
--master-port and --token (or RINGSIDE_JOB_TOKEN), e.g. a token from `openssl rand -hex 16`.\n\n\
Example (lab 1's program, its reference solution, on 4 ranks; `cargo lab 1` builds it):\n  \
RINGSIDE_LAB_SOLUTION=1 ringside launch --nproc-per-node 4 -- \
./target/release/lab01-first-allreduce --max-size 1M"
)]
pub struct LaunchArgs {
    /// Ranks to start on this node.
    #[arg(long, alias = "nproc_per_node", value_name = "N")]
    nproc_per_node: usize,
    /// Nodes in the job (run one launcher per node).
    #[arg(long, default_value_t = 1, value_name = "M")]
    nnodes: usize,
    /// This node's index, 0..nnodes.
    #[arg(long, alias = "node_rank", default_value_t = 0, value_name = "K")]
    node_rank: usize,
    /// Host of rank 0, where the store runs.
    #[arg(
        long,
        alias = "master_addr",
        default_value = "127.0.0.1",
        value_name = "ADDR"
    )]
    master_addr: String,
    /// Port of the store [default: a free port for one node, 29500 for several].
    #[arg(long, alias = "master_port", value_name = "PORT")]
    master_port: Option<u16>,
    /// Job token, 32 hex digits; the same on every node [default: random, one node only].
    #[arg(
        long,
        env = "RINGSIDE_JOB_TOKEN",
        hide_env_values = true,
        value_name = "HEX"
    )]
    token: Option<String>,
    /// Seconds ranks get between SIGTERM and SIGKILL when the job is stopped.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    grace_secs: f64,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    command: Vec<OsString>,
}

/// Runs the job; returns the exit code for the launcher.
pub fn run(args: LaunchArgs) -> anyhow::Result<i32> {
    let token = args
        .token
        .as_deref()
        .map(Token::parse)
        .transpose()
        .context("--token / RINGSIDE_JOB_TOKEN")?;
    let grace = Duration::try_from_secs_f64(args.grace_secs)
        .context("--grace-secs must be a non-negative number of seconds")?;
    let mut command = args.command.into_iter();
    let program = command.next().context(
        "no program given; usage: ringside launch --nproc-per-node N -- PROGRAM ARGS...",
    )?;
    let mut spec = LaunchSpec::new(program, command, args.nproc_per_node);
    spec.nnodes = args.nnodes;
    spec.node_rank = args.node_rank;
    spec.master_addr = args.master_addr;
    spec.master_port = args.master_port;
    spec.token = token;
    spec.grace = grace;

    launch::install_interrupt_handler()?;
    let report = launch::spawn(&spec)?;
    Ok(report.exit_code())
}
