//! A test double: a transport that completes every exchange at once and logs
//! the sends it was asked to make, for tests of transports that wrap another.

use super::{Sink, Tag, Transport};
use crate::Collective;
use crate::element::DType;
use crate::error::Result;

/// Rank `rank` of `world`; `sent` holds each send's (peer, bytes).
pub(crate) struct SendLog {
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) sent: Vec<(usize, usize)>,
}

impl SendLog {
    pub(crate) fn new(rank: usize, world: usize) -> SendLog {
        SendLog {
            rank,
            world,
            sent: Vec::new(),
        }
    }

    /// The peers sent to, in order.
    pub(crate) fn peers(&self) -> Vec<usize> {
        self.sent.iter().map(|&(to, _)| to).collect()
    }
}

impl Transport for SendLog {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn exchange(
        &mut self,
        _: &Tag,
        send: Option<(usize, &[u8])>,
        _: Option<(usize, Sink<'_>)>,
    ) -> Result<()> {
        if let Some((to, data)) = send {
            self.sent.push((to, data.len()));
        }
        Ok(())
    }
    fn abort(&mut self, _: &str) {}
}

/// The tag of an all_reduce of `count` f32s, call 1.
pub(crate) fn tag(count: u64) -> Tag {
    Tag {
        collective: Collective::AllReduce,
        seq: 1,
        dtype: DType::F32,
        op: 0,
        root: 0,
        count,
    }
}
