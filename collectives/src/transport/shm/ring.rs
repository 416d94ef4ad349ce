//! The rings: one single-producer/single-consumer byte ring per directed pair
//! of ranks. The producer copies a frame in (header whole, then the payload a
//! chunk at a time) and publishes `head`; the consumer copies or reduces
//! straight out of the ring and publishes `tail`. Each side re-reads the
//! other's position only when what it last saw is not enough.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use super::ShmTransport;
use super::route::{Class, Path};
use super::segment::REASON_MAX;
use super::single_copy::{self, DESCRIPTOR_LEN};
use super::streaming;
use crate::copy::copy_raw;
use crate::error::{Error, Result};
use crate::transport::{
    FLAG_ABORT, FLAG_REPLY, FLAG_SINGLE_COPY, FLAG_STREAM, Frame, HEADER_LEN, Sink, Tag,
};

/// Our side of one ring: our own position and the last seen position of the
/// other side (re-read only when it is not enough, to avoid cache misses).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cursor {
    pub(super) pos: u64,
    pub(super) seen: u64,
}

/// A message being written: header, body, padding, as one byte stream.
pub(super) struct Tx<'a> {
    pub(super) peer: usize,
    pub(super) hdr: [u8; HEADER_LEN],
    /// What follows the header in the ring: the payload, or for a single-copy
    /// message its descriptor. Held as a pointer because a reply (see
    /// `reply.rs`) writes the answered front of the same buffer while its
    /// back is still being sent: the two parts are only ever borrowed apart.
    body: *const u8,
    body_len: usize,
    _body: PhantomData<&'a [u8]>,
    /// Payload bytes of the message.
    pub(super) len: usize,
    pub(super) pos: usize,
    pub(super) end: usize,
    /// The receiver reads the payload from our memory (see `single_copy.rs`).
    pub(super) single: bool,
    /// Single copy, descriptor written: the stream position the receiver's
    /// tail must reach before the payload is ours again.
    pub(super) ack: Option<u64>,
    /// The receiver answers in the ring (see `reply.rs`).
    pub(super) reply: Option<Reply>,
}

/// Where a message's answer goes, and how much of it has come back.
pub(super) struct Reply {
    /// The sent buffer itself (`len` bytes): the answer replaces it.
    pub(super) dst: *mut u8,
    /// Answer bytes taken so far.
    pub(super) done: usize,
    /// The stream position of the payload's first byte, once the header is in.
    pub(super) at: Option<u64>,
}

impl<'a> Tx<'a> {
    /// A message of `len` payload bytes whose ring body is `body` (the payload,
    /// or a single-copy descriptor).
    pub(super) fn new(
        peer: usize,
        hdr: [u8; HEADER_LEN],
        body: &'a [u8],
        len: usize,
        single: bool,
    ) -> Tx<'a> {
        Tx::with_body(peer, hdr, body.as_ptr(), body.len(), single, None, len)
    }

    /// `payload`, sent for the receiver to reduce and write back over it in
    /// the ring; the answer lands in `payload` (see `reply.rs`).
    pub(super) fn replying(peer: usize, hdr: [u8; HEADER_LEN], payload: &'a mut [u8]) -> Tx<'a> {
        let dst = payload.as_mut_ptr();
        let reply = Reply {
            dst,
            done: 0,
            at: None,
        };
        let len = payload.len();
        Tx::with_body(peer, hdr, dst, len, false, Some(reply), len)
    }

    fn with_body(
        peer: usize,
        hdr: [u8; HEADER_LEN],
        body: *const u8,
        body_len: usize,
        single: bool,
        reply: Option<Reply>,
        len: usize,
    ) -> Tx<'a> {
        Tx {
            peer,
            hdr,
            body,
            body_len,
            _body: PhantomData,
            len,
            pos: 0,
            end: HEADER_LEN + body_len.next_multiple_of(8),
            single,
            ack: None,
            reply,
        }
    }

    /// Body bytes from `from` to the end.
    fn body_from(&self, from: usize) -> &[u8] {
        debug_assert!(from <= self.body_len);
        // SAFETY: `body` holds `body_len` bytes borrowed for 'a. Of a reply's
        // buffer only bytes before the ring's tail are written meanwhile, and
        // those were all sent already (`reply.rs`), so they are not in here.
        unsafe { std::slice::from_raw_parts(self.body.add(from), self.body_len - from) }
    }

    /// Whether every answer byte of a reply is back (true for other messages).
    pub(super) fn answered(&self) -> bool {
        self.reply.as_ref().is_none_or(|r| r.done == self.len)
    }

    pub(super) fn done(&self) -> bool {
        self.pos == self.end && self.ack.is_none() && self.answered()
    }
    /// Free bytes needed before writing anything: the header goes in whole so
    /// the receiver never waits on half a header, and a descriptor goes in
    /// with it.
    pub(super) fn min_room(&self) -> usize {
        if self.single {
            self.end - self.pos
        } else if self.pos < HEADER_LEN {
            HEADER_LEN - self.pos
        } else {
            8
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    Header,
    Payload(usize),
    /// Single copy: reading the sender's buffer at `addr`, `done` bytes so far.
    Remote {
        addr: u64,
        done: usize,
    },
    Done,
}

/// A message being received.
pub(super) struct Rx<'a> {
    pub(super) peer: usize,
    pub(super) sink: Sink<'a>,
    pub(super) want: usize,
    pub(super) stage: Stage,
    /// Copy out of the ring with streaming stores (see `streaming.rs`).
    pub(super) stream: bool,
    /// Write the reduction back over the payload in the ring (see `reply.rs`).
    pub(super) reply: bool,
}

