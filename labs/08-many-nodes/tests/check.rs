//! The self-check of lab 8 (`cargo lab check 8`): the same test judges your
//! exercise and, with RINGSIDE_LAB_SOLUTION=1, torchrun's variables.

use labkit::Variant;

#[test]
fn every_rank_finds_its_place_in_one_and_many_node_jobs() {
    let variant = Variant::from_env();
    let program = std::path::Path::new(env!("CARGO_BIN_EXE_lab08-many-nodes"));
    if let Err(e) = lab08_many_nodes::check(variant, program) {
        panic!("{variant}: {e}");
    }
}
