//! The full conformance matrix with ranks as real processes: one generated
//! test per backend × transport × world, as ripgrep's `rgtest!` runs each
//! test on every engine. The reference backend runs at worlds 1 to 5
//! (non-powers-of-two included) on each transport; Gloo (ranks spawned by
//! ringside) and MPI (ranks started by `mpirun`) at worlds 1 to 3, over their
//! own transports. Their extra cases (Gloo's algorithms, MPI without
//! `MPI_IN_PLACE`, the singleton) are in `gloo.rs` and `mpi.rs`.
//!
//! A row is `backend(launch, turns): transport, ... @ [worlds];`; each
//! (backend, transport) becomes a module `backend::transport` with one test per
//! world, e.g. `reference::shm::world_3`, `mpi::auto::world_2`.
//!
//! The binary must be built with the `gloo` and `mpi` features (the default):
//! a ringside without them fails these tests rather than skipping them, and
//! `mpirun` comes with the project's set-up (openmpi-bin).

mod common;

/// One test per world size for one (backend, transport).
macro_rules! worlds {
    ($backend:ident, $transport:ident, $launch:ident, $turns:ident;
     [$($name:ident = $world:literal),+]) => {
        $(
            #[test]
            fn $name() {
                crate::common::conformance::Job::full(
                    stringify!($backend),
                    stringify!($transport),
                    $world,
                    crate::common::conformance::Launch::$launch,
                    crate::common::conformance::Turns::$turns,
                )
                .passes();
            }
        )+
    };
}

/// The matrix: backends × transports × worlds.
macro_rules! matrix {
    ($($backend:ident($launch:ident, $turns:ident): $($transport:ident),+ @ $worlds:tt;)+) => {
        $(
            mod $backend {
                $(
                    mod $transport {
                        worlds!($backend, $transport, $launch, $turns; $worlds);
                    }
                )+
            }
        )+
    };
}

matrix! {
    reference(Ringside, Together): tcp, shm
        @ [world_1 = 1, world_2 = 2, world_3 = 3, world_4 = 4, world_5 = 5];
    gloo(Ringside, InTurn): auto @ [world_1 = 1, world_2 = 2, world_3 = 3];
    mpi(Mpirun, InTurn): auto @ [world_1 = 1, world_2 = 2, world_3 = 3];
}
