//! The self-check of lab 1's stretch goal (`cargo lab check 1 --stretch`): the
//! same test judges your `src/stretch.rs` and, with RINGSIDE_LAB_SOLUTION=1,
//! the reference solution (`collectives::bench::time`).
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab01_first_allreduce::{solution, timing};
use labkit::Variant;

#[test]
fn your_timing_reports_the_slowest_ranks_median_after_the_warm_up() {
    let variant = Variant::from_env();
    let f: timing::TimeCollective = match variant {
        Variant::Exercise => stretch::time_collective,
        Variant::Solution => solution::time_collective,
    };
    match timing::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
