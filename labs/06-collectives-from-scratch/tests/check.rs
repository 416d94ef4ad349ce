//! The self-check of lab 6 (`cargo lab check 6`): the same test judges your
//! exercise and, with RINGSIDE_LAB_SOLUTION=1, the reference solution.

use labkit::Variant;

#[test]
fn your_ring_and_tree_pass_the_conformance_suite_on_one_to_five_ranks() {
    let variant = Variant::from_env();
    match lab06_collectives_from_scratch::check(variant) {
        Ok(cases) => println!("{variant}: {cases} conformance cases passed on 1 to 5 ranks"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
