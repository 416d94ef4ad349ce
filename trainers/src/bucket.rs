//! Gradient buckets, as PyTorch DDP forms them.
//!
//! Reducing every gradient on its own pays the per-call latency once per tensor;
//! reducing all of them at once cannot start before the whole backward pass is
//! done. DDP groups parameters into *buckets* of a few megabytes, in the order
//! their gradients become ready (the reverse of the order the model registered
//! them), and reduces each bucket as one flat tensor as soon as all its gradients
//! exist, while backward carries on with the earlier layers.
//!
//! [`assign`] is PyTorch's `compute_bucket_assignment_by_size`: walk the
//! parameters in ready order, add each to the open bucket of its dtype and device,
//! and close the bucket once it holds *at least* the current limit (so the
//! parameter that crosses the limit is still inside). The first limit
//! ([`DEFAULT_FIRST_BUCKET_BYTES`], 1 MiB) is small so that the first all_reduce
//! starts early; every later bucket uses the cap ([`DEFAULT_BUCKET_CAP_BYTES`],
//! 25 MiB). A [`Bucket`] is one flat, contiguous tensor with a view per parameter;
//! gradients are copied in before the reduction and out after it.

use tch::{Device, Tensor};

use crate::autograd::define_grad;
use crate::{Error, Result};

/// PyTorch DDP's `bucket_cap_mb` default: 25 MiB.
pub const DEFAULT_BUCKET_CAP_BYTES: usize = 25 * 1024 * 1024;

/// PyTorch DDP's `_DEFAULT_FIRST_BUCKET_BYTES`: 1 MiB.
pub const DEFAULT_FIRST_BUCKET_BYTES: usize = 1024 * 1024;

// ANCHOR: assign
/// Groups parameters into buckets.
///
/// `params[i]` is parameter `i`'s size in bytes and its key (dtype and device:
/// parameters with different keys never share a bucket). `order` is the order to
/// visit them in, normally [`ready_order`]. `limits` are the byte limits of the
/// first, second, ... bucket of each key; the last one repeats. Returns the
/// buckets as lists of parameter indices in visiting order, ordered by when each
/// bucket closed, then the still-open buckets in order of their keys' first
/// appearance.
pub fn assign<K: PartialEq + Clone>(
    params: &[(usize, K)],
    order: &[usize],
    limits: &[usize],
) -> Result<Vec<Vec<usize>>> {
    let n = params.len();
    let mut seen = vec![false; n];
    if order.len() != n
        || order
            .iter()
            .any(|&i| i >= n || std::mem::replace(&mut seen[i], true))
    {
        return Err(Error::InvalidArgument(format!(
            "bucket order {order:?} is not a permutation of 0..{n}"
        )));
    }
    let Some(&last_limit) = limits.last() else {
        return Err(Error::InvalidArgument(
            "bucket size limits must not be empty".into(),
        ));
    };
    struct Open<K> {
        key: K,
        indices: Vec<usize>,
        bytes: usize,
        /// Index into `limits` of this key's current limit.
        limit: usize,
    }
    let mut open: Vec<Open<K>> = Vec::new();
    let mut done = Vec::new();
    for &i in order {
        let (bytes, key) = &params[i];
        let slot = match open.iter().position(|o| o.key == *key) {
            Some(s) => s,
            None => {
                open.push(Open {
                    key: key.clone(),
                    indices: Vec::new(),
                    bytes: 0,
                    limit: 0,
                });
                open.len() - 1
            }
        };
        let o = &mut open[slot];
        o.indices.push(i);
        o.bytes += bytes;
        let limit = limits.get(o.limit).copied().unwrap_or(last_limit);
        if o.bytes >= limit {
            done.push(std::mem::take(&mut o.indices));
            o.bytes = 0;
            o.limit = (o.limit + 1).min(limits.len() - 1);
        }
    }
    done.extend(
        open.into_iter()
            .map(|o| o.indices)
            .filter(|b| !b.is_empty()),
    );
    Ok(done)
}
// ANCHOR_END: assign

