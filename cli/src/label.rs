//! What `ringside bench` and the tour measure, by name: a backend and, for the
//! reference backend, its transport. `all` is every backend in one order, the
//! tour's columns and bench's `--backend all` alike.

use std::time::Duration;

use anyhow::bail;
use collectives::algorithms::Algo;
use collectives::job::JoinError;
use collectives::rendezvous::env::Rendezvous;
use collectives::transport::TransportKind;
use collectives::{Backend, Communicator};

/// What is measured: a backend (with its transport), named as the results
/// file's `label` field and the charts' series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// The name, e.g. `reference-shm` or `gloo`.
    pub name: String,
    /// The library.
    pub backend: Backend,
    /// The reference backend's transport.
    pub transport: TransportKind,
}

/// Parses the `--backend` list.
pub fn parse(list: &[String], transport: TransportKind) -> anyhow::Result<Vec<Label>> {
    let label = |name: &str, backend, transport| Label {
        name: name.to_owned(),
        backend,
        transport,
    };
    let mut out = Vec::new();
    for name in list {
        match name.trim().to_ascii_lowercase().as_str() {
            "all" => {
                out.push(label(
                    "reference-shm",
                    Backend::Reference,
                    TransportKind::Shm,
                ));
                out.push(label(
                    "reference-tcp",
                    Backend::Reference,
                    TransportKind::Tcp,
                ));
                for b in [Backend::Gloo, Backend::Mpi, Backend::Nccl] {
                    out.push(label(b.name(), b, TransportKind::Auto));
                }
            }
            "reference-shm" | "ref-shm" => out.push(label(
                "reference-shm",
                Backend::Reference,
                TransportKind::Shm,
            )),
            "reference-tcp" | "ref-tcp" => out.push(label(
                "reference-tcp",
                Backend::Reference,
                TransportKind::Tcp,
            )),
            other => match Backend::parse(other) {
                Some(Backend::Reference) => {
                    let name = match transport {
                        TransportKind::Auto => "reference".to_owned(),
                        t => format!("reference-{}", t.name()),
                    };
                    out.push(Label {
                        name,
                        backend: Backend::Reference,
                        transport,
                    });
                }
                Some(b) => out.push(label(b.name(), b, TransportKind::Auto)),
                None => bail!(
                    "unknown backend {name:?} (reference, reference-shm, reference-tcp, gloo, mpi, nccl, all)"
                ),
            },
        }
    }
    out.dedup();
    Ok(out)
}

impl Label {
    /// A short column heading: `ref-shm` for `reference-shm`.
    pub fn column(&self) -> String {
        match self.name.strip_prefix("reference") {
            Some(rest) => format!("ref{rest}"),
            None => self.name.clone(),
        }
    }

    /// Connects this label's backend with `algo` under the store prefix
    /// `prefix`, or says in one line why this job cannot run it; `relaunch`
    /// follows a missing-launcher reason and says how to start a job that can.
    pub fn connect(
        &self,
        rdv: &Rendezvous,
        algo: Algo,
        timeout: Duration,
        prefix: &str,
        relaunch: &str,
    ) -> Result<Box<dyn Communicator>, String> {
        if let Some(why) = self.backend.launcher_problem(rdv.info.launcher) {
            return Err(format!("{why}{relaunch}"));
        }
        collectives::job::connect(rdv, self.backend, self.transport, algo, timeout, prefix)
            .map_err(last_line)
    }
}

/// A failed connect in one line: the chain's last line is the cause a reader
/// can act on (bench and tour print it in a table row).
fn last_line(e: JoinError) -> String {
    format!("{:#}", anyhow::Error::new(e))
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_every_backend_in_the_tour_order() {
        let l = parse(&["all".into()], TransportKind::Auto).unwrap();
        let names: Vec<&str> = l.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["reference-shm", "reference-tcp", "gloo", "mpi", "nccl"]
        );
        let columns: Vec<String> = l.iter().map(Label::column).collect();
        assert_eq!(columns, ["ref-shm", "ref-tcp", "gloo", "mpi", "nccl"]);
        assert!(parse(&["nope".into()], TransportKind::Auto).is_err());
    }
}
