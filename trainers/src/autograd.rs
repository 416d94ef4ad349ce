//! What tch 0.24's autograd lacks and the trainers need: a backward pass that
//! starts from a given gradient (a pipeline stage, a ZeRO shard, a
//! tensor-parallel block receive theirs from another rank), and a gradient
//! defined before any backward (the optimizer's flat storage, DDP's buckets).

use tch::{Kind, Tensor};

pub mod hooks;
pub mod ops;
mod shim;

use crate::Result;

/// Backpropagates from `output` with `grad` as its incoming gradient.
///
/// tch 0.24 has no `backward(gradient)`; `sum(output * grad)` has exactly `grad` as its
/// gradient with respect to `output` (the product's backward multiplies by 1.0), so its
/// plain backward is the same computation.
pub fn backward_with_grad(output: &Tensor, grad: &Tensor) -> Result<()> {
    output.f_mul(grad)?.f_sum(Kind::Float)?.f_backward()?;
    Ok(())
}

/// Gives `p` a zero gradient through autograd (tch cannot assign `.grad`), so
/// that later backward passes add into that tensor in place.
pub fn define_grad(p: &Tensor) -> Result<Tensor> {
    tch::with_grad(|| -> Result<()> {
        p.f_mul_scalar(0.0)?.f_sum(p.f_kind()?)?.f_backward()?;
        Ok(())
    })?;
    Ok(p.f_grad()?)
}
