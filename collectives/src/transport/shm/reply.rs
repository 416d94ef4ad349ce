//! Answers in the ring: both halves of a two-rank all_reduce in one step.
//!
//! Through the ring, a world-2 all_reduce moves each block three times and
//! reduces it once: the reduce-scatter's sender copies its block in, the
//! receiver folds it into its own, then the all-gather's sender copies the
//! result in and the receiver copies it out. Here the sender of a block asks
//! for an answer ([`FLAG_REPLY`]): the receiver folds each chunk into its own
//! block as before and writes the result back over the chunk in the ring,
//! then moves its tail; the sender copies the answer out of its own ring into
//! the block it sent, and only then counts that ring space as free. Each
//! block is copied in, folded (and written back), copied out: one copy fewer
//! per byte, and one exchange per slice instead of two.
//!
//! On the 2-core Xeon VM of issue 27, `peers --impl ringside-shm -b 64M -e
//! 64M --repeat 3`, three runs each way alternating: busbw 3.43–4.40 GB/s
//! against 3.36–3.58 without answers (0.79–0.88 of the copy bound against
//! 0.64–0.83), and 2.06–2.25 against 1.68–1.97 GB/s with `--load 2`.
//!
//! Only between processes: thread ranks reduce straight out of the peer's
//! buffer (`single_copy.rs`), which is cheaper still. Between processes the
//! answer is used even where `process_vm_readv` works: on the VMs measured
//! that read lost to the ring (2.7 against 3.7 GB/s at 64 MiB on the Xeon
//! VM), and the answer beats the ring. Both ranks of a pair decide alike (a
//! peer is a thread of ours or it is not), and a receiver that finds a frame
//! asking otherwise than it expects fails instead of guessing.

use super::ShmTransport;
use super::ring::{Rx, Stage, Tx, copy_from_ring};
use super::single_copy::Reach;
use crate::error::Result;
use crate::transport::{FLAG_REPLY, Frame, Pair, Sink, Tag};

/// The largest all_reduce of a two-process pair that `Algo::Auto` sends down
/// the latency path (`Transport::latency_path_bytes`), against
/// `algorithms::SMALL_BYTES` (16 KiB) elsewhere. The latency path stages
/// through scratch and copies every byte four times; the ring's one step here
/// copies it in, folds it, copies it out, and beats it from 8 KiB even with
/// its agreement round. On the 2-core EPYC VM of issue 27 (2026-11-28,
/// `ringside sweep --transport shm --algo auto|ring -b 2K -e 32K -n 1500`,
/// three runs each in turn, medians): 4 KiB 0.88–1.24 µs by recursive
/// doubling against 0.91–1.06 by the ring, 8 KiB 1.38–2.14 against
/// 1.19–1.45, 16 KiB 2.65–4.15 against 1.73–2.27. Over TCP recursive doubling
/// wins at every size to 16 KiB (8.7–10.7 µs against 21–24), and at 4 and 8
/// ranks on two cores too (by 1.6–3×), so the line moves only here.
pub(super) const PAIR_LATENCY_BYTES: usize = 4 << 10;

impl ShmTransport {
    /// Whether a pair with `peer` answers in the ring (see the module docs).
    pub(super) fn answers_in_ring(&self, peer: usize) -> bool {
        self.reach
            .get(peer)
            .is_some_and(|r| *r != Reach::SameProcess)
    }

    /// [`crate::transport::Transport::reduce_pair`] over the ring.
    pub(super) fn reduce_pair_in_ring(&mut self, tag: &Tag, pair: Pair<'_>) -> Result<()> {
        let hdr = Frame {
            tag: *tag,
            len: pair.mine.len() as u64,
            flags: FLAG_REPLY,
        }
        .encode();
        let mut tx = Tx::replying(pair.peer, hdr, pair.mine);
        let mut rx = Rx {
            peer: pair.peer,
            want: pair.theirs.len(),
            sink: Sink::Reduce {
                dst: pair.theirs,
                dtype: pair.dtype,
                op: pair.op,
            },
            stage: Stage::Header,
            stream: false,
            reply: true,
        };
        self.run(tag, Some(&mut tx), Some(&mut rx))
    }

    /// Copies the answered part of `t`'s payload back out of our ring into
    /// the buffer it came from; whether anything came.
    pub(super) fn take_reply(&mut self, t: &mut Tx<'_>) -> Result<bool> {
        let len = t.len;
        let Some(r) = t.reply.as_mut() else {
            return Ok(false);
        };
        let Some(at) = r.at else {
            return Ok(false);
        };
        let c = self.out[t.peer];
        let tail = self.load_tail(t.peer, c.pos)?;
        let upto = tail.min(at + len as u64);
        let from = at + r.done as u64;
        if upto <= from {
            return Ok(false);
        }
        let n = (upto - from) as usize;
        let ring = self.seg.ptr(self.layout.ring(self.rank, t.peer));
        // SAFETY: the receiver wrote these bytes before publishing the tail
        // past them (Release; `load_tail` is Acquire), and we do not reuse
        // them before `done` passes them. `r.dst` is the sent buffer of `len`
        // bytes; [done, done + n) lies before the tail and so was sent
        // already: nothing else borrows it now.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(r.dst.add(r.done), n);
            copy_from_ring(ring, self.layout.cap, from, dst);
        }
        r.done += n;
        self.out[t.peer].seen = tail;
        Ok(true)
    }
}
