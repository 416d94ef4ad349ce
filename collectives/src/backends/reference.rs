//! The reference backend: ringside's own algorithms over a [`Transport`].
//!
//! Every call first validates its buffers, then (except on the small all_reduce
//! latency path) runs a dissemination agreement round whose messages carry the
//! call's [`Tag`], so ranks that called different things all fail with an error
//! before any output is written. The latency path needs no extra round: it
//! stages the data in scratch memory and every rank's result depends on every
//! other rank's tagged messages, so a mismatch still reaches every rank and the
//! caller's output is untouched.
//!
//! The tag is the call's fingerprint: a mismatch is reported by the receiving
//! transport as both ranks' calls side by side ("rank 0 is in all_reduce#9
//! (1280 × float, avg), rank 1 is in broadcast#9 (1280 × float, root 0)";
//! see [`crate::transport::Frame::expect`]), so the desync check costs no
//! more than the headers every message already carries.
//!
//! Every call is also recorded by the flight recorder ([`crate::flight`]),
//! which the transport tells about waits that last.
//!
//! After any error the transport is aborted (peers waiting on us fail promptly
//! with the reason) and the communicator refuses further calls.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use super::checks::{self, blocked_count, gather_count, input_bytes, per_rank};
use super::scratch::area;
use crate::algorithms::{
    self, Algo, TaggedTransport, dissemination, halving_doubling, hierarchical, linear, pairwise,
    plug::Plug, recursive_doubling, ring, tree,
};
use crate::buffer::{Buffer, BufferMut};
use crate::copy::copy;
use crate::element::{DType, ReduceOp, finish_avg};
use crate::error::{Error, Result};
use crate::flight::{Entry, Flight, History};
use crate::transport::{Tag, Transport};
use crate::{Backend, Collective, Communicator, Input};

const B: Backend = Backend::Reference;

/// A communicator running ringside's own algorithms.
pub struct ReferenceComm {
    rank: usize,
    world: usize,
    transport_name: &'static str,
    inner: Mutex<Inner>,
    /// The flight recorder, unless `RINGSIDE_FLIGHT_RECORDER=0`.
    flight: Option<Arc<Flight>>,
}

impl Drop for ReferenceComm {
    fn drop(&mut self) {
        // Dropped while its thread unwinds: the rank panicked. Waiting peers
        // fail at once with that reason, not after the notice or the timeout
        // (a plain drop does not abort: a peer may still be reading our last
        // message, and the abort would race it).
        if std::thread::panicking() {
            let g = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
            g.t.abort(&format!(
                "rank {} panicked (its panic message is printed above)",
                self.rank
            ));
        }
        // Peers still waiting for us learn that nothing more will come.
        if let Some(f) = &self.flight {
            f.close();
        }
    }
}

struct Inner {
    t: Box<dyn Transport>,
    algo: Algo,
    /// Set by [`ReferenceComm::plug`]: runs every all_reduce and broadcast.
    plug: Option<Arc<dyn Plug>>,
    /// Ranks per node for [`Algo::Hierarchical`]; `None`: `LOCAL_WORLD_SIZE`.
    per_node: Option<usize>,
    seq: u32,
    sent: Vec<u32>,
    received: Vec<u32>,
    broken: Option<String>,
    scratch: Vec<u64>,
    scratch2: Vec<u64>,
    /// The fingerprint of the call in progress, for the history.
    fingerprint: Option<Tag>,
    /// The last calls (kept only with the flight recorder).
    history: History,
}

fn blocks(count: usize, n: usize, esize: usize) -> Vec<Range<usize>> {
    (0..n)
        .map(|i| i * count * esize..(i + 1) * count * esize)
        .collect()
}

/// The answer to an all_reduce algorithm this backend does not run (Gloo's).
pub(crate) fn unsupported_algo(algo: Algo) -> Error {
    Error::Unsupported {
        backend: B,
        what: format!("the {} all_reduce algorithm", algo.name()),
    }
}

impl ReferenceComm {
    /// Wraps a connected transport. `transport_name` is reported by [`ReferenceComm::transport`].
    pub fn new(t: Box<dyn Transport>, algo: Algo, transport_name: &'static str) -> Self {
        let (rank, world) = (t.rank(), t.world_size());
        ReferenceComm {
            rank,
            world,
            transport_name,
            inner: Mutex::new(Inner {
                t,
                algo,
                plug: None,
                per_node: None,
                seq: 0,
                sent: vec![0; world],
                received: vec![0; world],
                broken: None,
                scratch: Vec::new(),
                scratch2: Vec::new(),
                fingerprint: None,
                history: History::default(),
            }),
            flight: None,
        }
    }

