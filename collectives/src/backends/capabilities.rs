//! What each backend can do, asked before connecting: which all_reduce
//! algorithms it runs, which launchers its ranks may come from, which memory
//! it reduces in place. Callers (the bench, the tour, the trainers) ask here
//! instead of knowing the backends' habits themselves.

use crate::Backend;
use crate::algorithms::Algo;
use crate::buffer::Location;
use crate::rendezvous::env::Launcher;

impl Backend {
    /// The all_reduce algorithms `--algo` selects on this backend (`Auto`
    /// first); empty when the library picks its own (MPI, NCCL).
    ///
    /// Gloo runs `Auto` (Gloo's own choice), ring, ring-chunked,
    /// halving-doubling and bcube; it treats the reference-only names as
    /// `Auto`, so one `--algo` can sweep several backends.
    pub const fn algorithms(self) -> &'static [Algo] {
        match self {
            Backend::Reference => &[
                Algo::Auto,
                Algo::Ring,
                Algo::HalvingDoubling,
                Algo::RecursiveDoubling,
                Algo::Tree,
                Algo::Hierarchical,
            ],
            Backend::Gloo => &[
                Algo::Auto,
                Algo::Ring,
                Algo::RingChunked,
                Algo::HalvingDoubling,
                Algo::Bcube,
            ],
            Backend::Mpi | Backend::Nccl => &[],
        }
    }

    /// Whether `--algo` means anything to this backend.
    pub const fn takes_algo(self) -> bool {
        !self.algorithms().is_empty()
    }

    /// Whether this backend's ranks must come from a launcher of its own:
    /// MPI's do (ranks spawned by anyone else would each start as an MPI
    /// world of one).
    pub const fn needs_launcher(self) -> bool {
        matches!(self, Backend::Mpi)
    }

    /// Why ranks started by `launcher` cannot use this backend (to be
    /// followed by an example command), or `None` when they can.
    pub fn launcher_problem(self, launcher: Launcher) -> Option<&'static str> {
        let mpi_launched = matches!(
            launcher,
            Launcher::OpenMpi | Launcher::Pmi | Launcher::Slurm
        );
        (self.needs_launcher() && !mpi_launched).then_some("needs an MPI launcher")
    }

    /// Whether this backend reduces memory at `location` in place. Only NCCL
    /// reaches CUDA memory; the others refuse device buffers, so tensors for
    /// them must be staged through the host. (NCCL also takes host buffers,
    /// staging them through the device itself.)
    pub const fn supports(self, location: Location) -> bool {
        match location {
            Location::Host => true,
            Location::Cuda { .. } => matches!(self, Backend::Nccl),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reference_and_gloo_take_algo() {
        let takes: Vec<Backend> = Backend::ALL
            .into_iter()
            .filter(|b| b.takes_algo())
            .collect();
        assert_eq!(takes, [Backend::Reference, Backend::Gloo]);
        for b in [Backend::Reference, Backend::Gloo] {
            assert_eq!(b.algorithms()[0], Algo::Auto);
        }
        assert!(!Backend::Reference.algorithms().contains(&Algo::Bcube));
        assert!(Backend::Gloo.algorithms().contains(&Algo::RingChunked));
    }

    #[test]
    fn mpi_needs_an_mpi_launcher() {
        for l in [Launcher::OpenMpi, Launcher::Pmi, Launcher::Slurm] {
            assert_eq!(Backend::Mpi.launcher_problem(l), None);
        }
        for l in [Launcher::Ringside, Launcher::Torchrun, Launcher::Single] {
            assert_eq!(
                Backend::Mpi.launcher_problem(l),
                Some("needs an MPI launcher")
            );
            assert_eq!(Backend::Gloo.launcher_problem(l), None);
        }
    }

    #[test]
    fn only_nccl_reduces_device_memory() {
        let cuda = Location::Cuda { device: 0 };
        for b in Backend::ALL {
            assert!(b.supports(Location::Host));
            assert_eq!(b.supports(cuda), b == Backend::Nccl);
        }
    }
}
