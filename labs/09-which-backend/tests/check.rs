//! The self-check of lab 9 (`cargo lab check 9`): the same test judges your
//! guesses and, with RINGSIDE_LAB_SOLUTION=1, the course's rule of thumb.

use labkit::Variant;

#[test]
fn every_row_has_a_guess_with_a_reason() {
    let variant = Variant::from_env();
    match lab09_which_backend::check(variant) {
        Ok(said) => println!("{variant}:\n{said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
