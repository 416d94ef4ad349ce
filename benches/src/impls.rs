//! What the runner can launch, by name: each [`Impl`] is one implementation
//! of all_reduce (a library called directly, or ringside with a backend and
//! transport), named as the `label` of its records.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// One all_reduce implementation the `peers` runner knows how to launch
/// (flag `--impl`; its name is the `label` of its records, as a backend's
/// is in `ringside bench`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Impl {
    /// OpenMPI `MPI_Allreduce` via `mpirun`, shared-memory BTL (vader).
    Mpi,
    /// `gloo::AllreduceRing` over Gloo's TCP transport.
    GlooRing,
    /// `gloo::AllreduceRingChunked` over TCP.
    GlooRingChunked,
    /// `gloo::AllreduceHalvingDoubling` over TCP.
    GlooHalvingDoubling,
    /// `gloo::allreduce(AllreduceOptions)` (ring), what PyTorch's
    /// ProcessGroupGloo calls for dense CPU tensors.
    GlooAllreduce,
    /// `ringside sweep --transport shm`.
    RingsideShm,
    /// `ringside sweep --transport tcp`.
    RingsideTcp,
    /// `ringside sweep --backend gloo --algo ring`: `gloo::allreduce` with
    /// `Algorithm::RING` through ringside's Communicator (the wrapper's
    /// overhead against `gloo-allreduce`, which calls the same function).
    RingsideGloo,
    /// `ringside sweep --backend gloo --algo ring-chunked`:
    /// `gloo::AllreduceRingChunked` through ringside (against `gloo-ring-chunked`).
    RingsideGlooRingChunked,
    /// `ringside sweep --backend gloo --algo halving-doubling`:
    /// `gloo::AllreduceHalvingDoubling` through ringside (against
    /// `gloo-halving-doubling`).
    RingsideGlooHalvingDoubling,
    /// `mpirun ringside sweep --backend mpi`: MPI_Allreduce through ringside's
    /// Communicator (the wrapper's overhead against `mpi`).
    RingsideMpi,
    /// `mpirun ringside sweep --backend mpi --beside-bare`: OpenMPI's
    /// `MPI_Allreduce` called bare in ringside's processes, iteration by
    /// iteration in turn with ringside's call of it (`ringside-mpi-beside`):
    /// the binding's overhead without the spread between two programs' runs.
    MpiBare,
    /// Ringside's all_reduce timed in `mpi-bare`'s run, in turn with the bare
    /// call. Taking turns slows both a little, so this is not `ringside-mpi`
    /// (timed alone, against the C peer); it has no run of its own and comes
    /// with `mpi-bare`.
    RingsideMpiBeside,
}

impl Impl {
    /// Every implementation, in table order.
    pub const ALL: [Impl; 13] = [
        Impl::Mpi,
        Impl::GlooRing,
        Impl::GlooRingChunked,
        Impl::GlooHalvingDoubling,
        Impl::GlooAllreduce,
        Impl::RingsideShm,
        Impl::RingsideTcp,
        Impl::RingsideGloo,
        Impl::RingsideGlooRingChunked,
        Impl::RingsideGlooHalvingDoubling,
        Impl::RingsideMpi,
        Impl::MpiBare,
        Impl::RingsideMpiBeside,
    ];

    /// The default selection: what the project's targets compare.
    pub const DEFAULT: [Impl; 4] = [
        Impl::Mpi,
        Impl::GlooRing,
        Impl::RingsideShm,
        Impl::RingsideTcp,
    ];

