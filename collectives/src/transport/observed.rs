//! A transport that tells an observer about every message it sends, then sends
//! it: how a check counts what an algorithm moves, and to whom, without
//! touching the algorithm (the workshop's lab 6 counts the bytes a learner's
//! ring sends each way, lab 8 the bytes that cross a node boundary).

use std::sync::Arc;

use super::{Sink, Tag, Transport, WaitWatch};
use crate::error::Result;

/// `inner`, with `on_send(to, bytes)` called for each message before it goes.
pub struct Observed<'a, F> {
    inner: &'a mut dyn Transport,
    on_send: F,
}

impl<'a, F: FnMut(usize, usize) + Send> Observed<'a, F> {
    /// Wraps `inner`; `on_send` hears of every send (peer, length in bytes).
    pub fn new(inner: &'a mut dyn Transport, on_send: F) -> Self {
        Self { inner, on_send }
    }
}

impl<F: FnMut(usize, usize) + Send> Transport for Observed<'_, F> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn exchange(
        &mut self,
        tag: &Tag,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, Sink<'_>)>,
    ) -> Result<()> {
        if let Some((to, data)) = send {
            (self.on_send)(to, data.len());
        }
        self.inner.exchange(tag, send, recv)
    }
    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason)
    }
    fn set_watch(&mut self, watch: Option<Arc<dyn WaitWatch>>) {
        self.inner.set_watch(watch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::send_log::{SendLog, tag};

    #[test]
    fn every_send_is_observed_once_and_still_sent() {
        let tag = tag(2);
        let mut inner = SendLog::new(0, 3);
        let mut seen = Vec::new();
        {
            let mut t = Observed::new(&mut inner, |to, bytes| seen.push((to, bytes)));
            assert_eq!((t.rank(), t.world_size()), (0, 3));
            t.exchange(&tag, Some((1, &[0; 8])), None).unwrap();
            let mut into = [0u8; 4];
            t.exchange(&tag, None, Some((2, Sink::Copy(&mut into))))
                .unwrap();
            t.exchange(&tag, Some((2, &[0; 3])), Some((1, Sink::Copy(&mut into))))
                .unwrap();
        }
        assert_eq!(seen, [(1, 8), (2, 3)], "receives are not sends");
        assert_eq!(inner.sent, seen, "what was observed was sent, as it was");
    }
}
