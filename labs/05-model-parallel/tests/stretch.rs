//! The self-check of lab 5's stretch goal (`cargo lab check 5 --stretch`): the
//! same test judges your `src/stretch.rs` and, with RINGSIDE_LAB_SOLUTION=1,
//! trainers' own `pipeline::OneFOneB`.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab05_model_parallel::one_f_one_b;
use labkit::Variant;

#[test]
fn your_1f1b_idles_like_gpipe_holds_at_most_s_minus_s_and_trains_like_the_unsplit_model() {
    let variant = Variant::from_env();
    let f: lab05_model_parallel::ActionsFn = match variant {
        Variant::Exercise => stretch::one_f_one_b,
        Variant::Solution => one_f_one_b::trainers_1f1b,
    };
    match one_f_one_b::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