impl ShmTransport {
    /// The consumer's position in our ring to `peer`, checked against ours.
    pub(super) fn load_tail(&self, peer: usize, pos: u64) -> Result<u64> {
        let tail = self
            .seg
            .u64_at(self.layout.tail(self.rank, peer))
            .load(Ordering::Acquire);
        if tail > pos || pos - tail > self.layout.cap as u64 {
            return Err(self.corrupt(self.rank, peer, pos, tail));
        }
        Ok(tail)
    }

    /// The producer's position in `peer`'s ring to us, checked against ours.
    fn load_head(&self, peer: usize, pos: u64) -> Result<u64> {
        let head = self
            .seg
            .u64_at(self.layout.head(peer, self.rank))
            .load(Ordering::Acquire);
        if head < pos || head - pos > self.layout.cap as u64 {
            return Err(self.corrupt(peer, self.rank, head, pos));
        }
        Ok(head)
    }

    #[cold]
    fn corrupt(&self, from: usize, to: usize, head: u64, tail: u64) -> Error {
        Error::Protocol(format!(
            "shared-memory ring from rank {from} to rank {to} is corrupt (head {head}, tail {tail}, \
             capacity {}): something wrote into the segment out of turn",
            self.layout.cap
        ))
    }

    /// Writes as much of `t` as fits (at most one chunk) and publishes it.
    pub(super) fn push(&mut self, t: &mut Tx<'_>) -> Result<bool> {
        if let Some(at) = t.ack {
            let tail = self.load_tail(t.peer, self.out[t.peer].pos)?;
            self.out[t.peer].seen = tail;
            if tail >= at {
                t.ack = None;
                return Ok(true);
            }
            return Ok(false);
        }
        let cap = self.layout.cap;
        let mut c = self.out[t.peer];
        let want = (t.end - t.pos).min(self.chunk);
        // Ring bytes answered but not yet taken back are not free either.
        let released = |t: &Tx<'_>, tail: u64| match &t.reply {
            Some(Reply {
                at: Some(a), done, ..
            }) => tail.min(a + *done as u64),
            _ => tail,
        };
        let mut free = cap - (c.pos - released(t, c.seen)) as usize;
        if free < want {
            c.seen = self.load_tail(t.peer, c.pos)?;
            free = cap - (c.pos - released(t, c.seen)) as usize;
        }
        if free < t.min_room() {
            self.out[t.peer] = c;
            return Ok(false);
        }
        let n = want.min(free);
        if t.pos == 0
            && let Some(r) = t.reply.as_mut()
        {
            r.at = Some(c.pos + HEADER_LEN as u64);
        }
        let ring = self.seg.ptr(self.layout.ring(self.rank, t.peer));
        // Stream = header ++ payload ++ padding; padding bytes are never read.
        let mut s = t.pos;
        let end = t.pos + n;
        let mut at = c.pos;
        while s < end {
            let src: &[u8] = if s < HEADER_LEN {
                &t.hdr[s..]
            } else if s - HEADER_LEN < t.body_len {
                t.body_from(s - HEADER_LEN)
            } else {
                break;
            };
            let k = src.len().min(end - s);
            // SAFETY: [at, at+k) lies in ring space the consumer has released
            // (free >= n) and that only this rank writes.
            unsafe { copy_into_ring(ring, cap, at, &src[..k]) };
            s += k;
            at += k as u64;
        }
        c.pos += n as u64;
        t.pos += n;
        if t.single && t.pos == t.end {
            t.ack = Some(c.pos);
        }
        self.out[t.peer] = c;
        self.seg
            .u64_at(self.layout.head(self.rank, t.peer))
            .store(c.pos, Ordering::Release);
        self.notify(t.peer);
        Ok(true)
    }

    /// Consumes what has arrived for `r` (the header, then at most one chunk).
    pub(super) fn pull(&mut self, tag: &Tag, r: &mut Rx<'_>) -> Result<bool> {
        let cap = self.layout.cap;
        let ring = self.seg.ptr(self.layout.ring(r.peer, self.rank));
        let mut c = self.inc[r.peer];
        let start = c.pos;
        if r.stage == Stage::Header {
            if ((c.seen - c.pos) as usize) < HEADER_LEN {
                c.seen = self.load_head(r.peer, c.pos)?;
            }
            let avail = (c.seen - c.pos) as usize;
            if avail < HEADER_LEN {
                self.inc[r.peer] = c;
                return Ok(false);
            }
            let mut h = [0u8; HEADER_LEN];
            // SAFETY: published bytes [pos, pos+32) belong to us until we
            // advance the tail.
            unsafe { copy_from_ring(ring, cap, c.pos, &mut h) };
            let frame = Frame::decode(&h)?;
            if frame.flags & FLAG_ABORT != 0 {
                let len = (frame.len as usize).min(avail - HEADER_LEN).min(REASON_MAX);
                let mut reason = vec![0u8; len];
                // SAFETY: as above, within the published bytes.
                unsafe { copy_from_ring(ring, cap, c.pos + HEADER_LEN as u64, &mut reason) };
                return Err(Error::PeerAborted {
                    rank: r.peer,
                    reason: String::from_utf8_lossy(&reason).into_owned(),
                });
            }
            frame.expect(self.rank, r.peer, tag, r.want)?;
            if (frame.flags & FLAG_REPLY != 0) != r.reply {
                return Err(Error::Protocol(format!(
                    "rank {} and rank {} disagree on whether {} is answered in the ring \
                     (rank {} {})",
                    r.peer,
                    self.rank,
                    tag.describe(),
                    r.peer,
                    if r.reply { "did not ask" } else { "asked" },
                )));
            }
            if r.peer < self.rank && !r.reply {
                let class = Class::of(r.want, super::op_bytes(tag));
                self.routes
                    .follow(class, tag.seq, Path::of_flags(frame.flags));
            }
            if frame.flags & FLAG_SINGLE_COPY != 0 {
                // The sender writes the descriptor with the header. Our tail
                // stays before both until the read is over: it is the
                // sender's acknowledgement.
                let need = HEADER_LEN + DESCRIPTOR_LEN;
                if ((c.seen - c.pos) as usize) < need {
                    c.seen = self.load_head(r.peer, c.pos)?;
                }
                if ((c.seen - c.pos) as usize) < need {
                    self.inc[r.peer] = c;
                    return Ok(false);
                }
                let mut d = [0u8; DESCRIPTOR_LEN];
                // SAFETY: published bytes, ours until the tail moves.
                unsafe { copy_from_ring(ring, cap, c.pos + HEADER_LEN as u64, &mut d) };
                let (addr, len) = single_copy::decode_descriptor(&d);
                if len != r.want as u64 {
                    return Err(self.corrupt(r.peer, self.rank, c.seen, c.pos));
                }
                r.stage = Stage::Remote { addr, done: 0 };
            } else {
                // The sender's route learner chose a streaming copy-out.
                r.stream |= frame.flags & FLAG_STREAM != 0;
                c.pos += HEADER_LEN as u64;
                r.stage = if r.want == 0 {
                    Stage::Done
                } else {
                    Stage::Payload(0)
                };
            }
        }
        if let Stage::Remote { addr, done } = r.stage {
            self.inc[r.peer] = c;
            let done = done + self.read_piece(r.peer, addr, done, &mut r.sink)?;
            if done < r.want {
                r.stage = Stage::Remote { addr, done };
                return Ok(true);
            }
            // A sender that gave up (timeout, abort) during our last piece
            // has returned an error for this message: it fails here too.
            self.check_abort()?;
            c.pos += (HEADER_LEN + DESCRIPTOR_LEN) as u64;
            r.stage = Stage::Done;
        }
        if let Stage::Payload(done) = r.stage {
            let left = r.want - done;
            if ((c.seen - c.pos) as usize) < left.min(self.chunk) {
                c.seen = self.load_head(r.peer, c.pos)?;
            }
            let take = ((c.seen - c.pos) as usize).min(left).min(self.chunk);
            if take > 0 {
                let off = (c.pos as usize) & (cap - 1);
                let first = take.min(cap - off);
                let stream = r.stream;
                // SAFETY: [pos, pos+take) is published and ours until the tail
                // moves; the producer does not write it meanwhile. Both pieces
                // start 8-aligned, so reductions see whole elements.
                unsafe {
                    absorb(
                        &mut r.sink,
                        done,
                        std::slice::from_raw_parts(ring.add(off), first),
                        stream,
                    );
                    if first < take {
                        absorb(
                            &mut r.sink,
                            done + first,
                            std::slice::from_raw_parts(ring, take - first),
                            stream,
                        );
                    }
                    // The answer goes back over the bytes it came from, which
                    // stay ours until the tail moves (`reply.rs`).
                    if let (true, Sink::Reduce { dst, .. }) = (r.reply, &r.sink) {
                        copy_into_ring(ring, cap, c.pos, &dst[done..done + take]);
                    }
                }
                let done = done + take;
                if done == r.want {
                    // The producer published the padding with the last bytes.
                    c.pos += take.next_multiple_of(8) as u64;
                    r.stage = Stage::Done;
                } else {
                    c.pos += take as u64;
                    r.stage = Stage::Payload(done);
                }
            }
        }
        self.inc[r.peer] = c;
        if c.pos == start {
            return Ok(false);
        }
        self.seg
            .u64_at(self.layout.tail(r.peer, self.rank))
            .store(c.pos, Ordering::Release);
        self.notify(r.peer);
        Ok(true)
    }

    /// Whether a poll could progress now (read fresh from shared memory).
    pub(super) fn can_progress(&self, tx: Option<&Tx<'_>>, rx: Option<&Rx<'_>>) -> bool {
        if let Some(t) = tx.filter(|t| !t.done()) {
            let c = self.out[t.peer];
            let tail = self
                .seg
                .u64_at(self.layout.tail(self.rank, t.peer))
                .load(Ordering::Acquire);
            if let Some(at) = t.ack {
                if tail >= at {
                    return true;
                }
            } else {
                // An impossible position also counts: the poll reports it.
                let used = c.pos.wrapping_sub(tail);
                if t.pos < t.end
                    && (used > self.layout.cap as u64
                        || self.layout.cap - used as usize >= t.min_room())
                {
                    return true;
                }
                if let Some(Reply {
                    at: Some(a), done, ..
                }) = &t.reply
                    && tail.min(a + t.len as u64) > a + *done as u64
                {
                    return true;
                }
            }
        }
        if let Some(r) = rx.filter(|r| r.stage != Stage::Done) {
            let c = self.inc[r.peer];
            let head = self
                .seg
                .u64_at(self.layout.head(r.peer, self.rank))
                .load(Ordering::Acquire);
            let need = match r.stage {
                Stage::Header => HEADER_LEN as u64,
                // Reading the sender's memory never waits on the ring.
                Stage::Remote { .. } => return true,
                _ => 1,
            };
            if head.wrapping_sub(c.pos) >= need {
                return true;
            }
        }
        false
    }
}

