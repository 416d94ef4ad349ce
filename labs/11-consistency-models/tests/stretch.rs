//! The self-check of lab 11's stretch goal (`cargo lab check 11 --stretch`):
//! the same test judges your `src/stretch.rs` and, with
//! RINGSIDE_LAB_SOLUTION=1, the rate trainers' asynchronous parameter server
//! uses (`consistency::staleness_aware_lr`).
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab11_consistency_models::stale_rate;
use labkit::Variant;
use trainers::consistency::{StalenessLr, staleness_aware_lr};

#[test]
fn your_rate_shrinks_with_staleness_and_the_server_applies_it() {
    let variant = Variant::from_env();
    let f: StalenessLr = match variant {
        Variant::Exercise => stretch::staleness_lr,
        Variant::Solution => staleness_aware_lr,
    };
    match stale_rate::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
