//! The abort word: the first rank to give up claims it, writes its reason
//! beside it and rings every doorbell; every waiting rank checks the word and
//! fails with [`Error::PeerAborted`] carrying that reason.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::ShmTransport;
use super::segment::{OFF_ABORT, OFF_ABORT_LEN, OFF_REASON, REASON_MAX};
use crate::error::{Error, Result};
use crate::sys::futex;

impl ShmTransport {
    /// Fails with [`Error::PeerAborted`] once any rank has claimed the abort word.
    pub(super) fn check_abort(&self) -> Result<()> {
        let w = self.seg.u32_at(OFF_ABORT).load(Ordering::Acquire);
        if w == 0 {
            Ok(())
        } else {
            Err(self.abort_error(w))
        }
    }

    #[cold]
    fn abort_error(&self, mut w: u32) -> Error {
        // The aborting rank claims the word first and sets the low bit once
        // its reason is written; give it a moment to finish.
        let t0 = Instant::now();
        while w & 1 == 0 && t0.elapsed() < Duration::from_millis(20) {
            std::thread::yield_now();
            w = self.seg.u32_at(OFF_ABORT).load(Ordering::Acquire);
        }
        let rank = ((w >> 1) as usize).saturating_sub(1);
        let reason = if w & 1 == 1 {
            let len =
                (self.seg.u32_at(OFF_ABORT_LEN).load(Ordering::Acquire) as usize).min(REASON_MAX);
            // SAFETY: the reason area is in bounds and no longer written once
            // the ready bit is set (only the first aborter writes it).
            let bytes = unsafe { std::slice::from_raw_parts(self.seg.ptr(OFF_REASON), len) };
            String::from_utf8_lossy(bytes).into_owned()
        } else {
            "(it did not finish writing its reason)".to_owned()
        };
        Error::PeerAborted { rank, reason }
    }

    /// Claims the abort word (unless another rank got there first), writes
    /// `reason` beside it, and wakes every other rank so it sees the word.
    pub(super) fn publish_abort(&self, reason: &str) {
        let word = self.seg.u32_at(OFF_ABORT);
        let claim = ((self.rank as u32) + 1) << 1;
        if word
            .compare_exchange(0, claim, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let mut len = reason.len().min(REASON_MAX);
            while !reason.is_char_boundary(len) {
                len -= 1;
            }
            // SAFETY: the reason area is in bounds, and only the rank that
            // won the claim above writes it, before setting the ready bit.
            unsafe {
                std::ptr::copy_nonoverlapping(reason.as_ptr(), self.seg.ptr(OFF_REASON), len);
            }
            self.seg
                .u32_at(OFF_ABORT_LEN)
                .store(len as u32, Ordering::Release);
            word.fetch_or(1, Ordering::Release);
        }
        for r in (0..self.world).filter(|&r| r != self.rank) {
            let bell = self.bell(r);
            bell.fetch_add(1, Ordering::Release);
            futex::wake_all(bell);
        }
    }
}
