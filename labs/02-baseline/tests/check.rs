//! The self-check of lab 2 (`cargo lab check 2`): the same test judges your
//! exercise and, with RINGSIDE_LAB_SOLUTION=1, the reference solution.

use labkit::Variant;

#[test]
fn your_step_trains_like_the_real_one_from_the_same_seed() {
    let variant = Variant::from_env();
    match lab02_baseline::check(variant) {
        Ok(summary) => eprintln!("{variant}: {summary}"),
        Err(e) => panic!("{variant}: {e:#}"),
    }
}
