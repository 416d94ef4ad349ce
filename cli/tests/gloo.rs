//! The Gloo backend's own cases as real processes: the quick matrix with each
//! options-style all_reduce algorithm besides the default, the full one with
//! each classic algorithm object (`RINGSIDE_GLOO_ALGO`). The full
//! matrix at worlds 1-3 with Gloo's default is a row of `conformance.rs`.
//!
//! The binary must be built with the `gloo` feature (`--features
//! collectives/gloo`): a ringside without it fails these tests rather than
//! skipping them.

mod common;

use common::conformance::{Job, Launch, Turns};

/// The quick suite on 3 ranks with Gloo's all_reduce algorithm `algo`.
fn quick_world_3(algo: &str) {
    Job {
        quick: true,
        env: &[("RINGSIDE_GLOO_ALGO", algo)],
        ..Job::full("gloo", "auto", 3, Launch::Ringside, Turns::InTurn)
    }
    .passes();
}

#[test]
fn ring_world_3() {
    quick_world_3("ring");
}
#[test]
fn bcube_world_3() {
    quick_world_3("bcube");
}
/// The full suite on 3 ranks with Gloo's classic all_reduce object `algo`.
fn full_world_3(algo: &str) {
    Job {
        env: &[("RINGSIDE_GLOO_ALGO", algo)],
        ..Job::full("gloo", "auto", 3, Launch::Ringside, Turns::InTurn)
    }
    .passes();
}

/// Regression: with the classic algorithm objects the full matrix hung in a
/// later collective after the 4 MiB cases, and some sizes took 44 ms a call,
/// until Gloo's send buffers were kept from shrinking to its first small
/// messages (`collectives/src/backends/gloo/socket_options.rs`).
#[test]
fn classic_ring_chunked_full_matrix_world_3_no_longer_hangs() {
    full_world_3("ring_chunked");
}
#[test]
fn classic_halving_doubling_full_matrix_world_3_no_longer_hangs() {
    full_world_3("halving_doubling");
}
