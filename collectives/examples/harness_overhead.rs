//! How much time the benchmark harness itself adds to every timed iteration.
//!
//! `bench::run` times `barrier; t0; collective; t1`. Everything between t0
//! and t1 that is not the library's work — building the buffer views, the
//! dispatch through `dyn Communicator`, reading the clock twice — lands in
//! the reported time. This runs the harness on a communicator whose
//! collectives return at once, so the times it reports are that overhead and
//! nothing else.
//!
//! `cargo run --release -p collectives --example harness_overhead`

use collectives::bench::{self, Case, Combine, Settings};
use collectives::{
    Backend, Buffer, BufferMut, Collective, Communicator, DType, Input, ReduceOp, Result,
};

/// A one-rank communicator that does nothing.
struct Null;

impl Communicator for Null {
    fn backend(&self) -> Backend {
        Backend::Reference
    }
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn all_reduce(&self, _: Input<'_>, _: &mut BufferMut<'_>, _: ReduceOp) -> Result<()> {
        Ok(())
    }
    fn broadcast(&self, _: Input<'_>, _: &mut BufferMut<'_>, _: usize) -> Result<()> {
        Ok(())
    }
    fn reduce(&self, _: Input<'_>, _: &mut BufferMut<'_>, _: ReduceOp, _: usize) -> Result<()> {
        Ok(())
    }
    fn all_gather(&self, _: Input<'_>, _: &mut BufferMut<'_>) -> Result<()> {
        Ok(())
    }
    fn reduce_scatter(&self, _: Input<'_>, _: &mut BufferMut<'_>, _: ReduceOp) -> Result<()> {
        Ok(())
    }
    fn all_to_all(&self, _: Input<'_>, _: &mut BufferMut<'_>) -> Result<()> {
        Ok(())
    }
    fn gather(&self, _: Input<'_>, _: &mut BufferMut<'_>, _: usize) -> Result<()> {
        Ok(())
    }
    fn scatter(&self, _: Input<'_>, _: &mut BufferMut<'_>, _: usize) -> Result<()> {
        Ok(())
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    fn send(&self, _: &Buffer<'_>, _: usize) -> Result<()> {
        Ok(())
    }
    fn recv(&self, _: &mut BufferMut<'_>, _: usize) -> Result<()> {
        Ok(())
    }
}

fn main() -> Result<()> {
    let settings = Settings {
        warmup: 1000,
        iters: 100_000,
        // The check would compare against real results; a null collective fails it.
        check: false,
        combine: Combine::Max,
    };
    println!(
        "harness time per iteration with a collective that does nothing ({} iterations):",
        settings.iters
    );
    println!(
        "{:>16} {:>9} {:>10} {:>10} {:>10} {:>10}",
        "collective", "form", "min ns", "median ns", "p99 ns", "mean ns"
    );
    let mut worst: f64 = 0.0;
    for collective in [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::Broadcast,
    ] {
        for in_place in [false, true] {
            let case = Case {
                collective,
                dtype: DType::F32,
                op: ReduceOp::Sum,
                root: 0,
                in_place,
                bytes: 1 << 20,
            };
            if let Some(m) = bench::run(&Null, &case, &settings)? {
                worst = worst.max(m.median_us);
                println!(
                    "{:>16} {:>9} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                    collective.name(),
                    if in_place { "in-place" } else { "out" },
                    m.min_us * 1e3,
                    m.median_us * 1e3,
                    m.p99_us * 1e3,
                    m.mean_us * 1e3
                );
            }
        }
    }
    println!(
        "largest median: {:.1} ns = {:.4} us per iteration (target < 1 us): {}",
        worst * 1e3,
        worst,
        if worst < 1.0 { "met" } else { "MISSED" }
    );
    Ok(())
}
