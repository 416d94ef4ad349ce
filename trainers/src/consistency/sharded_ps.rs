//! A synchronous parameter server over the network, sharded across the ranks
//! (as in Li et al. 2014, "Scaling Distributed Machine Learning with the
//! Parameter Server", and BytePS): rank j serves shard j of the flat
//! parameters and is also a worker. A step is two message rounds, whatever the
//! world size: every worker *pushes* shard j of its gradient to server j, each
//! server averages the shard's gradients and applies SGD to it, and every
//! worker *pulls* the updated shard back. A ring all-reduce moves the same
//! bytes per rank, 2(n−1)/n of the gradient, but in 2(n−1) rounds one after
//! the other: on a link whose latency dwarfs the transfer (tens of ms between
//! data centres) the server's two rounds win; on a fast local link, where the
//! rounds cost microseconds, the ring's even use of every link does.
//!
//! The pushes to the different servers must travel at once, or the rounds
//! come back one per server. A communicator serves one call at a time, so
//! every rank holds one communicator per shard (each its own connections),
//! and a step runs one thread per shard: on rank r, thread j is shard j's
//! server if j = r and a worker of it otherwise.

use std::ops::Range;

use collectives::{Buffer, BufferMut, Communicator};

use crate::{Error, Result};

/// One rank's part of a sharded parameter server.
pub struct ShardedPs {
    /// Communicator j carries shard j's pushes and pulls.
    comms: Vec<Box<dyn Communicator>>,
    /// Shard j's range of the flat parameters.
    shards: Vec<Range<usize>>,
    rank: usize,
}

impl ShardedPs {
    /// A server of `len` flat parameters over `comms`, one per rank of the
    /// world (all of this rank, all of the same world size).
    pub fn new(comms: Vec<Box<dyn Communicator>>, len: usize) -> Result<ShardedPs> {
        let world = comms.len();
        let rank = comms.first().map_or(0, |c| c.rank());
        if let Some(c) = comms
            .iter()
            .find(|c| c.world_size() != world || c.rank() != rank)
        {
            return Err(Error::InvalidArgument(format!(
                "a sharded parameter server of {world} shards needs one communicator per shard, \
                 each of world {world} and of the same rank; got rank {} of {} beside rank {rank}",
                c.rank(),
                c.world_size()
            )));
        }
        if world == 0 || len < world {
            return Err(Error::InvalidArgument(format!(
                "{len} parameters cannot be split into {world} shards"
            )));
        }
        Ok(ShardedPs {
            shards: shards(len, world),
            comms,
            rank,
        })
    }

    /// Splits `len` parameters into the shards afresh (every rank must, before
    /// its next step).
    pub fn reshard(&mut self, len: usize) -> Result<()> {
        let world = self.comms.len();
        if len < world {
            return Err(Error::InvalidArgument(format!(
                "{len} parameters cannot be split into {world} shards"
            )));
        }
        self.shards = shards(len, world);
        Ok(())
    }

    /// Shard j's range of the flat parameters (served by rank j).
    pub fn shard(&self, j: usize) -> Range<usize> {
        self.shards[j].clone()
    }

