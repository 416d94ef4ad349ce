//! A subset of the ranks seen as a world of its own, so that the algorithms of
//! this folder (which run over "every rank") can run over a node's ranks or
//! over the node leaders: the hierarchical all-reduce is the ring and the tree
//! run on such groups.
//!
//! Messages keep the caller's tag: a group's calls run one after another on
//! each rank, and a pair's messages arrive in the order they were sent, so the
//! phases cannot take each other's bytes.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::transport::{Sink, Tag, Transport, WaitWatch};

/// `members` of the underlying transport, renumbered `0..members.len()` in
/// the order given: group rank `i` is global rank `members[i]`.
pub struct Group<'a> {
    inner: &'a mut dyn Transport,
    members: Vec<usize>,
    me: usize,
}

impl<'a> Group<'a> {
    /// The group of `members` (global ranks, no repeats, each below the world
    /// size), which must include this rank. Anything else is an
    /// [`Error::InvalidArgument`] naming the members: a rank that computed
    /// another rank's group must fail, not wait for messages that never come.
    pub fn new(inner: &'a mut dyn Transport, members: Vec<usize>) -> Result<Group<'a>> {
        let (rank, world) = (inner.rank(), inner.world_size());
        if let Some(bad) = members.iter().find(|&&m| m >= world) {
            return Err(Error::InvalidArgument(format!(
                "group {members:?}: rank {bad} is not a rank of the {world}-rank world"
            )));
        }
        let mut sorted = members.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::InvalidArgument(format!(
                "group {members:?} names a rank twice"
            )));
        }
        let me = members.iter().position(|&m| m == rank).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "group {members:?} does not include this rank ({rank})"
            ))
        })?;
        Ok(Group { inner, members, me })
    }

    /// The global rank of group rank `i`.
    fn global(&self, i: usize) -> Result<usize> {
        self.members.get(i).copied().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "group rank {i} in a group of {} ranks",
                self.members.len()
            ))
        })
    }
}

impl Transport for Group<'_> {
    fn rank(&self) -> usize {
        self.me
    }
    fn world_size(&self) -> usize {
        self.members.len()
    }
    fn exchange(
        &mut self,
        tag: &Tag,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, Sink<'_>)>,
    ) -> Result<()> {
        let send = match send {
            Some((to, data)) => Some((self.global(to)?, data)),
            None => None,
        };
        let recv = match recv {
            Some((from, sink)) => Some((self.global(from)?, sink)),
            None => None,
        };
        self.inner.exchange(tag, send, recv)
    }
    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason)
    }
    fn set_watch(&mut self, watch: Option<Arc<dyn WaitWatch>>) {
        self.inner.set_watch(watch)
    }
}