    /// Records every later call in `flight`, and lets the transport tell it
    /// about waits that last (see [`crate::flight`]).
    pub fn record(&mut self, flight: Arc<Flight>) {
        if let Ok(g) = self.inner.get_mut() {
            g.t.set_watch(Some(flight.clone()));
        }
        self.flight = Some(flight);
    }

    /// The flight recorder, unless it is off.
    pub(crate) fn flight(&self) -> Option<Arc<Flight>> {
        self.flight.clone()
    }

    /// The last calls this communicator made, oldest first (empty with the
    /// flight recorder off).
    pub fn flight_record(&self) -> Vec<Entry> {
        self.inner
            .lock()
            .map(|g| g.history.entries())
            .unwrap_or_default()
    }

    /// Forces an all_reduce algorithm for later calls (`Auto` picks by size).
    /// Every rank must make the same choice: algorithms exchange different
    /// messages, and the tags would not match.
    pub fn set_algo(&self, algo: Algo) {
        if let Ok(mut g) = self.inner.lock() {
            g.algo = algo;
        }
    }

    /// Nodes of `per_node` consecutive ranks for [`Algo::Hierarchical`]
    /// (`None`: the launcher's `LOCAL_WORLD_SIZE`, see
    /// [`hierarchical::per_node_from_env`]). Every rank must say the same;
    /// thread ranks use it to play several nodes on one host.
    pub fn set_per_node(&self, per_node: Option<usize>) {
        if let Ok(mut g) = self.inner.lock() {
            g.per_node = per_node;
        }
    }

    /// Runs every later all_reduce and broadcast (at more than one rank) with
    /// `plug`'s algorithms instead of the backend's own; `None` goes back.
    /// Validation, the agreement round, `Avg`'s division and the abort on error
    /// stay the backend's. Every rank must plug the same algorithms.
    pub fn plug(&self, plug: Option<Arc<dyn Plug>>) {
        if let Ok(mut g) = self.inner.lock() {
            g.plug = plug;
        }
    }

    /// The transport in use (`tcp` or `shm`).
    pub fn transport(&self) -> &'static str {
        self.transport_name
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        super::guard::lock_usable(&self.inner, |g| g.broken.as_deref())
    }

    fn check_root(&self, root: usize) -> Result<()> {
        checks::check_root(root, self.world)
    }

    /// Runs one collective: numbers it, and on failure aborts the transport so
    /// peers fail fast, and marks the communicator broken.
    fn run(
        &self,
        collective: Collective,
        body: impl FnOnce(&mut Inner, u32) -> Result<()>,
    ) -> Result<()> {
        let mut g = self.lock()?;
        g.seq = g.seq.wrapping_add(1);
        let seq = g.seq;
        let started = self.flight.as_ref().map(|f| f.begin(collective, seq));
        let res = body(&mut g, seq);
        if let (Some(f), Err(e)) = (&self.flight, &res) {
            f.failed(
                &format!("rank {} failed in {collective}: {e}", self.rank),
                g.fingerprint,
            );
        }
        if let (Some(f), Some(started_ms)) = (&self.flight, started) {
            f.end(collective, seq, res.is_ok(), started_ms);
            if let Some(tag) = g.fingerprint.take() {
                g.history.push(Entry {
                    tag,
                    started_ms,
                    ok: res.is_ok(),
                });
            }
        }
        if let Err(e) = &res {
            let reason = format!("rank {} failed in {collective}: {e}", self.rank);
            g.t.abort(&reason);
            g.broken = Some(e.to_string());
        }
        res
    }
}

impl Inner {
    /// Notes `tag` as the fingerprint of the call in progress.
    fn mark(&mut self, tag: Tag) -> Tag {
        self.fingerprint = Some(tag);
        tag
    }
    fn tagged(&mut self, tag: Tag) -> TaggedTransport<'_> {
        TaggedTransport {
            t: self.t.as_mut(),
            tag,
        }
    }
    fn agree(&mut self, tag: Tag) -> Result<()> {
        dissemination::barrier(&mut self.tagged(tag))
    }
}

