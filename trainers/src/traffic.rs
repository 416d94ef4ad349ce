//! Counting what a trainer communicates: [`Metered`] wraps any communicator,
//! passes every call on, and adds the call and its payload to a shared
//! [`Traffic`]. The labs assert with it (one round of all-reduces per
//! optimizer step) and measure with it (bytes per step of DDP, compressed DDP,
//! ZeRO).
//!
//! The payload of a call is the whole logical buffer: an all_reduce's buffer,
//! a reduce_scatter's input (all shards), an all_gather's output. What a rank
//! really sends depends on the algorithm; [`Traffic::ring_bytes_sent`] gives it
//! for the ring algorithms (the bandwidth-optimal ones NCCL and the reference
//! backend use for large messages): 2(n−1)/n of the payload for all_reduce,
//! (n−1)/n for reduce_scatter and all_gather.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use collectives::{Backend, Buffer, BufferMut, Communicator, Input, ReduceOp};

/// The collectives [`Traffic`] keeps apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// `all_reduce`.
    AllReduce,
    /// `reduce_scatter`.
    ReduceScatter,
    /// `all_gather`.
    AllGather,
    /// `broadcast`.
    Broadcast,
    /// Everything else (reduce, gather, scatter, all_to_all, send, recv).
    Other,
}

const KINDS: usize = 5;

/// Calls and payload bytes per collective, shared between a [`Metered`]
/// communicator (which adds) and whoever reads them (any thread).
#[derive(Debug, Default)]
pub struct Traffic {
    calls: [AtomicU64; KINDS],
    bytes: [AtomicU64; KINDS],
}

impl Traffic {
    /// A new, zeroed count behind an `Arc` to hand to [`Metered::new`].
    pub fn new() -> Arc<Traffic> {
        Arc::new(Traffic::default())
    }

    fn add(&self, kind: Counted, bytes: usize) {
        self.calls[kind as usize].fetch_add(1, Ordering::SeqCst);
        self.bytes[kind as usize].fetch_add(bytes as u64, Ordering::SeqCst);
    }

    /// Calls of `kind` so far.
    pub fn calls(&self, kind: Counted) -> u64 {
        self.calls[kind as usize].load(Ordering::SeqCst)
    }

    /// Payload bytes of `kind` so far (see the module's definition).
    pub fn bytes(&self, kind: Counted) -> u64 {
        self.bytes[kind as usize].load(Ordering::SeqCst)
    }

    /// Bytes one rank sends for the all_reduce, reduce_scatter and all_gather
    /// counted so far, if each ran the ring algorithm on `world` ranks.
    pub fn ring_bytes_sent(&self, world: usize) -> f64 {
        if world < 2 {
            return 0.0;
        }
        let share = (world - 1) as f64 / world as f64;
        2.0 * share * self.bytes(Counted::AllReduce) as f64
            + share * (self.bytes(Counted::ReduceScatter) + self.bytes(Counted::AllGather)) as f64
    }
}

/// A communicator that counts into a [`Traffic`] and passes everything on.
pub struct Metered {
    inner: Box<dyn Communicator>,
    traffic: Arc<Traffic>,
}

impl Metered {
    /// Wraps `inner`; every call is added to `traffic`.
    pub fn new(inner: Box<dyn Communicator>, traffic: Arc<Traffic>) -> Metered {
        Metered { inner, traffic }
    }
}

impl Communicator for Metered {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn all_reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> collectives::Result<()> {
        self.traffic.add(Counted::AllReduce, output.byte_len());
        self.inner.all_reduce(input, output, op)
    }
    fn broadcast(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        root: usize,
    ) -> collectives::Result<()> {
        self.traffic.add(Counted::Broadcast, output.byte_len());
        self.inner.broadcast(input, output, root)
    }
    fn reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
        root: usize,
    ) -> collectives::Result<()> {
        self.traffic.add(Counted::Other, output.byte_len());
        self.inner.reduce(input, output, op, root)
    }
    fn all_gather(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> collectives::Result<()> {
        self.traffic.add(Counted::AllGather, output.byte_len());
        self.inner.all_gather(input, output)
    }
    fn reduce_scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> collectives::Result<()> {
        // The payload is every shard: the output is one of world_size.
        let all = output.byte_len() * self.inner.world_size();
        self.traffic.add(Counted::ReduceScatter, all);
        self.inner.reduce_scatter(input, output, op)
    }
    fn all_to_all(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> collectives::Result<()> {
        self.traffic.add(Counted::Other, output.byte_len());
        self.inner.all_to_all(input, output)
    }
    fn gather(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        root: usize,
    ) -> collectives::Result<()> {
        self.traffic.add(Counted::Other, output.byte_len());
        self.inner.gather(input, output, root)
    }
    fn scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        root: usize,
    ) -> collectives::Result<()> {
        self.traffic.add(Counted::Other, output.byte_len());
        self.inner.scatter(input, output, root)
    }
    fn barrier(&self) -> collectives::Result<()> {
        self.inner.barrier()
    }
    fn send(&self, buf: &Buffer<'_>, peer: usize) -> collectives::Result<()> {
        self.traffic.add(Counted::Other, buf.byte_len());
        self.inner.send(buf, peer)
    }
    fn recv(&self, buf: &mut BufferMut<'_>, peer: usize) -> collectives::Result<()> {
        self.inner.recv(buf, peer)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use collectives::transport::TransportKind;

    use super::*;

    #[test]
    fn every_collective_is_counted_with_its_whole_payload() {
        let out = collectives::thread_ranks::with_ranks(
            2,
            TransportKind::Shm,
            Duration::from_secs(20),
            |_, comm| -> collectives::Result<Arc<Traffic>> {
                let traffic = Traffic::new();
                let m = Metered::new(Box::new(comm), traffic.clone());
                let mut a = vec![1f32; 100];
                m.all_reduce(
                    Input::InPlace,
                    &mut BufferMut::from_slice(&mut a),
                    ReduceOp::Sum,
                )?;
                let src = vec![1f32; 100];
                let mut shard = vec![0f32; 50];
                m.reduce_scatter(
                    Input::Buffer(Buffer::from_slice(&src)),
                    &mut BufferMut::from_slice(&mut shard),
                    ReduceOp::Sum,
                )?;
                let mut all = vec![0f32; 100];
                m.all_gather(
                    Input::Buffer(Buffer::from_slice(&shard)),
                    &mut BufferMut::from_slice(&mut all),
                )?;
                assert_eq!(a[0], 2.0);
                Ok(traffic)
            },
        )
        .unwrap();
        for t in out {
            let t = t.unwrap();
            assert_eq!(t.calls(Counted::AllReduce), 1);
            assert_eq!(t.bytes(Counted::AllReduce), 400);
            assert_eq!(t.bytes(Counted::ReduceScatter), 400);
            assert_eq!(t.bytes(Counted::AllGather), 400);
            // Ring at world 2: all_reduce sends 400, reduce_scatter and
            // all_gather 200 each.
            assert_eq!(t.ring_bytes_sent(2), 800.0);
            assert_eq!(t.ring_bytes_sent(1), 0.0);
        }
    }
}
