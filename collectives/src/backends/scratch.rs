//! Scratch memory for the host-memory backends: staging copies and work
//! buffers, kept between calls so a steady loop allocates nothing.

/// An 8-byte-aligned scratch area of `bytes` bytes, grown on demand (aligned,
/// so reductions over it take the vectorised path for every dtype).
pub(crate) fn area(v: &mut Vec<u64>, bytes: usize) -> &mut [u8] {
    let words = bytes.div_ceil(8);
    if v.len() < words {
        v.resize(words, 0);
    }
    &mut bytemuck::cast_slice_mut(v.as_mut_slice())[..bytes]
}
