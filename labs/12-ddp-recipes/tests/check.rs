//! The self-check of lab 12 (`cargo lab check 12`): the same test judges your
//! statistics and, with RINGSIDE_LAB_SOLUTION=1, trainers' own.

use labkit::Variant;

#[test]
fn sync_bn_with_your_statistics_trains_like_batch_norm_on_all_the_rows() {
    let variant = Variant::from_env();
    match lab12_ddp_recipes::check(variant) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
