//! Lab 8: launching and many nodes on one machine, run as a learner runs it
//! (`cargo lab 8`).
//!
//! 1. The same binary under `ringside launch` (with your rank variables),
//!    torchrun, mpirun and an srun-style environment: each rank prints what its
//!    launcher set and where it resolved itself, then all-reduces.
//! 2. As root: 2 and 4 network namespaces as hosts on a bridge, links shaped
//!    with `tc`; one launcher per "node" (`--nnodes/--node-rank`, as on a
//!    cluster) with your variables; all_reduce (auto, ring, tree) and a DDP step,
//!    against the same ranks on one host; ring and tree against the α–β
//!    prediction.
//! 3. A failure drill: one rank of three is SIGKILLed mid-training.
//!
//! Writes `results/lab08/<UTC time>/`.

mod args;
mod ddp_steps;
mod drill;
mod figures;
mod launchers;
mod nodes;

use clap::{Parser, ValueEnum};
use labkit::{Run, Variant};

use args::{Args, Role};

fn main() -> std::process::ExitCode {
    // The DDP step links libtorch, whose bundled Gloo must not be the one used.
    collectives::backends::ensure_gloo_first();
    let args = Args::parse();
    labkit::exit(
        match args.role {
            Role::Lab => lab(&args),
            Role::Show => launchers::show(&args),
            Role::Node => {
                let role = args
                    .rank_role
                    .to_possible_value()
                    .map(|v| v.get_name().to_owned());
                nodes::node(&args, &["--role", &role.unwrap_or_default()]).map(drop)
            }
            Role::Bench => nodes::bench_rank(&args),
            Role::DrillLaunch => drill::drill_launch(&args),
            Role::Drill => drill::drill_rank(&args),
        },
        "",
    )
}

/// The whole lab, its three parts in order.
fn lab(args: &Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    println!("lab 8 ({variant})\n\n1. One binary, four launchers (2 ranks each)");
    launchers::launchers(args)?;

    println!("\n2. Hosts on one machine");
    let measured = nodes::measure(args)?;
    let mut run = Run::start(8, measured.nodes[measured.nodes.len() - 1], "tcp")?;
    figures::write(&mut run, &measured)?;

    drill::run()?;
    let dir = run.finish()?;
    println!(
        "\nCharts in {}: latency-all_reduce.svg (one host and every node count and link), \
         ring-vs-tree.svg (measured against the α–β prediction), ddp-step.svg.",
        dir.display()
    );
    Ok(())
}
