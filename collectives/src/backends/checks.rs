//! Argument checks shared by the backends, so every backend rejects bad
//! buffers with the same words.

use crate::Backend;
use crate::Input;
use crate::element::DType;
use crate::error::{Error, Result};

/// Checks an out-of-place input's dtype and length against the output's; the
/// in-place form has nothing to check.
#[inline]
pub(crate) fn check_input(input: &Input<'_>, dtype: DType, len: usize, what: &str) -> Result<()> {
    match input {
        Input::Buffer(b) if b.dtype() != dtype || b.len() != len => {
            Err(input_mismatch(b.dtype(), b.len(), dtype, len, what))
        }
        _ => Ok(()),
    }
}

/// The error for an input [`check_input`] refuses (out of line: never on a
/// good call's path).
#[cold]
#[inline(never)]
fn input_mismatch(got: DType, got_len: usize, dtype: DType, len: usize, what: &str) -> Error {
    if got != dtype {
        Error::InvalidArgument(format!("{what}: input is {got} but output is {dtype}"))
    } else {
        Error::InvalidArgument(format!(
            "{what}: input has {got_len} elements, expected {len}"
        ))
    }
}

/// The host bytes of an out-of-place input after [`check_input`]; `None` for
/// the in-place form.
#[inline]
pub(crate) fn input_bytes<'a>(
    backend: Backend,
    input: &'a Input<'_>,
    dtype: DType,
    len: usize,
    what: &str,
) -> Result<Option<&'a [u8]>> {
    check_input(input, dtype, len, what)?;
    match input {
        Input::InPlace => Ok(None),
        Input::Buffer(b) => b.host_bytes(backend).map(Some),
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

/// `root` must be a rank of a world of `world`.
pub(crate) fn check_root(root: usize, world: usize) -> Result<()> {
    if root >= world {
        return Err(Error::InvalidArgument(format!(
            "root {root} is not a rank of this world of {world}"
        )));
    }
    Ok(())
}

/// gather's per-rank count, checking that the output holds one block per rank
/// wherever it is written (the root) or holds the input (in place, every rank).
pub(crate) fn gather_count(
    input: &Input<'_>,
    output_len: usize,
    n: usize,
    is_root: bool,
) -> Result<usize> {
    let count = match input {
        Input::Buffer(b) => b.len(),
        Input::InPlace => per_rank(output_len, n, "in-place gather output")?,
    };
    if (is_root || matches!(input, Input::InPlace)) && output_len != n * count {
        return Err(Error::InvalidArgument(format!(
            "gather: output has {output_len} elements, expected {} (world {n} x {count})",
            n * count
        )));
    }
    Ok(count)
}

/// The per-rank count of a collective whose output is one block out of place
/// and one block per rank in place (reduce_scatter, scatter); `what` names it.
pub(crate) fn blocked_count(
    input: &Input<'_>,
    output_len: usize,
    n: usize,
    what: &str,
) -> Result<usize> {
    match input {
        Input::InPlace => per_rank(output_len, n, &format!("in-place {what} output")),
        Input::Buffer(_) => Ok(output_len),
    }
}
