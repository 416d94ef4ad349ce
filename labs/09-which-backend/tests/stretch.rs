//! The self-check of lab 9's stretch goal (`cargo lab check 9 --stretch`):
//! the same test judges your `src/stretch.rs` and, with
//! RINGSIDE_LAB_SOLUTION=1, the report's own fit and crossover
//! (`reports::fit_alpha_beta`, `reports::predict_crossover`).
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab09_which_backend::crossover::{self, Predictor};
use labkit::Variant;

#[test]
fn your_fit_predicts_where_two_backends_cross() {
    let variant = Variant::from_env();
    let p = match variant {
        Variant::Exercise => Predictor {
            fit: stretch::fit_line,
            crossover: stretch::predict_crossover,
        },
        Variant::Solution => crossover::solution(),
    };
    match crossover::check(p) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
