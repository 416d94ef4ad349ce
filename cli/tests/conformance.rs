//! The full conformance matrix with ranks as real processes: one generated
//! test per backend × transport × world, as ripgrep's `rgtest!` runs each
//! test on every engine. World sizes 1 to 5 include non-powers-of-two.
//!
//! A row is `backend: transport, ...;`; each (backend, transport) becomes a
//! module `backend::transport` with one test per world, e.g.
//! `reference::shm::world_3`.

use std::process::Command;

const RINGSIDE: &str = env!("CARGO_BIN_EXE_ringside");

/// Runs `ringside conformance` (the full matrix) on `world` local ranks and
/// asserts every rank reports every case and no failure.
fn full_matrix(backend: &str, transport: &str, world: usize) {
    let out = Command::new(RINGSIDE)
        .args([
            "conformance",
            "--nproc",
            &world.to_string(),
            "--backend",
            backend,
            "--transport",
            transport,
            "--timeout",
            "60",
        ])
        .env_remove("RINGSIDE_JOB_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{backend} world {world} over {transport} failed:\n{stdout}\n{stderr}"
    );
    let ok_ranks = stdout
        .lines()
        .filter(|l| {
            l.contains(&format!(
                "/{world}: {backend} backend ({transport} transport"
            )) && l.ends_with(" 0 failed")
        })
        .count();
    assert_eq!(
        ok_ranks, world,
        "every rank must report 0 failures:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1723 cases"),
        "the full matrix must run:\n{stdout}"
    );
}

/// One test per world size for one (backend, transport).
macro_rules! worlds {
    ($backend:expr, $transport:expr; $($name:ident = $world:literal),*) => {
        $(
            #[test]
            fn $name() {
                super::super::full_matrix($backend, $transport, $world);
            }
        )*
    };
}

/// The matrix: backends × transports, each at worlds 1 to 5.
macro_rules! matrix {
    ($($backend:ident: $($transport:ident),+;)+) => {
        $(
            mod $backend {
                $(
                    mod $transport {
                        worlds!(
                            stringify!($backend), stringify!($transport);
                            world_1 = 1, world_2 = 2, world_3 = 3, world_4 = 4, world_5 = 5
                        );
                    }
                )+
            }
        )+
    };
}

matrix! {
    reference: tcp, shm;
}