/// `n-1, …, 1, 0`: the order gradients become ready in, when layers run in the
/// order their parameters were registered.
pub fn ready_order(n: usize) -> Vec<usize> {
    (0..n).rev().collect()
}

/// One bucket: a flat tensor holding its parameters' gradients back to back.
#[derive(Debug)]
pub struct Bucket {
    params: Vec<usize>,
    flat: Tensor,
}

impl Bucket {
    /// A zeroed bucket for `params` (indices into `all`, in bucket order), of
    /// their common kind, on `device` (the parameters' device, or the CPU when the
    /// backend reduces host memory only).
    pub fn new(params: Vec<usize>, all: &[Tensor], device: Device) -> Result<Bucket> {
        let Some(&first) = params.first() else {
            return Err(Error::InvalidArgument("an empty bucket".into()));
        };
        let kind = all
            .get(first)
            .ok_or_else(|| Error::InvalidArgument(format!("no parameter {first}")))?
            .f_kind()?;
        let mut total = 0;
        for &i in &params {
            let p = all
                .get(i)
                .ok_or_else(|| Error::InvalidArgument(format!("no parameter {i}")))?;
            if p.f_kind()? != kind {
                return Err(Error::InvalidArgument(format!(
                    "parameters {first} and {i} differ in kind ({kind:?}, {:?})",
                    p.kind()
                )));
            }
            total += p.numel() as i64;
        }
        let flat = Tensor::f_zeros([total], (kind, device))?;
        Ok(Bucket { params, flat })
    }

    /// The parameter indices, in bucket order.
    pub fn params(&self) -> &[usize] {
        &self.params
    }

    /// The flat tensor (a handle sharing its storage).
    pub fn flat(&self) -> Tensor {
        self.flat.shallow_clone()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.flat.numel()
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.numel() * self.flat.kind().elt_size_in_bytes()
    }

    /// The parameters' gradients in bucket order, to copy in; a parameter
    /// without one (unused in this step) contributes zeros.
    pub fn gradients(&self, all: &[Tensor]) -> Result<Vec<Tensor>> {
        self.params
            .iter()
            .map(|&i| {
                let g = all[i].f_grad()?;
                Ok(if g.defined() {
                    g
                } else {
                    all[i].f_zeros_like()?
                })
            })
            .collect()
    }

