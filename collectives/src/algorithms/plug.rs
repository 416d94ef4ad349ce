//! A slot for all_reduce and broadcast algorithms written outside this crate,
//! run *inside* the reference backend: the workshop's lab 6 plugs a learner's
//! ring and tree in here, so the same validation, agreement round, abort on
//! error and conformance suite judge them as judge the backend's own.
//!
//! [`Builtin`] is what the reference backend itself runs for `--algo ring`
//! and for every broadcast: the ring of [`super::ring`] and the binomial tree
//! of [`super::tree`].

use std::sync::Arc;
use std::time::Duration;

use super::{TaggedTransport, ring, tree};
use crate::Collective;
use crate::conformance::{self, Size, SuiteConfig, SuiteReport};
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::thread_ranks;
use crate::transport::TransportKind;

// ANCHOR: plug
/// all_reduce and broadcast over the backend's tagged transport, in place on
/// host bytes. The backend has already checked the buffers, run the agreement
/// round (every rank called the same collective with the same shape) and copied
/// an out-of-place input into `buf`; afterwards it divides for `Avg` (pass `op`
/// to [`crate::transport::Sink::Reduce`] as it is: `Avg` adds).
pub trait Plug: Send + Sync {
    /// A name for charts and messages (`your ring`).
    fn name(&self) -> &str;
    /// Leaves the reduction of every rank's `buf` in every rank's `buf`.
    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// Copies `root`'s `buf` into every rank's `buf`.
    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()>;
}
// ANCHOR_END: plug

/// The reference backend's own: ring all_reduce, binomial-tree broadcast.
#[derive(Clone, Copy, Debug, Default)]
pub struct Builtin;

impl Plug for Builtin {
    fn name(&self) -> &str {
        "reference ring + tree"
    }
    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        ring::all_reduce(p, buf, dtype, op)
    }
    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
        tree::broadcast(p, buf, root)
    }
}

/// What [`check`] covers: all_reduce and broadcast, every dtype and op, sizes
/// that divide unevenly into per-rank blocks (1, 7, world·37+1, 64 KiB and
/// 0), out of place and in place, every rank a root somewhere.
pub fn check_config() -> SuiteConfig {
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

/// Runs the conformance suite ([`check_config`]) on `plug` at each world size
/// in `worlds` (threads over shared memory, every wait bounded by `timeout`).
/// Returns the first failing world's report with its size, or the total.
pub fn check(
    plug: Arc<dyn Plug>,
    worlds: impl IntoIterator<Item = usize>,
    timeout: Duration,
) -> Result<std::result::Result<usize, (usize, SuiteReport)>> {
    let cfg = check_config();
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
