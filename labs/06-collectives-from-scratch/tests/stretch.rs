//! The self-check of lab 6's stretch goal (`cargo lab check 6 --stretch`): the
//! same test judges your `src/stretch.rs` and, with RINGSIDE_LAB_SOLUTION=1, the
//! reference solution.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab06_collectives_from_scratch::{bidirectional, solution};
use labkit::Variant;

#[test]
fn your_bidirectional_ring_sums_like_the_reference_and_uses_both_directions() {
    let variant = Variant::from_env();
    let f: bidirectional::AllReduce = match variant {
        Variant::Exercise => stretch::all_reduce,
        Variant::Solution => solution::all_reduce,
    };
    match bidirectional::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
