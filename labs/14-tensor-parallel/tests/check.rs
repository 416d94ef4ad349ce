//! The self-check of lab 14 (`cargo lab check 14`): the same test judges your
//! row-parallel forward and, with RINGSIDE_LAB_SOLUTION=1, trainers' own.

use labkit::Variant;

#[test]
fn the_split_mlp_trains_like_the_unsplit_one_with_one_all_reduce_each_way() {
    let variant = Variant::from_env();
    match lab14_tensor_parallel::check(variant) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