    /// The parameters' gradients in bucket order, to copy the averages back
    /// into, giving a parameter that had none a zero one (so every rank's
    /// optimizer sees one).
    pub fn gradients_to_fill(&self, all: &[Tensor]) -> Result<Vec<Tensor>> {
        self.params
            .iter()
            .map(|&i| {
                let g = all[i].f_grad()?;
                if g.defined() {
                    Ok(g)
                } else {
                    define_grad(&all[i])
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    const MIB: usize = 1 << 20;

    fn sizes(bytes: &[usize]) -> Vec<(usize, u8)> {
        bytes.iter().map(|&b| (b, 0)).collect()
    }

    #[test]
    fn reverse_order_small_first_bucket_then_cap() {
        // Registration order 0..6; ready order 5..0. The first bucket closes as
        // soon as it reaches 1 MiB (the parameter that crosses stays in it), then
        // buckets fill up to 4 MiB.
        let p = sizes(&[3 * MIB, MIB, 2 * MIB, 2 * MIB, MIB / 2, MIB / 2]);
        let b = assign(&p, &ready_order(6), &[MIB, 4 * MIB]).unwrap();
        assert_eq!(b, vec![vec![5, 4], vec![3, 2], vec![1, 0]]);
        // Without the small first limit, the first bucket takes 4 MiB too.
        let b = assign(&p, &ready_order(6), &[4 * MIB]).unwrap();
        assert_eq!(b, vec![vec![5, 4, 3, 2], vec![1, 0]]);
    }

    #[test]
    fn a_parameter_larger_than_the_cap_gets_its_own_bucket() {
        let p = sizes(&[10, 100 * MIB, 10]);
        let b = assign(&p, &ready_order(3), &[MIB, 25 * MIB]).unwrap();
        assert_eq!(b, vec![vec![2, 1], vec![0]]);
        let p = sizes(&[10, 100 * MIB, 2 * MIB]);
        let b = assign(&p, &ready_order(3), &[MIB, 25 * MIB]).unwrap();
        assert_eq!(b, vec![vec![2], vec![1], vec![0]]);
    }

    #[test]
    fn the_cnn_fits_in_one_default_bucket_like_pytorch() {
        // conv1 w,b, conv2 w,b, fc1 w,b, fc2 w,b in f32: 900,136 bytes < 1 MiB.
        let numel = [288, 32, 18_432, 64, 204_800, 128, 1_280, 10];
        let p: Vec<(usize, u8)> = numel.iter().map(|&n| (4 * n, 0)).collect();
        let limits = [DEFAULT_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_CAP_BYTES];
        let b = assign(&p, &ready_order(8), &limits).unwrap();
        assert_eq!(b, vec![(0..8).rev().collect::<Vec<_>>()]);
        // A 64 KiB cap closes buckets at fc1.weight and conv2.weight.
        let b = assign(&p, &ready_order(8), &[64 << 10]).unwrap();
        assert_eq!(b, vec![vec![7, 6, 5, 4], vec![3, 2], vec![1, 0]]);
    }

    #[test]
    fn keys_never_share_a_bucket() {
        let p = vec![(MIB, 'f'), (MIB, 'd'), (MIB, 'f'), (MIB, 'd')];
        let b = assign(&p, &ready_order(4), &[3 * MIB / 2]).unwrap();
        assert_eq!(b, vec![vec![3, 1], vec![2, 0]]);
        let b = assign(&p, &ready_order(4), &[4 * MIB]).unwrap();
        assert_eq!(b, vec![vec![3, 1], vec![2, 0]]);
    }

    #[test]
    fn bad_orders_and_limits_are_errors() {
        let p = sizes(&[1, 2, 3]);
        assert!(assign(&p, &[0, 1], &[MIB]).is_err());
        assert!(assign(&p, &[0, 1, 1], &[MIB]).is_err());
        assert!(assign(&p, &[0, 1, 3], &[MIB]).is_err());
        assert!(assign(&p, &ready_order(3), &[]).is_err());
        assert_eq!(assign(&p, &ready_order(3), &[0]).unwrap().len(), 3);
    }

    #[test]
    fn bucket_copies_gradients_in_and_back_out() {
        use crate::ddp::{GradSync, Standard};
        let a = Tensor::ones([2, 3], tch::kind::FLOAT_CPU).set_requires_grad(true);
        let b = Tensor::ones([4], tch::kind::FLOAT_CPU).set_requires_grad(true);
        let all = vec![a.shallow_clone(), b.shallow_clone()];
        (a.sum(Kind::Float) * 2.0).backward();
        // `b` has no gradient yet: it contributes zeros.
        let bucket = Bucket::new(vec![1, 0], &all, Device::Cpu).unwrap();
        assert_eq!((bucket.numel(), bucket.bytes()), (10, 40));
        Standard
            .flatten(&bucket.gradients(&all).unwrap(), &mut bucket.flat())
            .unwrap();
        let flat: Vec<f32> = Vec::try_from(bucket.flat()).unwrap();
        assert_eq!(flat, [0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]);
        let _ = bucket.flat().f_add_scalar_(1.0).unwrap();
        let fill = bucket.gradients_to_fill(&all).unwrap();
        Standard.unflatten(&bucket.flat(), &fill).unwrap();
        assert_eq!(Vec::<f32>::try_from(b.grad()).unwrap(), [1.0; 4]);
        assert_eq!(a.grad().size(), [2, 3]);
        assert!(
            a.grad()
                .equal(&Tensor::full([2, 3], 3.0, tch::kind::FLOAT_CPU))
        );
    }
}