fn tag(
    collective: Collective,
    seq: u32,
    dtype: DType,
    op: Option<ReduceOp>,
    root: usize,
    count: usize,
) -> Tag {
    Tag {
        collective,
        seq,
        dtype,
        op: op.map_or(0, ReduceOp::code),
        root: root as u32,
        count: count as u64,
    }
}

impl Communicator for ReferenceComm {
    fn backend(&self) -> Backend {
        B
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce(&self, input: Input<'_>, output: &mut BufferMut<'_>, op: ReduceOp) -> Result<()> {
        let n = self.world;
        self.run(Collective::AllReduce, |g, seq| {
            let (dtype, count) = (output.dtype(), output.len());
            let src = input_bytes(B, &input, dtype, count, "all_reduce")?;
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(Collective::AllReduce, seq, dtype, Some(op), 0, count));
            if n == 1 {
                if let Some(s) = src {
                    copy(out, s);
                }
                return Ok(());
            }
            if let Some(plug) = g.plug.clone() {
                g.agree(tag)?;
                if let Some(s) = src {
                    copy(out, s);
                }
                plug.all_reduce(&mut g.tagged(tag), out, dtype, op)?;
                if op == ReduceOp::Avg {
                    finish_avg(dtype, out, n);
                }
                return Ok(());
            }
            let bytes = out.len();
            let algo = algorithms::select(g.algo, bytes, n, g.t.latency_path_bytes());
            if !B.algorithms().contains(&algo) {
                // Gloo's names, set with `set_algo`: every rank fails here alike.
                return Err(unsupported_algo(algo));
            }
            if algo == Algo::RecursiveDoubling && bytes <= algorithms::SMALL_BYTES {
                // Latency path: staged, so `out` is only written on success.
                let Inner {
                    t,
                    scratch,
                    scratch2,
                    ..
                } = g;
                let work = area(scratch, bytes);
                copy(work, src.unwrap_or(out));
                let tmp = area(scratch2, bytes);
                let mut p = TaggedTransport { t: t.as_mut(), tag };
                recursive_doubling::all_reduce(&mut p, work, tmp, dtype, op)?;
                if op == ReduceOp::Avg {
                    finish_avg(dtype, work, n);
                }
                copy(out, work);
                return Ok(());
            }
            // Before the agreement round: a bad layout fails every rank alike.
            let per_node = match (algo, g.per_node) {
                (Algo::Hierarchical, Some(k)) => k,
                (Algo::Hierarchical, None) => hierarchical::per_node_from_env(n)?,
                _ => n,
            };
            if algo == Algo::Hierarchical {
                hierarchical::check_layout(n, per_node)?;
            }
            g.agree(tag)?;
            if let Some(s) = src {
                copy(out, s);
            }
            let Inner { t, scratch, .. } = g;
            let mut p = TaggedTransport { t: t.as_mut(), tag };
            match algo {
                Algo::Ring => ring::all_reduce(&mut p, out, dtype, op)?,
                Algo::Hierarchical => hierarchical::all_reduce(&mut p, out, dtype, op, per_node)?,
                Algo::HalvingDoubling => {
                    halving_doubling::all_reduce(&mut p, out, area(scratch, bytes), dtype, op)?
                }
                Algo::RecursiveDoubling => {
                    recursive_doubling::all_reduce(&mut p, out, area(scratch, bytes), dtype, op)?
                }
                Algo::Tree | Algo::Auto | Algo::RingChunked | Algo::Bcube => {
                    tree::reduce(&mut p, out, dtype, op, 0)?;
                    tree::broadcast(&mut p, out, 0)?;
                }
            }
            if op == ReduceOp::Avg {
                finish_avg(dtype, out, n);
            }
            Ok(())
        })
    }

