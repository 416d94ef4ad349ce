//! The self-check of lab 13 (`cargo lab check 13`): the same test judges your
//! gradient path and, with RINGSIDE_LAB_SOLUTION=1, trainers' own.

use labkit::Variant;

#[test]
fn every_zero_stage_trains_like_ddp_with_your_gradient_path() {
    let variant = Variant::from_env();
    match lab13_sharded_data_parallel::check(variant) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
