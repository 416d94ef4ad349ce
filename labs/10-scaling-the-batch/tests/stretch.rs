//! The self-check of lab 10's stretch goal (`cargo lab check 10 --stretch`):
//! the same test judges your `src/stretch.rs` and, with
//! RINGSIDE_LAB_SOLUTION=1, the reference solution (`trainers::lr`).
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab10_scaling_the_batch::{schedule, solution};
use labkit::Variant;

#[test]
fn your_schedule_scales_the_rate_linearly_and_warms_up_from_the_base_rate() {
    let variant = Variant::from_env();
    let f: schedule::LrAt = match variant {
        Variant::Exercise => stretch::lr_at,
        Variant::Solution => solution::lr_at,
    };
    match schedule::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
