//! The self-check of lab 14's stretch goal (`cargo lab check 14 --stretch`):
//! the same test judges your `src/stretch.rs` and, with
//! RINGSIDE_LAB_SOLUTION=1, the reference solution.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab14_tensor_parallel::{column, solution};
use labkit::Variant;

#[test]
fn your_gathered_column_layer_equals_the_unsplit_layer_on_two_to_four_ranks() {
    let variant = Variant::from_env();
    let f: column::ColumnForward = match variant {
        Variant::Exercise => stretch::column_forward,
        Variant::Solution => solution::column_forward,
    };
    match column::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
