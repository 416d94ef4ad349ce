//! One rank of a synchronous trainer whose gradients travel as messages
//! between processes (on different hosts, in lab 11): through a
//! [`ShardedPs`] or through an all-reduce. The two compute the same step (the
//! mean of the ranks' gradients, then SGD), so on the same data they trace the
//! same accuracy curve; what differs is how long each step's exchange takes.

use std::time::Instant;

use collectives::{BufferMut, Communicator, Input, ReduceOp};
use tch::{Kind, Tensor};

use super::sharded_ps::ShardedPs;
use super::{flatten, model, unflatten};
use crate::data::Dataset;
use crate::{Error, Result};

/// How a rank's gradients are combined.
pub enum Exchange {
    /// Pushed to and pulled from a sharded parameter server.
    ShardedPs(ShardedPs),
    /// Averaged by the communicator's all-reduce (its algorithm as set).
    AllReduce(Box<dyn Communicator>),
}

/// What every rank trains.
#[derive(Debug, Clone)]
pub struct NetJob {
    /// Hidden widths of the MLP (drawn from the same seed on every rank).
    pub hidden: Vec<i64>,
    /// Rows per rank per step.
    pub batch: usize,
    /// Steps.
    pub steps: u64,
    /// SGD learning rate.
    pub lr: f64,
    /// Keep the parameters every this many steps.
    pub snapshot_every: u64,
}

/// What a rank saw.
pub struct NetTrained {
    /// (seconds since the first step began, parameters) every
    /// `snapshot_every` steps; the clock stops while a snapshot is copied.
    pub snapshots: Vec<(f64, Tensor)>,
    /// Each step's wall time, seconds.
    pub step_seconds: Vec<f64>,
    /// Of those, the time spent exchanging (push and pull, or all-reduce).
    pub exchange_seconds: Vec<f64>,
    /// The final parameters, flat.
    pub params: Tensor,
}

/// Trains this rank: step t takes rows `(t · world + rank) · batch ..` of
/// `data` (wrapping), as the threaded trainers do.
pub fn train_rank(
    job: &NetJob,
    exchange: &mut Exchange,
    rank: usize,
    world: usize,
    data: &Dataset,
) -> Result<NetTrained> {
    let n = data.len();
    if job.batch == 0 || n < job.batch {
        return Err(Error::InvalidArgument(format!(
            "batches of {} rows from {n} rows",
            job.batch
        )));
    }
    let (vs, net) = model(&job.hidden)?;
    let vars = vs.trainable_variables();
    let mut params: Vec<f32> = Vec::try_from(&flatten(&vars)?)?;
    let mut out = NetTrained {
        snapshots: Vec::new(),
        step_seconds: Vec::new(),
        exchange_seconds: Vec::new(),
        params: Tensor::new(),
    };
    let mut clock = 0.0;
    for step in 0..job.steps {
        let t0 = Instant::now();
        unflatten(&Tensor::from_slice(&params), &vars)?;
        let start = ((step as usize * world + rank) * job.batch) % (n - job.batch + 1);
        let idx: Vec<usize> = (start..start + job.batch).collect();
        let (x, y) = data.batch(&idx)?;
        for v in &vars {
            let mut g = v.grad();
            if g.defined() {
                let _ = g.f_zero_()?;
            }
        }
        let loss = tch::nn::ModuleT::forward_t(&net, &x, true).f_cross_entropy_loss::<Tensor>(
            &y,
            None,
            tch::Reduction::Mean,
            -100,
            0.0,
        )?;
        loss.f_backward()?;
        let grad = flatten(&vars.iter().map(|v| v.grad()).collect::<Vec<_>>())?;
        let mut grad: Vec<f32> = Vec::try_from(&grad.f_to_kind(Kind::Float)?)?;
        let t_exchange = Instant::now();
        match exchange {
            Exchange::ShardedPs(ps) => ps.step(&mut params, &grad, job.lr as f32)?,
            Exchange::AllReduce(comm) => {
                comm.all_reduce(
                    Input::InPlace,
                    &mut BufferMut::from_slice(&mut grad),
                    ReduceOp::Avg,
                )?;
                let lr = job.lr as f32;
                for (p, g) in params.iter_mut().zip(&grad) {
                    *p -= lr * g;
                }
            }
        }
        out.exchange_seconds
            .push(t_exchange.elapsed().as_secs_f64());
        let took = t0.elapsed().as_secs_f64();
        out.step_seconds.push(took);
        clock += took;
        if (step + 1) % job.snapshot_every.max(1) == 0 {
            out.snapshots.push((clock, Tensor::from_slice(&params)));
        }
    }
    out.params = Tensor::from_slice(&params);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::consistency::sharded_ps::ranks;

    /// Three ranks, five steps: the sharded server and the all-reduce end
    /// with the same parameters within float rounding (they sum the same
    /// gradients in different orders, ~1e-7 relative each), and the ranks of
    /// each agree to the bit.
    #[test]
    fn the_sharded_server_and_the_all_reduce_train_alike() {
        let world = 3;
        let data = crate::data::synthetic(world * 8 * 5, 3).unwrap();
        let job = NetJob {
            hidden: vec![16],
            batch: 8,
            steps: 5,
            lr: 0.1,
            snapshot_every: 5,
        };
        let handles = Mutex::new(
            (0..world)
                .map(|_| Some(data.shallow_clone()))
                .collect::<Vec<_>>(),
        );
        let got = ranks(world, world + 1, |rank, mut comms| {
            let d = handles.lock().unwrap()[rank].take().unwrap();
            let ar = comms.pop().unwrap();
            let len = 784 * 16 + 16 + 16 * 10 + 10;
            let mut ps = Exchange::ShardedPs(ShardedPs::new(comms, len).unwrap());
            let by_ps = train_rank(&job, &mut ps, rank, world, &d).unwrap();
            let by_ar = train_rank(&job, &mut Exchange::AllReduce(ar), rank, world, &d).unwrap();
            assert_eq!(by_ps.step_seconds.len(), 5);
            assert_eq!(by_ps.snapshots.len(), 1);
            (
                Vec::<f32>::try_from(&by_ps.params).unwrap(),
                Vec::<f32>::try_from(&by_ar.params).unwrap(),
            )
        });
        for (ps, ar) in &got[1..] {
            assert_eq!(ps, &got[0].0);
            assert_eq!(ar, &got[0].1);
        }
        let (ps, ar) = &got[0];
        let diff = ps
            .iter()
            .zip(ar)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-5, "sharded server vs all-reduce: {diff:e}");
    }
}
