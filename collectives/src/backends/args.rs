//! Argument checks and scratch memory shared by the host-memory backends, so
//! every backend rejects bad buffers with the same words.

use crate::Backend;
use crate::Input;
use crate::element::DType;
use crate::error::{Error, Result};

/// An 8-byte-aligned scratch area of `bytes` bytes, grown on demand (aligned,
/// so reductions over it take the vectorised path for every dtype).
pub(crate) fn area(v: &mut Vec<u64>, bytes: usize) -> &mut [u8] {
    let words = bytes.div_ceil(8);
    if v.len() < words {
        v.resize(words, 0);
    }
    &mut bytemuck::cast_slice_mut(v.as_mut_slice())[..bytes]
}

/// The host bytes of an out-of-place input after checking its dtype and
/// length against the output's; `None` for the in-place form.
pub(crate) fn input_bytes<'a>(
    backend: Backend,
    input: &'a Input<'_>,
    dtype: DType,
    len: usize,
    what: &str,
) -> Result<Option<&'a [u8]>> {
    match input {
        Input::InPlace => Ok(None),
        Input::Buffer(b) => {
            if b.dtype() != dtype {
                return Err(Error::InvalidArgument(format!(
                    "{what}: input is {} but output is {dtype}",
                    b.dtype()
                )));
            }
            if b.len() != len {
                return Err(Error::InvalidArgument(format!(
                    "{what}: input has {} elements, expected {len}",
                    b.len()
                )));
            }
            b.host_bytes(backend).map(Some)
        }
    }
}

/// The per-rank count of a buffer holding one block per rank.
pub(crate) fn per_rank(total: usize, n: usize, what: &str) -> Result<usize> {
    if total % n != 0 {
        return Err(Error::InvalidArgument(format!(
            "{what}: {total} elements is not a multiple of the world size {n}"
        )));
    }
    Ok(total / n)
}
