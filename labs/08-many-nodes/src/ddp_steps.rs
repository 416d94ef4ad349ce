//! The DDP training both the bench ranks (part 2) and the drill (part 3) run.

use std::time::Instant;

use collectives::Communicator;
use tch::nn::{self, OptimizerConfig};
use trainers::ddp::{Ddp, DdpOptions};

/// Trains `steps` DDP steps of the CNN (batch 64 per rank) and returns the
/// median step (ms) after the first; `die_at`: (rank, step) that SIGKILLs itself.
pub fn ddp_steps(
    comm: Box<dyn Communicator>,
    rank: usize,
    world: usize,
    steps: usize,
    die_at: Option<(usize, usize)>,
) -> anyhow::Result<f64> {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let data = trainers::data::load(trainers::data::DEFAULT_DIR, trainers::data::Split::Test)?;
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let model = trainers::models::cnn().build(&vs.root());
    let mut ddp = Ddp::new(model, &vs, comm, DdpOptions::default())?;
    let mut opt = nn::Sgd::default().build(&vs, 0.01)?;
    let mut times = Vec::new();
    for s in 0..steps {
        if die_at == Some((rank, s)) {
            println!("rank {rank}: killing myself with SIGKILL at step {s}");
            // SAFETY: sends a signal to this very process; nothing to uphold.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let t0 = Instant::now();
        let from = ((s * world + rank) * 64) as i64;
        let x = data.images.f_narrow(0, from % 9000, 64)?;
        let y = data.labels.f_narrow(0, from % 9000, 64)?;
        opt.zero_grad();
        let _ = ddp.forward_backward(&x, |l| l.cross_entropy_for_logits(&y))?;
        opt.step();
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let mut t = times[1.min(times.len())..].to_vec();
    t.sort_by(f64::total_cmp);
    Ok(t.get(t.len() / 2).copied().unwrap_or(0.0))
}
