//! The self-check of lab 13's stretch goal (`cargo lab check 13 --stretch`):
//! the same test judges your `src/stretch.rs` and, with
//! RINGSIDE_LAB_SOLUTION=1, trainers' own `zero::gather_unit`.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab13_sharded_data_parallel::gather;
use labkit::Variant;

#[test]
fn your_parameter_gather_rebuilds_the_unsharded_model_on_two_to_four_ranks() {
    let variant = Variant::from_env();
    let f: gather::Gather = match variant {
        Variant::Exercise => stretch::gather_unit,
        Variant::Solution => trainers::zero::gather_unit,
    };
    match gather::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
