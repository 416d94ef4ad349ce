//! Comparing trainings: a snapshot of a model's parameters, the largest
//! difference between two, and what an equivalence check measured. Every
//! mechanism's check (DDP, ZeRO, SyncBN, tensor parallel, pipeline, the
//! parameter servers) and the workshop's labs judge "trains like one process"
//! with these, so a NaN is caught in one place.
//!
//! **Non-finite values are errors, not numbers.** `f64::max` drops a NaN
//! (`0.0_f64.max(NAN) == 0.0`), so a check that folded differences with it read
//! all-NaN weights as "Δ = 0" and passed a training that had diverged (lab 12's
//! SyncBN with the local row count: a negative variance, NaN weights, "max |Δ|
//! 0.0e0"). Here a non-finite parameter on either side is an
//! [`Error::NonFinite`] naming it, and [`worst`] keeps a NaN when folding.

use tch::nn::{self, OptimizerConfig};
use tch::{Device, Tensor};

use crate::{Error, Result};

/// Learning rate of the checks' SGD (momentum 0.9): large enough that 10
/// steps move every parameter well beyond the tolerance.
pub const LR: f64 = 0.05;

/// What an equivalence check measured (DDP's, ZeRO's, SyncBatchNorm's).
#[derive(Debug, Clone, Copy)]
pub struct Equivalence {
    /// Largest |Δ| between any rank's parameters and the reference run's.
    pub max_diff: f64,
    /// Largest |Δ| between the reference run's parameters and the start: a
    /// check that moved nothing would prove nothing.
    pub moved: f64,
}

/// The equivalence checks' reference optimizer: libtorch's own SGD (what
/// `torch.optim.SGD` runs), momentum 0.9, rate [`LR`]. Not [`crate::optim::Sgd`]:
/// the reference must not share code with what it judges.
pub fn reference_sgd(vs: &nn::VarStore) -> Result<nn::Optimizer> {
    Ok(nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(vs, LR)?)
}

/// Copies of `vs`'s variables, sorted by name (the map order is per process).
pub fn snapshot(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<_> = vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Deep copies of a [`snapshot`] (tensors are handles: a snapshot moved into
/// a rank must not alias the caller's).
pub fn copies(v: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    v.iter().map(|(n, t)| (n.clone(), t.copy())).collect()
}

/// Writes a [`snapshot`] into `vs`'s variables of the same names.
pub fn load(vs: &nn::VarStore, params: &[(String, Tensor)]) -> Result<()> {
    let vars = vs.variables();
    tch::no_grad(|| {
        for (n, t) in params {
            let v = vars
                .get(n)
                .ok_or_else(|| Error::Model(format!("no variable {n}")))?;
            v.shallow_clone().f_copy_(t)?;
        }
        Ok(())
    })
}

/// The larger of two differences, a NaN winning (a NaN must not hide behind
/// `max`).
pub fn worst(a: f64, b: f64) -> f64 {
    if b.is_nan() || b > a { b } else { a }
}

/// Largest |a − b| over the elements of two tensors of one shape (on any
/// devices; compared on the CPU). A NaN or infinity in either is an
/// [`Error::NonFinite`] naming `name` and the side it is on.
pub fn tensor_diff(name: &str, a: &Tensor, b: &Tensor) -> Result<f64> {
    let a = a.f_to_device(Device::Cpu)?;
    let b = b.f_to_device(Device::Cpu)?;
    for (t, side) in [(&a, "the trained parameters"), (&b, "the reference")] {
        // all(isfinite) is one reduction; a scalar read is needed anyway.
        if t.f_isfinite()?.f_all()?.f_int64_value(&[])? == 0 {
            let nan = t.f_isnan()?.f_any()?.f_int64_value(&[])? != 0;
            return Err(Error::NonFinite(format!(
                "`{name}` holds {} in {side}: the training diverged, so nothing can be \
                 compared (a negative variance, a division by zero or a step too large \
                 gives this)",
                if nan { "NaN" } else { "an infinity" }
            )));
        }
    }
    if a.size() != b.size() {
        return Err(Error::Model(format!(
            "`{name}` has shape {:?} against {:?}",
            a.size(),
            b.size()
        )));
    }
    Ok(a.f_sub(&b)?.f_abs()?.f_max()?.f_double_value(&[])?)
}

/// The largest |a − b| over two [`snapshot`]s of the same model (`a` the
/// trained one, `b` the reference): an error if their names differ or any
/// value is not finite.
pub fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> Result<f64> {
    if a.len() != b.len() {
        return Err(Error::Model(format!(
            "{} parameters against {}",
            a.len(),
            b.len()
        )));
    }
    let mut max = 0f64;
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        if na != nb {
            return Err(Error::Model(format!("{na} against {nb}")));
        }
        max = worst(max, tensor_diff(na, ta, tb)?);
    }
    Ok(max)
}

/// [`max_diff`] over two var stores with the same variable names (on any
/// devices).
pub fn store_diff(a: &nn::VarStore, b: &nn::VarStore) -> Result<f64> {
    let b = b.variables();
    let mut max = 0f64;
    for (name, t) in a.variables() {
        let other = b
            .get(&name)
            .ok_or_else(|| Error::Model(format!("`{name}` is in one store but not the other")))?;
        max = worst(max, tensor_diff(&name, &t, other)?);
    }
    Ok(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(v: &[f32]) -> Vec<(String, Tensor)> {
        vec![("w".to_owned(), Tensor::from_slice(v))]
    }

    /// Named after what broke: lab 12's check read all-NaN weights as Δ = 0.
    #[test]
    fn max_diff_refuses_nan_weights_instead_of_reading_zero() {
        let e = max_diff(&snap(&[f32::NAN, f32::NAN]), &snap(&[1.0, 2.0])).unwrap_err();
        assert!(matches!(e, Error::NonFinite(_)), "{e}");
        assert!(e.to_string().contains("`w` holds NaN"), "{e}");
        let e = max_diff(&snap(&[1.0, 2.0]), &snap(&[1.0, f32::INFINITY])).unwrap_err();
        assert!(e.to_string().contains("infinity in the reference"), "{e}");
    }

    #[test]
    fn max_diff_is_the_largest_absolute_difference() {
        let d = max_diff(&snap(&[1.0, 2.0, 3.0]), &snap(&[1.0, 2.5, 2.0])).unwrap();
        assert_eq!(d, 1.0);
    }

    #[test]
    fn worst_keeps_a_nan() {
        assert!(worst(1.0, f64::NAN).is_nan());
        assert_eq!(worst(1.0, 2.0), 2.0);
        assert_eq!(worst(3.0, 2.0), 3.0);
    }
}
