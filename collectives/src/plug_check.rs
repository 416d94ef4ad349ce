//! The check a plugged algorithm must pass before the workshop trusts it: the
//! conformance suite's all_reduce and broadcast cases, run through the
//! reference backend with the [`Plug`] in its slot, on thread ranks over
//! shared memory. Lab 6's self-check and `cargo lab 6` call it.
//!
//! It lives apart from [`crate::algorithms::plug`] because it needs thread
//! ranks, which need the reference backend, which holds the plug slot.

use std::sync::Arc;
use std::time::Duration;

use crate::Collective;
use crate::algorithms::plug::Plug;
use crate::conformance::{self, Size, SuiteConfig, SuiteReport};
use crate::error::Result;
use crate::thread_ranks;
use crate::transport::TransportKind;

/// What [`check`] covers: all_reduce and broadcast, every dtype and op, sizes
/// that divide unevenly into per-rank blocks (1, 7, world·37+1, 64 KiB and
/// 0), out of place and in place, every rank a root somewhere.
pub fn config() -> SuiteConfig {
    SuiteConfig {
        collectives: vec![Collective::AllReduce, Collective::Broadcast],
        sizes: vec![
            Size::Count(0),
            Size::Count(1),
            Size::Count(7),
            Size::WorldTimes(37),
            Size::Bytes(64 << 10),
        ],
        ..SuiteConfig::full()
    }
}

/// Runs the conformance suite ([`config`]) on `plug` at each world size
/// in `worlds` (threads over shared memory, every wait bounded by `timeout`).
/// Returns the first failing world's report with its size, or the total.
pub fn check(
    plug: Arc<dyn Plug>,
    worlds: impl IntoIterator<Item = usize>,
    timeout: Duration,
) -> Result<std::result::Result<usize, (usize, SuiteReport)>> {
    let cfg = config();
    let mut cases = 0;
    for world in worlds {
        let reports = thread_ranks::with_ranks(world, TransportKind::Shm, timeout, |_, comm| {
            comm.plug(Some(plug.clone()));
            conformance::run(&comm, &cfg, |_, _| ())
        })?;
        for report in reports {
            let report = report?;
            if !report.failures.is_empty() {
                return Ok(Err((world, report)));
            }
            cases += report.cases;
        }
    }
    Ok(Ok(cases))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::plug::Builtin;
    use crate::algorithms::{TaggedTransport, tree};
    use crate::element::{DType, ReduceOp};
    use crate::transport::Sink;

    /// The built-in pair passes the check at worlds 1 to 5.
    #[test]
    fn builtin_passes_the_plug_check_at_one_to_five_ranks() {
        let cases = check(Arc::new(Builtin), 1..=5, Duration::from_secs(60))
            .unwrap()
            .unwrap_or_else(|(w, r)| panic!("world {w}: {:?}", r.failures));
        assert!(cases > 100, "{cases}");
    }

    /// A plug that reduces with its left neighbour only: right at 2 ranks,
    /// wrong from 3 on. The backend must really route calls through the plug
    /// (if it ran its own ring, this would pass).
    struct LeftOnly;
    impl Plug for LeftOnly {
        fn name(&self) -> &str {
            "left only"
        }
        fn all_reduce(
            &self,
            p: &mut TaggedTransport<'_>,
            buf: &mut [u8],
            dtype: DType,
            op: ReduceOp,
        ) -> Result<()> {
            let (r, n) = (p.rank(), p.world());
            let copy = buf.to_vec();
            p.sendrecv(
                (r + 1) % n,
                &copy,
                (r + n - 1) % n,
                Sink::Reduce {
                    dst: buf,
                    dtype,
                    op,
                },
            )
        }
        fn broadcast(
            &self,
            p: &mut TaggedTransport<'_>,
            buf: &mut [u8],
            root: usize,
        ) -> Result<()> {
            tree::broadcast(p, buf, root)
        }
    }

    #[test]
    fn a_wrong_plugged_all_reduce_fails_the_check_from_three_ranks() {
        let timeout = Duration::from_secs(60);
        assert!(check(Arc::new(LeftOnly), [2], timeout).unwrap().is_ok());
        let (world, report) = check(Arc::new(LeftOnly), [3], timeout)
            .unwrap()
            .expect_err("a wrong all_reduce passed");
        assert_eq!(world, 3);
        assert!(
            report.failures.iter().all(|f| f.contains("all_reduce")),
            "{:?}",
            report.failures
        );
    }
}
