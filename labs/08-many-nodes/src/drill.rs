//! Part 3, a failure drill: one rank of three is SIGKILLed mid-training;
//! what the launcher says, then what the survivors say with nobody to stop
//! them.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use collectives::algorithms::Algo;
use collectives::job;
use collectives::launch::{self, LaunchSpec};
use collectives::rendezvous::store::{TOKEN_VAR, Token};
use collectives::transport::TransportKind;
use lab08_many_nodes::{DRILL_TIMEOUT, free_port, rank_env};
use labkit::Variant;

use crate::args::{Args, me};
use crate::ddp_steps::ddp_steps;

/// Part 3: runs the drill's launcher as a child and prints what it said.
pub fn run() -> anyhow::Result<()> {
    println!("\n3. Failure drill: 3 ranks train; rank 1 is SIGKILLed at step 3");
    let t0 = Instant::now();
    let out = me(&[
        "--role",
        "drill-launch",
        "--timeout",
        &DRILL_TIMEOUT.as_secs().to_string(),
    ])?
    .output()
    .context("starting the drill")?;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        println!("  | {line}");
    }
    println!(
        "  the job ended {:.1} s after it started, exit code {:?}",
        t0.elapsed().as_secs_f64(),
        out.status.code()
    );
    Ok(())
}

/// The drill's launcher: 3 ranks, one dies; prints what the launcher says.
pub fn drill_launch(args: &Args) -> anyhow::Result<()> {
    let mut spec = LaunchSpec::new(
        std::env::current_exe()?,
        [
            "--role",
            "drill",
            "--timeout",
            &args.connect.wait.timeout.to_string(),
        ],
        3,
    );
    spec.rank_env = rank_env(Variant::from_env());
    let t0 = Instant::now();
    let report = launch::spawn(&spec)?;
    match report.failure() {
        Some(r) => println!(
            "ringside launch names rank {} ({}) after {:.1} s and stops the others at once \
             (as torchrun does)",
            r.rank,
            r.describe(),
            t0.elapsed().as_secs_f64()
        ),
        None => println!(
            "the drill's job ended without a failure ({})",
            report.exit_code()
        ),
    }

    // The same ranks with nobody stopping the survivors: what each one says.
    println!("the same 3 ranks, started by hand, so that the survivors find out themselves:");
    let token = Token::generate()?;
    spec.master_port = Some(free_port()?);
    let t0 = Instant::now();
    let mut children = Vec::new();
    for local_rank in 0..3 {
        let slot = launch::RankSlot {
            spec: &spec,
            local_rank,
            master_port: spec.master_port.unwrap_or_default(),
        };
        let vars = (spec.rank_env)(&slot).map_err(anyhow::Error::msg)?;
        let child = Command::new(&spec.program)
            .args(&spec.args)
            .envs(vars)
            .env(TOKEN_VAR, token.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        children.push(child);
    }
    for (rank, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output()?;
        let said = String::from_utf8_lossy(&out.stderr);
        let last = said
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(nothing)");
        println!(
            "rank {rank}: {} — {last}",
            match out.status.code() {
                Some(c) => format!("exit {c}"),
                None => "killed by a signal".into(),
            }
        );
    }
    println!("all three ended within {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// A drill rank: DDP over shared memory; rank 1 dies at step 3.
pub fn drill_rank(args: &Args) -> anyhow::Result<()> {
    let timeout = args.connect.timeout()?;
    let rdv = labkit::rank(3, timeout)?;
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    let comm = job::connect(
        &rdv,
        collectives::Backend::Reference,
        TransportKind::Auto,
        Algo::Auto,
        timeout,
        "lab08-drill/",
    )?;
    let t0 = Instant::now();
    match ddp_steps(comm, rank, world, 50, Some((1, 3))) {
        Ok(_) => Ok(()),
        Err(e) => bail!(
            "rank {rank}, {:.1} s into training: {e}",
            t0.elapsed().as_secs_f64()
        ),
    }
}
