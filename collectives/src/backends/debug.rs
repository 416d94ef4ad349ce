//! `--debug-collectives`: a desync check for the backends whose messages
//! carry no fingerprint of ours (Gloo, MPI, NCCL), as PyTorch's
//! `TORCH_DISTRIBUTED_DEBUG=DETAIL` does. Before each collective every rank
//! publishes the call's fingerprint (kind, number, count, dtype, op, root) in
//! the job's store and reads every other rank's; ranks in different calls all
//! fail before the library sees the call, naming both ("rank 0 is in
//! all_reduce#9 (1280 × float, avg), rank 1 is in broadcast#9 (1280 × float,
//! root 0)"), instead of hanging or returning wrong data.
//!
//! It costs one store write and `world − 1` reads per call (round trips to
//! rank 0's store), so it is for debugging and the labs, not for measuring.
//! Point-to-point calls are not checked (only their two ranks take part).
//!
//! Each rank's fingerprint lives in one of two keys, by the call number's
//! parity: a rank can be at most one call ahead of any other (it passes a
//! check only once every rank has published the same call), so the key it
//! overwrites is never one another rank still needs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::buffer::{Buffer, BufferMut};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::transport::Tag;
use crate::{Backend, Collective, Communicator, Input};

/// A communicator whose collectives are checked against every rank's first.
pub struct DebugCollectives {
    inner: Box<dyn Communicator>,
    store: Arc<dyn Store>,
    prefix: String,
    timeout: Duration,
    seq: Mutex<u32>,
}

impl DebugCollectives {
    /// Wraps `inner`; fingerprints go to `store` under `{prefix}debug/`, and
    /// a rank that publishes none within `timeout` fails the check.
    pub fn new(
        inner: Box<dyn Communicator>,
        store: Arc<dyn Store>,
        prefix: &str,
        timeout: Duration,
    ) -> DebugCollectives {
        DebugCollectives {
            inner,
            store,
            prefix: prefix.to_owned(),
            timeout,
            seq: Mutex::new(0),
        }
    }

    fn key(&self, parity: u32, rank: usize) -> String {
        format!("{}debug/{parity}/{rank}", self.prefix)
    }

