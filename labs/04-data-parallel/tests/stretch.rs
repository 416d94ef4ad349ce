//! The self-check of lab 4's stretch goal (`cargo lab check 4 --stretch`): the
//! same test judges your `src/stretch.rs` and, with RINGSIDE_LAB_SOLUTION=1,
//! the reference solution.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab04_data_parallel::{accumulate, solution};
use labkit::Variant;

#[test]
fn your_accumulated_step_is_the_whole_batch_step() {
    let variant = Variant::from_env();
    let f: accumulate::AccumulatedStep = match variant {
        Variant::Exercise => stretch::accumulated_step,
        Variant::Solution => solution::accumulated_step,
    };
    match accumulate::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
