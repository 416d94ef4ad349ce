//! What tch 0.24's autograd lacks and the trainers need: a backward pass that
//! starts from a given gradient (a pipeline stage, a ZeRO shard, a
//! tensor-parallel block receive theirs from another rank), and a gradient
//! defined before any backward (the optimizer's flat storage, DDP's buckets).

use tch::{Kind, Tensor};

pub mod hooks;
pub mod ops;
pub mod profile;
mod shim;

use crate::Result;

/// `a += alpha·b` in place, outside autograd, as one libtorch kernel
/// (`a.add_(b, alpha=alpha)`, what `torch.optim.SGD` runs): a fused multiply-add
/// on AVX2/AVX-512 CPUs and on CUDA, so the result rounds exactly as PyTorch's.
/// tch 0.24's `add` has no `alpha`; the C++ shim calls it.
pub fn add_scaled_(a: &mut Tensor, b: &Tensor, alpha: f64) -> Result<()> {
    let mut err = [0 as std::ffi::c_char; shim::ERR_LEN];
    // SAFETY: both pointers are live `at::Tensor`s owned by tch for the
    // call's duration (`a` mutably borrowed), and `err` has ERR_LEN bytes.
    let rc = unsafe {
        shim::ringside_add_scaled_(
            a.as_mut_ptr().cast(),
            b.as_ptr().cast(),
            alpha,
            err.as_mut_ptr(),
            shim::ERR_LEN,
        )
    };
    if rc != 0 {
        return Err(crate::Error::Torch(tch::TchError::Torch(shim::message(
            &err,
        ))));
    }
    Ok(())
}

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