/// Hands ring bytes to the sink; a copy of a message larger than the cache
/// (`stream`) bypasses it (see `streaming.rs`).
fn absorb(sink: &mut Sink<'_>, offset: usize, bytes: &[u8], stream: bool) {
    match sink {
        Sink::Copy(d) if stream => streaming::copy(&mut d[offset..offset + bytes.len()], bytes),
        _ => sink.absorb(offset, bytes),
    }
}

/// Copies `src` into the ring at stream position `at`, wrapping at `cap`.
///
/// # Safety
/// `ring` must point at `cap` writable bytes (cap a power of two), and the
/// range must be ring space this rank owns.
unsafe fn copy_into_ring(ring: *mut u8, cap: usize, at: u64, src: &[u8]) {
    let off = (at as usize) & (cap - 1);
    let first = src.len().min(cap - off);
    // SAFETY: per the contract; both pieces stay inside the ring.
    unsafe {
        copy_raw(ring.add(off), src.as_ptr(), first);
        copy_raw(ring, src.as_ptr().add(first), src.len() - first);
    }
}

/// Copies ring bytes at stream position `at` into `dst`, wrapping at `cap`.
///
/// # Safety
/// As [`copy_into_ring`], for bytes published to this rank.
pub(super) unsafe fn copy_from_ring(ring: *const u8, cap: usize, at: u64, dst: &mut [u8]) {
    let off = (at as usize) & (cap - 1);
    let first = dst.len().min(cap - off);
    // SAFETY: per the contract.
    unsafe {
        copy_raw(dst.as_mut_ptr(), ring.add(off), first);
        copy_raw(dst.as_mut_ptr().add(first), ring, dst.len() - first);
    }
}
