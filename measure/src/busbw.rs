//! nccl-tests' bus bandwidth: busbw = algbw × a factor per collective, so
//! that a number comparable to the link's speed comes out whatever the
//! collective (nccl-tests' doc/PERFORMANCE.md).

use crate::Collective;

/// nccl-tests' bus-bandwidth factor for `collective` at `n` ranks
/// (PERFORMANCE.md: how many times each byte of S crosses the slowest link
/// in an optimal algorithm). Zero for a barrier (no payload) and for no ranks.
pub fn busbw_factor(collective: Collective, n: usize) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    match collective {
        Collective::AllReduce => 2.0 * (n - 1.0) / n,
        Collective::ReduceScatter
        | Collective::AllGather
        | Collective::AllToAll
        | Collective::Gather
        | Collective::Scatter => (n - 1.0) / n,
        Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
        Collective::Barrier => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_factors_match_nccl_tests() {
        assert_eq!(busbw_factor(Collective::AllReduce, 2), 1.0);
        assert_eq!(busbw_factor(Collective::AllReduce, 4), 1.5);
        assert_eq!(busbw_factor(Collective::AllGather, 4), 0.75);
        assert_eq!(busbw_factor(Collective::Broadcast, 8), 1.0);
        // PERFORMANCE.md, for every n: allreduce 2(n-1)/n; reducescatter,
        // allgather, alltoall (and gather/scatter in its gather.cu /
        // scatter.cu) (n-1)/n; broadcast, reduce, sendrecv 1.
        for n in 1..=64usize {
            let f = n as f64;
            assert_eq!(busbw_factor(Collective::AllReduce, n), 2.0 * (f - 1.0) / f);
            for c in [
                Collective::ReduceScatter,
                Collective::AllGather,
                Collective::AllToAll,
                Collective::Gather,
                Collective::Scatter,
            ] {
                assert_eq!(busbw_factor(c, n), (f - 1.0) / f, "{c} at {n}");
            }
            for c in [
                Collective::Broadcast,
                Collective::Reduce,
                Collective::SendRecv,
            ] {
                assert_eq!(busbw_factor(c, n), 1.0, "{c} at {n}");
            }
        }
    }
}
