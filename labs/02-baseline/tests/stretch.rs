//! The self-check of lab 2's stretch goal (`cargo lab check 2 --stretch`): the
//! same test judges your `src/stretch.rs` and, with RINGSIDE_LAB_SOLUTION=1,
//! the reference solution.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab02_baseline::{evaluation, solution};
use labkit::Variant;

#[test]
fn your_evaluation_counts_every_example_once_in_eval_mode() {
    let variant = Variant::from_env();
    let f: evaluation::Evaluate = match variant {
        Variant::Exercise => stretch::evaluate,
        Variant::Solution => solution::evaluate,
    };
    match evaluation::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