    fn broadcast(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        self.run(Collective::Broadcast, |g, seq| {
            self.check_root(root)?;
            let (dtype, count) = (output.dtype(), output.len());
            let src = if self.rank == root {
                input_bytes(B, &input, dtype, count, "broadcast")?
            } else {
                None
            };
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(Collective::Broadcast, seq, dtype, None, root, count));
            g.agree(tag)?;
            if let Some(s) = src {
                copy(out, s);
            }
            match g.plug.clone() {
                Some(plug) => plug.broadcast(&mut g.tagged(tag), out, root),
                None => tree::broadcast(&mut g.tagged(tag), out, root),
            }
        })
    }

    fn reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(Collective::Reduce, |g, seq| {
            self.check_root(root)?;
            let dtype = output.dtype();
            let count = match &input {
                Input::Buffer(b) => b.len(),
                Input::InPlace => output.len(),
            };
            if me == root && output.len() != count {
                return Err(Error::InvalidArgument(format!(
                    "reduce: root output has {} elements, input {count}",
                    output.len()
                )));
            }
            let src = input_bytes(B, &input, dtype, count, "reduce")?;
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(Collective::Reduce, seq, dtype, Some(op), root, count));
            g.agree(tag)?;
            let Inner { t, scratch, .. } = g;
            let mut p = TaggedTransport { t: t.as_mut(), tag };
            let bytes = count * dtype.size();
            if me == root {
                if let Some(s) = src {
                    copy(out, s);
                }
                tree::reduce(&mut p, out, dtype, op, root)?;
                if op == ReduceOp::Avg {
                    finish_avg(dtype, out, n);
                }
            } else {
                // Non-roots accumulate partial results in scratch, leaving the
                // caller's buffers as they were.
                let acc = area(scratch, bytes);
                copy(acc, src.unwrap_or(&out[..bytes.min(out.len())]));
                tree::reduce(&mut p, acc, dtype, op, root)?;
            }
            Ok(())
        })
    }

    fn all_gather(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(Collective::AllGather, |g, seq| {
            let dtype = output.dtype();
            let count = per_rank(output.len(), n, "all_gather output")?;
            let src = input_bytes(B, &input, dtype, count, "all_gather")?;
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(Collective::AllGather, seq, dtype, None, 0, count));
            g.agree(tag)?;
            let bl = blocks(count, n, dtype.size());
            if let Some(s) = src {
                copy(&mut out[bl[me].clone()], s);
            }
            ring::all_gather_blocks(&mut g.tagged(tag), out, &bl)
        })
    }

    fn reduce_scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(Collective::ReduceScatter, |g, seq| {
            let dtype = output.dtype();
            let count = blocked_count(&input, output.len(), n, "reduce_scatter")?;
            let src = input_bytes(B, &input, dtype, n * count, "reduce_scatter")?;
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(
                Collective::ReduceScatter,
                seq,
                dtype,
                Some(op),
                0,
                count,
            ));
            g.agree(tag)?;
            let bl = blocks(count, n, dtype.size());
            let Inner { t, scratch, .. } = g;
            let mut p = TaggedTransport { t: t.as_mut(), tag };
            let mine = match src {
                Some(s) => {
                    let work = area(scratch, s.len());
                    copy(work, s);
                    ring::reduce_scatter_blocks(&mut p, work, &bl, dtype, op)?;
                    copy(out, &work[bl[me].clone()]);
                    &mut out[..]
                }
                None => {
                    ring::reduce_scatter_blocks(&mut p, out, &bl, dtype, op)?;
                    &mut out[bl[me].clone()]
                }
            };
            if op == ReduceOp::Avg {
                finish_avg(dtype, mine, n);
            }
            Ok(())
        })
    }

    fn all_to_all(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()> {
        let n = self.world;
        self.run(Collective::AllToAll, |g, seq| {
            let dtype = output.dtype();
            let count = per_rank(output.len(), n, "all_to_all output")?;
            let src = input_bytes(B, &input, dtype, n * count, "all_to_all")?;
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(Collective::AllToAll, seq, dtype, None, 0, count));
            g.agree(tag)?;
            let bl = blocks(count, n, dtype.size());
            let Inner { t, scratch, .. } = g;
            let mut p = TaggedTransport { t: t.as_mut(), tag };
            match src {
                Some(s) => pairwise::all_to_all(&mut p, s, out, &bl),
                None => {
                    // In place: blocks still to be sent would be overwritten by
                    // blocks arriving, so send from a copy.
                    let sent = area(scratch, out.len());
                    copy(sent, out);
                    pairwise::all_to_all(&mut p, sent, out, &bl)
                }
            }
        })
    }

    fn gather(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(Collective::Gather, |g, seq| {
            self.check_root(root)?;
            let dtype = output.dtype();
            let count = gather_count(&input, output.len(), n, me == root)?;
            let src = input_bytes(B, &input, dtype, count, "gather")?;
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(Collective::Gather, seq, dtype, None, root, count));
            g.agree(tag)?;
            let bl = blocks(count, n, dtype.size());
            let Inner { t, scratch, .. } = g;
            let mut p = TaggedTransport { t: t.as_mut(), tag };
            match src {
                Some(s) => linear::gather(&mut p, s, out, &bl, root),
                None => {
                    let own = area(scratch, bl[me].len());
                    copy(own, &out[bl[me].clone()]);
                    linear::gather(&mut p, own, out, &bl, root)
                }
            }
        })
    }

    fn scatter(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()> {
        let (n, me) = (self.world, self.rank);
        self.run(Collective::Scatter, |g, seq| {
            self.check_root(root)?;
            let dtype = output.dtype();
            let count = blocked_count(&input, output.len(), n, "scatter")?;
            let src = if me == root {
                input_bytes(B, &input, dtype, n * count, "scatter")?
            } else {
                None
            };
            let out = output.host_bytes_mut(B)?;
            let tag = g.mark(tag(Collective::Scatter, seq, dtype, None, root, count));
            g.agree(tag)?;
            let bl = blocks(count, n, dtype.size());
            let Inner { t, scratch, .. } = g;
            let mut p = TaggedTransport { t: t.as_mut(), tag };
            match (&input, src) {
                (Input::InPlace, _) => {
                    let sent = area(scratch, if me == root { out.len() } else { 0 });
                    copy(sent, if me == root { &out[..] } else { &[] });
                    linear::scatter(&mut p, sent, &mut out[bl[me].clone()], &bl, root)
                }
                (_, Some(s)) => linear::scatter(&mut p, s, out, &bl, root),
                (_, None) => linear::scatter(&mut p, &[], out, &bl, root),
            }
        })
    }

    fn barrier(&self) -> Result<()> {
        self.run(Collective::Barrier, |g, seq| {
            let tag = g.mark(tag(Collective::Barrier, seq, DType::U8, None, 0, 0));
            g.agree(tag)
        })
    }

    fn send(&self, buf: &Buffer<'_>, peer: usize) -> Result<()> {
        self.point_to_point(
            peer,
            buf.dtype(),
            buf.len(),
            |g, tag| {
                let bytes = buf.host_bytes(B)?;
                g.tagged(tag).send(peer, bytes)
            },
            true,
        )
    }

    fn recv(&self, buf: &mut BufferMut<'_>, peer: usize) -> Result<()> {
        let (dtype, len) = (buf.dtype(), buf.len());
        self.point_to_point(
            peer,
            dtype,
            len,
            |g, tag| {
                let bytes = buf.host_bytes_mut(B)?;
                g.tagged(tag)
                    .recv(peer, crate::transport::Sink::Copy(bytes))
            },
            false,
        )
    }
}

