//! The Gloo backend's own cases as real processes: the quick matrix with each
//! all_reduce algorithm besides the default (`RINGSIDE_GLOO_ALGO`). The full
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
/// The classic algorithm objects pass the quick matrix only: with the full
/// one (4 MiB cases), a later collective hangs (see the module docs of
/// `collectives::backends::gloo`).
#[test]
fn classic_ring_chunked_world_3() {
    quick_world_3("ring_chunked");
}
#[test]
fn classic_halving_doubling_world_3() {
    quick_world_3("halving_doubling");
}
