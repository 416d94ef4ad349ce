//! What the runner can launch, by name: each [`Label`] is one implementation
//! of all_reduce (a library called directly, or ringside with a backend and
//! transport), named as the `label` of its records.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// One all_reduce implementation the `peers` runner knows how to launch
/// (flag `--impl`; the same idea as `ringside bench`'s `Label`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Label {
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
    /// `RINGSIDE_GLOO_ALGO=ring_chunked ringside sweep --backend gloo`:
    /// `gloo::AllreduceRingChunked` through ringside (against `gloo-ring-chunked`).
    RingsideGlooRingChunked,
    /// `RINGSIDE_GLOO_ALGO=halving_doubling ringside sweep --backend gloo`:
    /// `gloo::AllreduceHalvingDoubling` through ringside (against
    /// `gloo-halving-doubling`).
    RingsideGlooHalvingDoubling,
    /// `mpirun ringside sweep --backend mpi`: MPI_Allreduce through ringside's
    /// Communicator (the wrapper's overhead against `mpi`).
    RingsideMpi,
}

impl Label {
    /// Every implementation, in table order.
    pub const ALL: [Label; 11] = [
        Label::Mpi,
        Label::GlooRing,
        Label::GlooRingChunked,
        Label::GlooHalvingDoubling,
        Label::GlooAllreduce,
        Label::RingsideShm,
        Label::RingsideTcp,
        Label::RingsideGloo,
        Label::RingsideGlooRingChunked,
        Label::RingsideGlooHalvingDoubling,
        Label::RingsideMpi,
    ];

    /// The default selection: what the project's targets compare.
    pub const DEFAULT: [Label; 4] = [
        Label::Mpi,
        Label::GlooRing,
        Label::RingsideShm,
        Label::RingsideTcp,
    ];

    /// The name used on the command line, in tables and as the JSON `impl`
    /// the peers print.
    pub fn name(self) -> &'static str {
        match self {
            Label::Mpi => "mpi",
            Label::GlooRing => "gloo-ring",
            Label::GlooRingChunked => "gloo-ring-chunked",
            Label::GlooHalvingDoubling => "gloo-halving-doubling",
            Label::GlooAllreduce => "gloo-allreduce",
            Label::RingsideShm => "ringside-shm",
            Label::RingsideTcp => "ringside-tcp",
            Label::RingsideGloo => "ringside-gloo",
            Label::RingsideGlooRingChunked => "ringside-gloo-ring-chunked",
            Label::RingsideGlooHalvingDoubling => "ringside-gloo-halving-doubling",
            Label::RingsideMpi => "ringside-mpi",
        }
    }

    /// The Gloo peer's `-a` value, for Gloo implementations.
    pub fn gloo_algorithm(self) -> Option<&'static str> {
        match self {
            Label::GlooRing => Some("ring"),
            Label::GlooRingChunked => Some("ring_chunked"),
            Label::GlooHalvingDoubling => Some("halving_doubling"),
            Label::GlooAllreduce => Some("allreduce"),
            _ => None,
        }
    }

    /// The `ringside sweep` arguments that select this implementation, for
    /// ringside implementations.
    pub fn ringside_args(self) -> Option<&'static [&'static str]> {
        match self {
            Label::RingsideShm => Some(&["--transport", "shm"]),
            Label::RingsideTcp => Some(&["--transport", "tcp"]),
            Label::RingsideGloo => Some(&["--backend", "gloo", "--algo", "ring"]),
            Label::RingsideGlooRingChunked | Label::RingsideGlooHalvingDoubling => {
                Some(&["--backend", "gloo"])
            }
            _ => None,
        }
    }

    /// Environment a ringside implementation runs with: the Gloo classic
    /// algorithms are chosen by `RINGSIDE_GLOO_ALGO` (ringside's `--algo`
    /// names its own algorithms).
    pub fn ringside_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Label::RingsideGlooRingChunked => &[("RINGSIDE_GLOO_ALGO", "ring_chunked")],
            Label::RingsideGlooHalvingDoubling => &[("RINGSIDE_GLOO_ALGO", "halving_doubling")],
            _ => &[],
        }
    }

    /// All names, comma-separated (for help and errors).
    pub fn names() -> String {
        Label::ALL.map(Label::name).join(",")
    }

    /// Parses a comma-separated list (`mpi,gloo-ring`), dropping repeats
    /// but keeping the order given.
    pub fn parse_list(list: &str) -> Result<Vec<Label>> {
        let mut out = Vec::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let imp: Label = part.parse()?;
            if !out.contains(&imp) {
                out.push(imp);
            }
        }
        if out.is_empty() {
            return Err(Error::UnknownLabel(list.to_string()));
        }
        Ok(out)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Label {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        Label::ALL
            .into_iter()
            .find(|i| i.name() == s)
            .ok_or(Error::UnknownLabel(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for i in Label::ALL {
            assert_eq!(i.name().parse::<Label>().unwrap(), i);
        }
    }

    #[test]
    fn parse_list_keeps_order_and_drops_repeats() {
        let l = Label::parse_list("ringside-tcp, mpi,gloo_ring,mpi").unwrap();
        assert_eq!(l, vec![Label::RingsideTcp, Label::Mpi, Label::GlooRing]);
    }

    #[test]
    fn parse_list_rejects_unknown_and_empty() {
        assert!(Label::parse_list("mpi,nccl").is_err());
        assert!(Label::parse_list(" , ").is_err());
    }

    #[test]
    fn gloo_algorithm_names_match_peer_impl_names() {
        // The Gloo peer prints "gloo-" + algo with '_' -> '-'.
        for i in Label::ALL {
            if let Some(a) = i.gloo_algorithm() {
                assert_eq!(format!("gloo-{}", a.replace('_', "-")), i.name());
            }
        }
    }
}