    /// Publishes this call's fingerprint and compares it with every rank's.
    fn check(
        &self,
        collective: Collective,
        dtype: DType,
        count: usize,
        op: Option<ReduceOp>,
        root: usize,
    ) -> Result<()> {
        let seq = {
            let mut s = self
                .seq
                .lock()
                .map_err(|_| Error::Protocol("the debug check's counter is poisoned".into()))?;
            *s = s.wrapping_add(1);
            *s
        };
        let mine = Tag {
            collective,
            seq,
            dtype,
            op: op.map_or(0, ReduceOp::code),
            root: root as u32,
            count: count as u64,
        }
        .describe();
        let me = self.inner.rank();
        self.store
            .set(&self.key(seq % 2, me), format!("{seq}\n{mine}").as_bytes())?;
        let until = Instant::now() + self.timeout;
        for r in (0..self.inner.world_size()).filter(|&r| r != me) {
            let mut pause = Duration::from_micros(20);
            let theirs = loop {
                let v = self.store.get(&self.key(seq % 2, r))?;
                let v = String::from_utf8_lossy(&v).into_owned();
                if let Some((n, call)) = v.split_once('\n') {
                    if n.parse::<u32>().ok() == Some(seq) {
                        break call.to_owned();
                    }
                }
                if Instant::now() >= until {
                    return Err(Error::Mismatch(format!(
                        "rank {me} is in {mine}; rank {r} has not reached call #{seq} in {:?} \
                         (its last published call: {}) (--debug-collectives)",
                        self.timeout,
                        v.split_once('\n').map_or("none", |(_, c)| c)
                    )));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            };
            if theirs != mine {
                return Err(Error::Mismatch(format!(
                    "ranks disagree: rank {me} is in {mine}, rank {r} is in {theirs} \
                     (--debug-collectives)"
                )));
            }
        }
        Ok(())
    }
}

/// The element count a call's fingerprint names: the input's when it is a
/// separate buffer, else the output's (every rank passes the same shapes).
fn count(input: &Input<'_>, output: &BufferMut<'_>) -> (DType, usize) {
    match input {
        Input::Buffer(b) => (b.dtype(), b.len()),
        Input::InPlace => (output.dtype(), output.len()),
    }
}

impl Communicator for DebugCollectives {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn all_reduce(&self, input: Input<'_>, output: &mut BufferMut<'_>, op: ReduceOp) -> Result<()> {
        let (d, n) = count(&input, output);
        self.check(Collective::AllReduce, d, n, Some(op), 0)?;
        self.inner.all_reduce(input, output, op)
    }
    fn broadcast(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        let (d, n) = (output.dtype(), output.len());
        self.check(Collective::Broadcast, d, n, None, root)?;
        self.inner.broadcast(input, output, root)
    }
    fn reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let (d, n) = count(&input, output);
        self.check(Collective::Reduce, d, n, Some(op), root)?;
        self.inner.reduce(input, output, op, root)
    }
    fn all_gather(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let (d, n) = (output.dtype(), output.len());
        self.check(Collective::AllGather, d, n, None, 0)?;
        self.inner.all_gather(input, output)
    }
    fn reduce_scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> Result<()> {
        let (d, n) = (output.dtype(), output.len());
        self.check(Collective::ReduceScatter, d, n, Some(op), 0)?;
        self.inner.reduce_scatter(input, output, op)
    }
    fn all_to_all(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let (d, n) = (output.dtype(), output.len());
        self.check(Collective::AllToAll, d, n, None, 0)?;
        self.inner.all_to_all(input, output)
    }
    fn gather(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        // Only the root's output is the whole: name the call by its input.
        let (d, n) = match &input {
            Input::Buffer(b) => (b.dtype(), b.len()),
            Input::InPlace => (output.dtype(), output.len() / self.world_size().max(1)),
        };
        self.check(Collective::Gather, d, n, None, root)?;
        self.inner.gather(input, output, root)
    }
    fn scatter(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        let (d, n) = (output.dtype(), output.len());
        self.check(Collective::Scatter, d, n, None, root)?;
        self.inner.scatter(input, output, root)
    }
    fn barrier(&self) -> Result<()> {
        self.check(Collective::Barrier, DType::U8, 0, None, 0)?;
        self.inner.barrier()
    }
    fn send(&self, buf: &Buffer<'_>, peer: usize) -> Result<()> {
        self.inner.send(buf, peer)
    }
    fn recv(&self, buf: &mut BufferMut<'_>, peer: usize) -> Result<()> {
        self.inner.recv(buf, peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::MemStore;
    use crate::thread_ranks::with_ranks;
    use crate::transport::TransportKind;

    fn checked(
        store: &Arc<MemStore>,
        comm: crate::backends::reference::ReferenceComm,
    ) -> DebugCollectives {
        DebugCollectives::new(Box::new(comm), store.clone(), "t/", Duration::from_secs(10))
    }

    /// On Gloo, MPI and NCCL ranks in different calls hung or returned wrong
    /// data: with the check, every rank fails before the call, naming both.
    /// (Tested over the reference backend: the check is the same whatever it
    /// wraps.)
    #[test]
    fn debug_collectives_name_both_calls_before_the_library_sees_them() {
        let store = Arc::new(MemStore::new(Duration::from_secs(10)));
        let t0 = Instant::now();
        let errors = with_ranks(
            2,
            TransportKind::Shm,
            Duration::from_secs(30),
            |rank, comm| {
                let c = checked(&store, comm);
                let mut x = vec![1.0f32; 1280];
                let mut buf = BufferMut::from_slice(&mut x);
                c.all_reduce(Input::InPlace, &mut buf, ReduceOp::Sum)
                    .unwrap();
                c.barrier().unwrap();
                let r = if rank == 0 {
                    c.all_reduce(Input::InPlace, &mut buf, ReduceOp::Avg)
                } else {
                    c.broadcast(Input::InPlace, &mut buf, 0)
                };
                r.unwrap_err().to_string()
            },
        )
        .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        for e in &errors {
            assert!(e.contains("all_reduce#3 (1280 × float, avg)"), "{e}");
            assert!(e.contains("broadcast#3 (1280 × float, root 0)"), "{e}");
            assert!(e.contains("--debug-collectives"), "{e}");
        }
    }

    /// Many matching calls pass: the two keys per rank are never overwritten
    /// while another rank still needs them.
    #[test]
    fn matching_calls_pass_the_check() {
        let store = Arc::new(MemStore::new(Duration::from_secs(10)));
        let sums = with_ranks(
            3,
            TransportKind::Shm,
            Duration::from_secs(30),
            |rank, comm| {
                let c = checked(&store, comm);
                let mut x = [rank as f32];
                for _ in 0..200 {
                    x[0] = rank as f32;
                    c.all_reduce(
                        Input::InPlace,
                        &mut BufferMut::from_slice(&mut x),
                        ReduceOp::Sum,
                    )
                    .unwrap();
                }
                x[0]
            },
        )
        .unwrap();
        assert_eq!(sums, vec![3.0; 3]);
    }

    /// What the check costs per call through a real TCP store on loopback:
    /// a 4-byte all_reduce between two thread ranks, checked and not, in
    /// alternating rounds (median of rounds). A measurement, not a check:
    /// `cargo test -p collectives --release --no-default-features --lib
    /// debug_collectives_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement: run in release with --ignored --nocapture"]
    fn debug_collectives_cost() {
        use crate::rendezvous::store::tests::{client, server};
        let srv = server(2);
        let iters = 2000;
        let mut per = [Vec::new(), Vec::new()];
        for round in 0..6 {
            let checked_first = round % 2 == 0;
            for on in [checked_first, !checked_first] {
                let times = with_ranks(
                    2,
                    TransportKind::Shm,
                    Duration::from_secs(30),
                    |rank, comm| {
                        let c: Box<dyn Communicator> = if on {
                            let store =
                                Arc::new(client(&srv, rank, 2, Duration::from_secs(30)).unwrap());
                            Box::new(DebugCollectives::new(
                                Box::new(comm),
                                store,
                                &format!("cost{round}{on}/"),
                                Duration::from_secs(30),
                            ))
                        } else {
                            Box::new(comm)
                        };
                        let mut x = [1.0f32];
                        let t0 = Instant::now();
                        for _ in 0..iters {
                            c.all_reduce(
                                Input::InPlace,
                                &mut BufferMut::from_slice(&mut x),
                                ReduceOp::Sum,
                            )
                            .unwrap();
                        }
                        t0.elapsed().as_secs_f64() / iters as f64
                    },
                )
                .unwrap();
                per[on as usize].push(times[0]);
            }
        }
        for v in &mut per {
            v.sort_by(f64::total_cmp);
        }
        let (off, on) = (
            per[0][per[0].len() / 2] * 1e6,
            per[1][per[1].len() / 2] * 1e6,
        );
        println!(
            "4 B all_reduce, world 2: {off:.2} us plain, {on:.2} us with --debug-collectives (+{:.1} us per call)",
            on - off
        );
    }
}
