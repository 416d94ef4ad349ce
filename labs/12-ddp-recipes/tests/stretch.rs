//! The self-check of lab 12's stretch goal (`cargo lab check 12 --stretch`):
//! the same test judges your `src/stretch.rs` and, with
//! RINGSIDE_LAB_SOLUTION=1, trainers' own `sync_bn::update_running`, the one
//! its SyncBatchNorm calls every training step.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab12_ddp_recipes::running;
use labkit::Variant;

#[test]
fn your_running_statistics_are_pytorchs_under_syncbn_on_two_and_three_ranks() {
    let variant = Variant::from_env();
    let f: running::Update = match variant {
        Variant::Exercise => stretch::update_running,
        Variant::Solution => trainers::sync_bn::update_running,
    };
    match running::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
