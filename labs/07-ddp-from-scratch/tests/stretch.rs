//! The self-check of lab 7's stretch goal (`cargo lab check 7 --stretch`):
//! the same test judges your `src/stretch.rs` and, with
//! RINGSIDE_LAB_SOLUTION=1, trainers' own `bucket::assign`, the one `Ddp`
//! calls when it wraps a model.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab07_ddp_from_scratch::buckets;
use labkit::Variant;

#[test]
fn your_buckets_are_pytorchs_on_the_cnn_and_on_models_that_tell_mistakes_apart() {
    let variant = Variant::from_env();
    let f: buckets::Assign = match variant {
        Variant::Exercise => stretch::assign,
        Variant::Solution => trainers::bucket::assign::<buckets::Key>,
    };
    match buckets::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
