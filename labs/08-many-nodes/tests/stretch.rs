//! The self-check of lab 8's stretch goal (`cargo lab check 8 --stretch`): the
//! same test judges your `src/stretch.rs` and, with RINGSIDE_LAB_SOLUTION=1,
//! the reference backend's own `--algo hierarchical`.
//!
//! Your file is compiled here, by path, and nowhere else: the main check and
//! the lab's program never build it, so a half-written stretch goal cannot
//! break them.

#[path = "../src/stretch.rs"]
mod stretch;

use lab08_many_nodes::hierarchical;
use labkit::Variant;

#[test]
fn your_hierarchical_all_reduce_sums_exactly_with_fewer_bytes_across_nodes() {
    let variant = Variant::from_env();
    let f: hierarchical::AllReduce = match variant {
        Variant::Exercise => stretch::all_reduce,
        Variant::Solution => collectives::algorithms::hierarchical::all_reduce,
    };
    match hierarchical::check(f) {
        Ok(said) => println!("{variant}: {said}"),
        Err(e) => panic!("{variant}: {e}"),
    }
}