    /// The name used on the command line, in tables and as the JSON `impl`
    /// the peers print.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Mpi => "mpi",
            Impl::GlooRing => "gloo-ring",
            Impl::GlooRingChunked => "gloo-ring-chunked",
            Impl::GlooHalvingDoubling => "gloo-halving-doubling",
            Impl::GlooAllreduce => "gloo-allreduce",
            Impl::RingsideShm => "ringside-shm",
            Impl::RingsideTcp => "ringside-tcp",
            Impl::RingsideGloo => "ringside-gloo",
            Impl::RingsideGlooRingChunked => "ringside-gloo-ring-chunked",
            Impl::RingsideGlooHalvingDoubling => "ringside-gloo-halving-doubling",
            Impl::RingsideMpi => "ringside-mpi",
            Impl::MpiBare => collectives::bench::BARE_MPI_LABEL,
            Impl::RingsideMpiBeside => "ringside-mpi-beside",
        }
    }

    /// The implementation whose run measures this one (`ringside-mpi-beside`:
    /// `mpi-bare`'s), for those with no run of their own.
    pub fn measured_in(self) -> Option<Impl> {
        match self {
            Impl::RingsideMpiBeside => Some(Impl::MpiBare),
            _ => None,
        }
    }

    /// The Gloo peer's `-a` value, for Gloo implementations.
    pub fn gloo_algorithm(self) -> Option<&'static str> {
        match self {
            Impl::GlooRing => Some("ring"),
            Impl::GlooRingChunked => Some("ring_chunked"),
            Impl::GlooHalvingDoubling => Some("halving_doubling"),
            Impl::GlooAllreduce => Some("allreduce"),
            _ => None,
        }
    }

    /// The `ringside sweep` arguments that select this implementation, for
    /// ringside implementations.
    pub fn ringside_args(self) -> Option<&'static [&'static str]> {
        match self {
            Impl::RingsideShm => Some(&["--transport", "shm"]),
            Impl::RingsideTcp => Some(&["--transport", "tcp"]),
            Impl::RingsideGloo => Some(&["--backend", "gloo", "--algo", "ring"]),
            Impl::RingsideGlooRingChunked => Some(&["--backend", "gloo", "--algo", "ring-chunked"]),
            Impl::RingsideGlooHalvingDoubling => {
                Some(&["--backend", "gloo", "--algo", "halving-doubling"])
            }
            _ => None,
        }
    }

    /// All names, comma-separated (for help and errors).
    pub fn names() -> String {
        Impl::ALL.map(Impl::name).join(",")
    }

    /// Parses a comma-separated list (`mpi,gloo-ring`), dropping repeats
    /// but keeping the order given.
    pub fn parse_list(list: &str) -> Result<Vec<Impl>> {
        let mut out = Vec::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let imp: Impl = part.parse()?;
            if !out.contains(&imp) {
                out.push(imp);
            }
        }
        if out.is_empty() {
            return Err(Error::UnknownImpl(list.to_string()));
        }
        // What a run measures besides itself comes with it, right after it.
        for host in out.clone() {
            for imp in Impl::ALL {
                if imp.measured_in() == Some(host) && !out.contains(&imp) {
                    let at = out.iter().position(|&i| i == host).unwrap_or(0);
                    out.insert(at + 1, imp);
                }
            }
        }
        for imp in &out {
            if let Some(host) = imp.measured_in()
                && !out.contains(&host)
            {
                return Err(Error::NoHost { imp: *imp, host });
            }
        }
        Ok(out)
    }
}

impl fmt::Display for Impl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Impl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        Impl::ALL
            .into_iter()
            .find(|i| i.name() == s)
            .ok_or(Error::UnknownImpl(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for i in Impl::ALL {
            assert_eq!(i.name().parse::<Impl>().unwrap(), i);
        }
    }

    #[test]
    fn parse_list_keeps_order_and_drops_repeats() {
        let l = Impl::parse_list("ringside-tcp, mpi,gloo_ring,mpi").unwrap();
        assert_eq!(l, vec![Impl::RingsideTcp, Impl::Mpi, Impl::GlooRing]);
    }

    #[test]
    fn parse_list_rejects_unknown_and_empty() {
        assert!(Impl::parse_list("mpi,nccl").is_err());
        assert!(Impl::parse_list(" , ").is_err());
    }

    #[test]
    fn mpi_bare_brings_the_ringside_call_timed_in_its_run() {
        let l = Impl::parse_list("mpi-bare,mpi").unwrap();
        assert_eq!(l, [Impl::MpiBare, Impl::RingsideMpiBeside, Impl::Mpi]);
        let err = Impl::parse_list("mpi,ringside-mpi-beside").unwrap_err();
        assert!(err.to_string().contains("add mpi-bare"), "{err}");
    }

    #[test]
    fn the_beside_run_labels_its_records_with_these_names() {
        // `ringside sweep --beside-bare` names its records; the runner files
        // each under the implementation of that name.
        assert_eq!(Impl::MpiBare.name(), collectives::bench::BARE_MPI_LABEL);
        assert_eq!(
            Impl::RingsideMpiBeside.name(),
            format!("{}{}", Impl::RingsideMpi, collectives::bench::BESIDE_SUFFIX)
        );
    }

    #[test]
    fn gloo_algorithm_names_match_peer_impl_names() {
        // The Gloo peer prints "gloo-" + algo with '_' -> '-'.
        for i in Impl::ALL {
            if let Some(a) = i.gloo_algorithm() {
                assert_eq!(format!("gloo-{}", a.replace('_', "-")), i.name());
            }
        }
    }
}
