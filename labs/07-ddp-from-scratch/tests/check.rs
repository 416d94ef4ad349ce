//! The self-check of lab 7 (`cargo lab check 7`): the same tests judge your
//! exercise and, with RINGSIDE_LAB_SOLUTION=1, trainers' own pieces. One test
//! per step, so the report says how far you are.

use lab07_ddp_from_scratch::{Step, check};
use labkit::Variant;

fn step(step: Step) {
    let variant = Variant::from_env();
    match check(variant, step) {
        Ok(said) => println!("{variant}, step {}: {said}", step.label()),
        Err(e) => panic!("{variant}, step {}: {e}", step.label()),
    }
}

#[test]
fn step_1_broadcast_and_one_all_reduce_per_parameter() {
    step(Step::PerParameter);
}

#[test]
fn step_2_buckets() {
    step(Step::Buckets);
}

#[test]
fn step_3_overlap_and_no_sync() {
    step(Step::Overlap);
}