impl ReferenceComm {
    /// Send/recv are numbered per peer and direction, not per communicator:
    /// only the two ranks involved take part.
    fn point_to_point(
        &self,
        peer: usize,
        dtype: DType,
        count: usize,
        body: impl FnOnce(&mut Inner, Tag) -> Result<()>,
        sending: bool,
    ) -> Result<()> {
        let mut g = self.lock()?;
        let res = (|| {
            if peer >= self.world || peer == self.rank {
                return Err(Error::InvalidArgument(format!(
                    "peer {peer} is not another rank of this world of {}",
                    self.world
                )));
            }
            let counter = if sending {
                &mut g.sent[peer]
            } else {
                &mut g.received[peer]
            };
            *counter = counter.wrapping_add(1);
            let seq = *counter;
            // The root field names the sender so both sides build the same tag.
            let sender = if sending { self.rank } else { peer };
            let t = tag(Collective::SendRecv, seq, dtype, None, sender, count);
            let started = self
                .flight
                .as_ref()
                .map(|f| f.begin(Collective::SendRecv, seq));
            let res = body(&mut g, t);
            if let (Some(f), Err(e)) = (&self.flight, &res) {
                f.failed(
                    &format!("rank {} failed in send/recv: {e}", self.rank),
                    Some(t),
                );
            }
            if let (Some(f), Some(started_ms)) = (&self.flight, started) {
                f.end(Collective::SendRecv, seq, res.is_ok(), started_ms);
                g.history.push(Entry {
                    tag: t,
                    started_ms,
                    ok: res.is_ok(),
                });
            }
            res
        })();
        if let Err(e) = &res {
            g.t.abort(&format!("rank {} failed in send/recv: {e}", self.rank));
            g.broken = Some(e.to_string());
        }
        res
    }
}
