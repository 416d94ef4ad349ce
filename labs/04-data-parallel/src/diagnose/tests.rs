//! Each named mistake, fed to the probes as a learner would write it: trainers'
//! own pieces with one piece replaced.

use std::time::Duration;

use super::*;
use trainers::Result;
use trainers::data_parallel::Standard;
use trainers::models::Stage;

/// Which of trainers' pieces a mistaken set replaces.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mistake {
    /// reduce averages the replicas' gradients with the master's.
    Averages,
    /// scatter cuts floor(B/N) rows and gives the rest to the last piece.
    FloorScatter,
    /// gather concatenates detached outputs.
    DetachedGather,
}

#[derive(Debug)]
struct Mistaken(Mistake);

impl Pieces for Mistaken {
    fn replicate(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()> {
        Standard.replicate(master, replicas)
    }
    fn scatter(&self, x: &Tensor, devices: &[Device]) -> Result<Vec<Tensor>> {
        if self.0 != Mistake::FloorScatter {
            return Standard.scatter(x, devices);
        }
        let (b, n) = (x.size()[0], devices.len() as i64);
        let per = b / n;
        (0..n)
            .map(|k| {
                let len = if k == n - 1 { b - per * k } else { per };
                Ok(x.f_narrow(0, per * k, len)?)
            })
            .collect()
    }
    fn parallel_apply(
        &self,
        modules: Vec<&mut Stage>,
        inputs: Vec<Tensor>,
        train: bool,
    ) -> Result<Vec<(Tensor, Duration)>> {
        Standard.parallel_apply(modules, inputs, train)
    }
    fn gather(&self, outputs: &[Tensor], device: Device) -> Result<Tensor> {
        if self.0 != Mistake::DetachedGather {
            return Standard.gather(outputs, device);
        }
        let moved = outputs
            .iter()
            .map(|o| Ok(o.f_detach()?.f_to_device(device)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::f_cat(&moved, 0)?)
    }
    fn reduce(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()> {
        if self.0 != Mistake::Averages {
            return Standard.reduce(master, replicas);
        }
        Standard.reduce(master, replicas)?;
        let n = (replicas.len() + 1) as f64;
        tch::no_grad(|| {
            for m in master {
                let _ = m.f_grad()?.f_div_scalar_(n)?;
            }
            Ok(())
        })
    }
}

#[test]
fn trainers_own_pieces_name_nothing() {
    assert_eq!(diagnose(&Standard), "");
}

#[test]
fn a_reduce_that_averages_is_named() {
    let e = diagnose(&Mistaken(Mistake::Averages));
    assert!(
        e.contains(
            "the master's gradient element 0: got 2, expected 6 (the sum): that is an average"
        ),
        "{e}"
    );
    assert!(e.ends_with("hint: reduce-averaged"), "{e}");
}

#[test]
fn a_scatter_that_gives_the_remainder_to_the_last_piece_is_named() {
    let e = diagnose(&Mistaken(Mistake::FloorScatter));
    assert!(
        e.contains("Your scatter of 31 rows over 3 devices made pieces of [10, 10, 11] rows, expected [11, 11, 9]"),
        "{e}"
    );
    assert!(e.ends_with("hint: scatter-sizes"), "{e}");
}

#[test]
fn a_gather_that_detaches_is_named() {
    let e = diagnose(&Mistaken(Mistake::DetachedGather));
    assert!(e.ends_with("hint: gather-detached"), "{e}");
}
