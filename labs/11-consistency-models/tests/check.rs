//! The self-check of lab 11 (`cargo lab check 11`): the same test judges your
//! staleness bound and, with RINGSIDE_LAB_SOLUTION=1, trainers' own.

use labkit::Variant;

#[test]
fn no_worker_runs_more_than_s_ahead_and_s_zero_is_synchronous() {
    let variant = Variant::from_env();
    match lab11_consistency_models::check(variant) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
