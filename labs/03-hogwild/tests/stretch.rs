//! The self-check of lab 3's stretch goal (`cargo lab check 3 --stretch`): the
//! same test judges your `src/stretch.rs` and, with RINGSIDE_LAB_SOLUTION=1,
//! trainers' own `hogwild::push_delta`, which the Hogwild workers call with
//! `--local-steps`.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab03_hogwild::delta;
use labkit::Variant;

#[test]
fn your_delta_push_adds_every_workers_delta_once() {
    let variant = Variant::from_env();
    let f: delta::PushDelta = match variant {
        Variant::Exercise => stretch::push_delta,
        Variant::Solution => trainers::hogwild::push_delta,
    };
    match delta::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
