//! Gradient compression as a DDP communication hook, as PyTorch's
//! `fp16_compress_hook` and `bf16_compress_hook`: each bucket travels as 16-bit
//! floats (half the bytes of f32) and comes back as f32.
//!
//! Every rank divides its gradients by the world size *before* casting, so
//! the all-reduce adds means rather than sums: a sum of n gradients can
//! overflow f16 (largest finite 65,504) where their mean fits, and nothing is
//! left to divide afterwards.

use collectives::{Communicator, Input, ReduceOp};
use tch::{Kind, Tensor};

use super::{GradSync, Standard};
use crate::{Error, Result, comm};

/// A [`GradSync`] whose all-reduce moves 16-bit floats; everything else is
/// [`Standard`]'s.
#[derive(Clone, Copy, Debug)]
pub struct Compressed {
    kind: Kind,
}

impl Compressed {
    /// IEEE half precision (10-bit mantissa: relative rounding 2⁻¹¹).
    pub fn fp16() -> Compressed {
        Compressed { kind: Kind::Half }
    }

    /// bfloat16 (8-bit exponent like f32, 7-bit mantissa: relative rounding 2⁻⁸).
    pub fn bf16() -> Compressed {
        Compressed {
            kind: Kind::BFloat16,
        }
    }

    /// The wire kind.
    pub fn kind(self) -> Kind {
        self.kind
    }

    /// The unit roundoff of the wire kind: each cast or addition in it is
    /// off by at most this much relative to the exact value.
    pub fn unit_roundoff(self) -> f64 {
        match self.kind {
            Kind::Half => 2f64.powi(-11),
            _ => 2f64.powi(-8),
        }
    }
}

impl GradSync for Compressed {
    fn broadcast(&self, comm: &dyn Communicator, tensors: &[Tensor], root: usize) -> Result<()> {
        Standard.broadcast(comm, tensors, root)
    }

    // ANCHOR: compress
    fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> Result<()> {
        let n = comm.world_size() as f64;
        let mut wire = flat.f_div_scalar(n)?.f_to_kind(self.kind)?;
        comm.all_reduce(
            Input::InPlace,
            &mut comm::buffer_mut(&mut wire)?,
            ReduceOp::Sum,
        )?;
        if wire.f_isfinite()?.f_all()?.f_int64_value(&[])? == 0 {
            return Err(Error::InvalidArgument(format!(
                "a gradient mean overflowed {:?} in the compressed all-reduce: use bf16, or \
                 scale the loss down",
                self.kind
            )));
        }
        flat.f_copy_(&wire)?;
        Ok(())
    }
    // ANCHOR_END: compress

    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> Result<()> {
        Standard.flatten(grads, flat)
    }

    fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> Result<()> {
        Standard.unflatten(flat, grads)
    }

    fn ready(&self, stage: usize, ready_stage: &[usize], next: usize) -> Result<usize> {
        Standard.ready(stage, ready_stage, next)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ddp::check::compression;

    /// The stated error: n values cast once (u each) and added in n − 1 steps
    /// (u per step on a partial sum of at most n·max/n = max), then cast back
    /// (exact: f32 holds every 16-bit value): |Δ| ≤ (2n + 1)·u·max|g|. A reduce
    /// that dropped a rank's share would be off by ~max/n, far outside it.
    #[test]
    fn fp16_and_bf16_means_are_within_the_stated_rounding_of_the_f32_mean() {
        for c in [Compressed::fp16(), Compressed::bf16()] {
            for world in [2, 3] {
                let m = compression(world, Arc::new(c), 10_000, 1.0).unwrap();
                let bound = (2.0 * world as f64 + 1.0) * c.unit_roundoff() * m.max_grad;
                assert!(
                    m.max_diff <= bound,
                    "{c:?} world {world}: |Δ| {:e} > {bound:e}",
                    m.max_diff
                );
                assert!(
                    m.max_diff > 0.0,
                    "{c:?}: no rounding at all means no compression"
                );
                assert_eq!(m.wire_bytes * 2, m.f32_bytes, "{c:?}: half the bytes");
            }
        }
    }

    /// Gradients near f16's largest value: their sum would overflow, their
    /// mean does not, and the pre-division is what keeps them finite.
    #[test]
    fn fp16_does_not_overflow_where_the_mean_fits() {
        let m = compression(2, Arc::new(Compressed::fp16()), 10_000, 15_000.0).unwrap();
        assert!(m.max_grad > 40_000.0, "{}", m.max_grad);
        assert!(
            m.max_diff.is_finite() && m.max_diff <= 5.0 * 2f64.powi(-11) * m.max_grad,
            "{}",
            m.max_diff
        );
    }

    /// A mean beyond f16's range is an error naming the way out, not infinities
    /// written into the gradients.
    #[test]
    fn an_fp16_overflow_is_an_error_naming_the_fix() {
        let e = compression(2, Arc::new(Compressed::fp16()), 10_000, 40_000.0).unwrap_err();
        assert!(e.to_string().contains("overflowed"), "{e}");
        let m = compression(2, Arc::new(Compressed::bf16()), 10_000, 40_000.0).unwrap();
        assert!(m.max_diff.is_finite());
    }
}
