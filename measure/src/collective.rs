//! The collectives' names (their bus-bandwidth factors are in [`crate::busbw`]): the facts
//! about a collective that a reader of results needs without running one.
//! (How to run, size and check each one is in `collectives::collective`.)

use std::fmt;

use serde::{Deserialize, Serialize};

/// The operations a communicator offers, as named in headers, errors,
/// benchmarks and results files.
///
/// The discriminants are the one-byte codes of the reference backend's wire
/// headers ([`Collective::code`]): do not reorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// Everyone gets the reduction of everyone's input.
    AllReduce = 0,
    /// Everyone gets the root's input.
    Broadcast = 1,
    /// The root gets the reduction of everyone's input.
    Reduce = 2,
    /// Everyone gets everyone's input, concatenated in rank order.
    AllGather = 3,
    /// Rank r gets block r of the reduction.
    ReduceScatter = 4,
    /// Rank r's block j goes to rank j's block r.
    AllToAll = 5,
    /// The root gets everyone's input, concatenated in rank order.
    Gather = 6,
    /// Rank r gets block r of the root's input.
    Scatter = 7,
    /// Nobody leaves until everyone has arrived.
    Barrier = 8,
    /// Point-to-point send/recv.
    SendRecv = 9,
}

impl Collective {
    /// Every collective, in code order (the order suites and reports list them).
    pub const ALL: [Collective; 10] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Gather,
        Collective::Scatter,
        Collective::Barrier,
        Collective::SendRecv,
    ];

    /// The name in tables and errors: snake_case, but nccl-tests' `sendrecv`.
    pub const fn name(self) -> &'static str {
        match self {
            Collective::SendRecv => "sendrecv",
            c => c.key(),
        }
    }

    /// The name in results files, chart file names and the torch peer's
    /// flags: snake_case throughout (`send_recv`).
    pub const fn key(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "all_to_all",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::Barrier => "barrier",
            Collective::SendRecv => "send_recv",
        }
    }

    /// A stable one-byte code for wire headers.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Inverse of [`Collective::code`].
    pub fn from_code(code: u8) -> Option<Collective> {
        Collective::ALL.get(code as usize).copied()
    }

    /// Either name, any case, `-` or `_` or neither between words
    /// (`allreduce`, `all-reduce`, `sendrecv`, `send_recv`).
    pub fn parse(s: &str) -> Option<Collective> {
        let squash = |s: &str| s.trim().to_ascii_lowercase().replace(['-', '_'], "");
        let want = squash(s);
        Collective::ALL
            .into_iter()
            .find(|c| squash(c.key()) == want)
    }

    /// nccl-tests' bus-bandwidth factor at `world` ranks ([`crate::busbw_factor`]).
    pub fn bus_factor(self, world: usize) -> f64 {
        crate::busbw_factor(self, world)
    }

    /// The factor f used in the α–β model t = α + β·S·f: the bus factor, or 1
    /// where that is 0 (barrier, one rank), so that β still means "time per
    /// byte" instead of the model losing its size term.
    pub fn model_factor(self, world: usize) -> f64 {
        let f = self.bus_factor(world);
        if f > 0.0 { f } else { 1.0 }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(Collective::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Collective::AllGather.bus_factor(4), 0.75);
        assert_eq!(Collective::Broadcast.bus_factor(4), 1.0);
        assert_eq!(Collective::Barrier.bus_factor(4), 0.0);
        assert_eq!(Collective::Barrier.model_factor(4), 1.0);
        // One rank: all_reduce moves nothing, the model still needs a size term.
        assert_eq!(Collective::AllReduce.bus_factor(1), 0.0);
        assert_eq!(Collective::AllReduce.model_factor(1), 1.0);
        for c in Collective::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.key()));
        }
    }

    #[test]
    fn names_codes_and_parsing() {
        assert_eq!(Collective::SendRecv.name(), "sendrecv");
        assert_eq!(Collective::SendRecv.key(), "send_recv");
        assert_eq!(Collective::AllReduce.to_string(), "all_reduce");
        for c in Collective::ALL {
            assert_eq!(Collective::from_code(c.code()), Some(c));
            assert_eq!(Collective::parse(c.name()), Some(c));
            assert_eq!(Collective::parse(c.key()), Some(c));
        }
        assert_eq!(Collective::parse("AllReduce"), Some(Collective::AllReduce));
        assert_eq!(Collective::parse("all-gather"), Some(Collective::AllGather));
        assert_eq!(Collective::parse("allreduce2"), None);
    }
}
