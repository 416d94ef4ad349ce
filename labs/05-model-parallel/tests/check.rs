//! The self-check of lab 5 (`cargo lab check 5`): the same test judges your
//! exercise and, with RINGSIDE_LAB_SOLUTION=1, the reference solution.

use labkit::Variant;

#[test]
fn both_schedules_idle_as_predicted_and_train_like_the_unsplit_model() {
    let variant = Variant::from_env();
    if let Err(e) = lab05_model_parallel::check(variant) {
        panic!("{variant}: {e}");
    }
}
