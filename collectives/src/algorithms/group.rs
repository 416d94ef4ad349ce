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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::send_log::{SendLog, tag};

    #[test]
    fn group_ranks_map_to_the_members_in_the_order_given() {
        let mut t = SendLog::new(2, 4);
        {
            let mut g = Group::new(&mut t, vec![3, 2, 0]).unwrap();
            assert_eq!((g.rank(), g.world_size()), (1, 3));
            g.exchange(&tag(1), Some((0, &[1])), None).unwrap();
            g.exchange(&tag(1), Some((2, &[1])), None).unwrap();
            let e = g.exchange(&tag(1), Some((3, &[1])), None).unwrap_err();
            assert!(
                e.to_string().contains("group rank 3 in a group of 3"),
                "{e}"
            );
        }
        assert_eq!(t.peers(), vec![3, 0]);
    }

    /// The hierarchical all-reduce's leaders' group built on a rank that is
    /// not a leader must fail at once, not wait.
    #[test]
    fn a_group_without_this_rank_or_with_bad_members_is_an_error() {
        let mut t = SendLog::new(2, 4);
        for (members, says) in [
            (vec![0, 1], "does not include this rank (2)"),
            (vec![2, 2], "names a rank twice"),
            (vec![2, 4], "rank 4 is not a rank of the 4-rank world"),
        ] {
            let e = Group::new(&mut t, members).err().unwrap().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
