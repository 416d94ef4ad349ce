//! An 8-byte aligned byte buffer, so views of every dtype over it are aligned
//! (the conformance suite and the benchmark harness build their buffers here).

/// Bytes backed by `u64`s; the second field is the length in bytes.
pub(crate) struct Aligned(Vec<u64>, usize);

impl Aligned {
    /// A copy of `bytes`.
    pub(crate) fn from(bytes: &[u8]) -> Self {
        let mut v = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..bytes.len()].copy_from_slice(bytes);
        Aligned(v, bytes.len())
    }
    /// `len` zero bytes.
    pub(crate) fn zeros(len: usize) -> Self {
        Aligned(vec![0u64; len.div_ceil(8)], len)
    }
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.1
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.0)[..self.1]
    }
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.0)[..self.1]
    }
}