    /// One synchronous step: pushes `grad`, lets every server apply
    /// `params −= lr · (mean of the workers' gradients)` to its shard, and
    /// pulls the result into `params`. Afterwards every rank holds the same
    /// parameters, bit for bit (copies of the servers' shards). The server
    /// sums the gradients in rank order, so the result equals one process
    /// doing the same sum, to the bit.
    pub fn step(&mut self, params: &mut [f32], grad: &[f32], lr: f32) -> Result<()> {
        let len = self.shards.last().map_or(0, |s| s.end);
        if params.len() != len || grad.len() != len {
            return Err(Error::InvalidArgument(format!(
                "the server holds {len} parameters; got {} parameters and {} gradients",
                params.len(),
                grad.len()
            )));
        }
        let (rank, world) = (self.rank, self.comms.len());
        // Split `params` into its shards, each handed to its thread.
        let mut parts: Vec<&mut [f32]> = Vec::with_capacity(world);
        let mut rest = params;
        for s in &self.shards {
            let (head, tail) = rest.split_at_mut(s.len());
            parts.push(head);
            rest = tail;
        }
        std::thread::scope(|scope| {
            let threads: Vec<_> = self
                .comms
                .iter_mut()
                .zip(parts)
                .zip(&self.shards)
                .enumerate()
                .map(|(j, ((comm, mine), range))| {
                    let g = &grad[range.clone()];
                    scope.spawn(move || {
                        if j == rank {
                            serve(comm.as_ref(), mine, g, lr)
                        } else {
                            work(comm.as_ref(), j, mine, g)
                        }
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| {
                    t.join().unwrap_or_else(|_| {
                        Err(Error::InvalidArgument("a shard's thread panicked".into()))
                    })
                })
                .collect::<Result<Vec<()>>>()
                .map(drop)
        })
    }
}

/// `len` parameters split into `world` nearly equal ranges.
fn shards(len: usize, world: usize) -> Vec<Range<usize>> {
    (0..world)
        .map(|j| j * len / world..(j + 1) * len / world)
        .collect()
}

// ANCHOR: serve
/// Shard server: receives every other worker's gradient of the shard, sums
/// them with its own in rank order, applies the averaged step, and sends the
/// new shard to every worker.
fn serve(comm: &dyn Communicator, shard: &mut [f32], own: &[f32], lr: f32) -> Result<()> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let mut sum = vec![0f32; shard.len()];
    let mut theirs = vec![0f32; shard.len()];
    for w in 0..world {
        let g = if w == rank {
            own
        } else {
            comm.recv(&mut BufferMut::from_slice(&mut theirs), w)?;
            &theirs
        };
        for (s, x) in sum.iter_mut().zip(g) {
            *s += x;
        }
    }
    let scale = lr / world as f32;
    for (p, s) in shard.iter_mut().zip(&sum) {
        *p -= scale * s;
    }
    for w in (0..world).filter(|&w| w != rank) {
        comm.send(&Buffer::from_slice(shard), w)?;
    }
    Ok(())
}
// ANCHOR_END: serve

/// Shard j's worker: pushes its gradient of the shard, pulls the new shard.
fn work(comm: &dyn Communicator, server: usize, shard: &mut [f32], grad: &[f32]) -> Result<()> {
    comm.send(&Buffer::from_slice(grad), server)?;
    comm.recv(&mut BufferMut::from_slice(shard), server)?;
    Ok(())
}

/// Runs `body(rank, comms)` on `world` thread ranks, each with `per_rank`
/// communicators over TCP (the transport the lab's hosts use).
#[cfg(test)]
pub(super) fn ranks<T: Send>(
    world: usize,
    per_rank: usize,
    body: impl Fn(usize, Vec<Box<dyn Communicator>>) -> T + Sync,
) -> Vec<T> {
    use std::sync::Arc;
    use std::time::Duration;

    use collectives::backends::{self, Options};
    use collectives::rendezvous::MemStore;
    use collectives::transport::TransportKind;

    let store = Arc::new(MemStore::new(Duration::from_secs(30)));
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..world)
            .map(|rank| {
                let (store, body) = (store.clone(), &body);
                s.spawn(move || {
                    let comms = (0..per_rank)
                        .map(|j| {
                            let mut opts = Options::new([3; 16]).unwrap();
                            opts.transport = TransportKind::Tcp;
                            opts.timeout = Duration::from_secs(30);
                            opts.prefix = format!("shard{j}");
                            let c =
                                backends::reference(store.as_ref(), rank, world, &opts).unwrap();
                            Box::new(c) as Box<dyn Communicator>
                        })
                        .collect();
                    body(rank, comms)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(rank: usize, step: usize, len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + rank * 13 + step * 5) % 17) as f32 * 0.37 - 2.9)
            .collect()
    }

    /// Three steps on three ranks (shards of 3, 3 and 4 of 10 parameters): every
    /// rank ends with what one process computes with the same sums in the same
    /// order, to the bit.
    #[test]
    fn every_rank_ends_with_the_serial_steps_to_the_bit() {
        let (world, len, lr) = (3, 10, 0.1f32);
        let start: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
        let got = ranks(world, world, |rank, comms| {
            let mut ps = ShardedPs::new(comms, len).unwrap();
            assert_eq!(ps.shard(2), 6..10);
            let mut params = start.clone();
            for step in 0..3 {
                ps.step(&mut params, &gradient(rank, step, len), lr)
                    .unwrap();
            }
            params
        });
        let mut want = start.clone();
        for step in 0..3 {
            let mut sum = vec![0f32; len];
            for rank in 0..world {
                for (s, g) in sum.iter_mut().zip(gradient(rank, step, len)) {
                    *s += g;
                }
            }
            for (p, s) in want.iter_mut().zip(&sum) {
                *p -= lr / world as f32 * s;
            }
        }
        for g in got {
            assert_eq!(g, want);
        }
    }

    /// Resharding to another length (the lab's exchange sweep does) splits
    /// afresh; a length below the world size is refused.
    #[test]
    fn reshard_splits_a_new_length() {
        let got = ranks(2, 2, |rank, comms| {
            let mut ps = ShardedPs::new(comms, 4).unwrap();
            ps.reshard(7).unwrap();
            assert_eq!(ps.shard(1), 3..7);
            assert!(ps.reshard(1).is_err());
            let mut params = vec![1.0f32; 7];
            ps.step(&mut params, &[rank as f32; 7], 1.0).unwrap();
            params
        });
        // 1 − 1.0 · (0 + 1) / 2 everywhere.
        assert_eq!(got, vec![vec![0.5f32; 7]; 2]);
    }

    /// Two communicators for a world of three, and buffers of the wrong length:
    /// clear errors, nothing sent.
    #[test]
    fn a_communicator_short_or_a_wrong_length_is_refused() {
        let results = ranks(3, 2, |_, comms| match ShardedPs::new(comms, 10) {
            Err(e) => e.to_string(),
            Ok(_) => "accepted".into(),
        });
        for r in results {
            assert!(r.contains("one communicator per shard"), "{r}");
        }
        let results = ranks(2, 2, |_, comms| {
            let mut ps = ShardedPs::new(comms, 10).unwrap();
            ps.step(&mut [0.0; 9], &[0.0; 10], 0.1)
                .unwrap_err()
                .to_string()
        });
        for r in results {
            assert!(r.contains("holds 10 parameters; got 9"), "{r}");
        }
    }
}
