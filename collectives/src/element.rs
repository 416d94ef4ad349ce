//! Element types, reduction operators and the reduction kernels.
//!
//! Reductions work on raw bytes tagged with a [`DType`], because transports hand
//! us bytes straight out of a socket or a shared-memory ring. Aligned inputs take
//! a typed loop the compiler vectorises; unaligned ones fall back to
//! element-by-element unaligned loads.

use std::fmt;

use bytemuck::Pod;
use half::{bf16, f16};

/// The element types every backend understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 16-bit IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Unsigned byte.
    U8,
}

impl DType {
    /// Every dtype, in a fixed order (the conformance suite loops over it).
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// The short name nccl-tests prints (`float`, `half`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::F16 => "half",
            DType::BF16 => "bfloat16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
        }
    }

    /// Parses nccl-tests names and the Rust-style ones (`f32`, `i64`, ...).
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "float" | "f32" | "float32" => DType::F32,
            "double" | "f64" | "float64" => DType::F64,
            "half" | "f16" | "float16" => DType::F16,
            "bfloat16" | "bf16" => DType::BF16,
            "int32" | "i32" | "int" => DType::I32,
            "int64" | "i64" => DType::I64,
            "uint8" | "u8" => DType::U8,
            _ => return None,
        })
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// A stable one-byte code for wire headers.
    pub const fn code(self) -> u8 {
        match self {
            DType::F32 => 0,
            DType::F64 => 1,
            DType::F16 => 2,
            DType::BF16 => 3,
            DType::I32 => 4,
            DType::I64 => 5,
            DType::U8 => 6,
        }
    }

    /// Inverse of [`DType::code`].
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operators.
///
/// `Avg` sums across ranks and divides the final sum by the world size once.
/// For integer types the division truncates toward zero, and the sum itself wraps
/// in the element type (as NCCL's integer sums do), so an average of `u8` values
/// whose sum exceeds 255 is the wrapped sum divided by the world size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum (for floats, a NaN loses to a number, as `f32::min`).
    Min,
    /// Maximum (for floats, a NaN loses to a number, as `f32::max`).
    Max,
    /// Sum divided by the world size (see the type's documentation for integers).
    Avg,
}

impl ReduceOp {
    /// Every op, in a fixed order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// The name nccl-tests prints.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }

    /// Parses an op name.
    pub fn parse(s: &str) -> Option<ReduceOp> {
        ReduceOp::ALL
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(s))
    }

    /// A stable one-byte code for wire headers.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The op that combines two ranks' elements: `Avg` sums (the division by
    /// the world size comes once, at the end); every other op is itself.
    pub const fn combining(self) -> ReduceOp {
        match self {
            ReduceOp::Avg => ReduceOp::Sum,
            op => op,
        }
    }

    /// Inverse of [`ReduceOp::code`].
    pub fn from_code(code: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that maps onto a [`DType`].
pub trait Element: Pod + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// The dtype tag for this type.
    const DTYPE: DType;
    /// Converts a small integer exactly (the conformance suite builds inputs from these).
    fn from_i64(v: i64) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr, $conv:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn from_i64(v: i64) -> Self {
                $conv(v)
            }
        }
    };
}
element!(f32, DType::F32, |v: i64| v as f32);
element!(f64, DType::F64, |v: i64| v as f64);
element!(f16, DType::F16, |v: i64| f16::from_f32(v as f32));
element!(bf16, DType::BF16, |v: i64| bf16::from_f32(v as f32));
element!(i32, DType::I32, |v: i64| v as i32);
element!(i64, DType::I64, |v: i64| v);
element!(u8, DType::U8, |v: i64| v as u8);

/// Applies `f` element-wise: `dst[i] = f(dst[i], src[i])`.
#[inline]
fn zip_apply<T: Pod>(dst: &mut [u8], src: &[u8], f: impl Fn(T, T) -> T) {
    let size = std::mem::size_of::<T>();
    let align = std::mem::align_of::<T>();
    let aligned = (dst.as_ptr() as usize) % align == 0 && (src.as_ptr() as usize) % align == 0;
    if aligned {
        // Cannot fail: lengths were checked by the caller and alignment just above.
        let d: &mut [T] = bytemuck::cast_slice_mut(dst);
        let s: &[T] = bytemuck::cast_slice(src);
        for (x, y) in d.iter_mut().zip(s) {
            *x = f(*x, *y);
        }
    } else {
        for (x, y) in dst.chunks_exact_mut(size).zip(src.chunks_exact(size)) {
            let a: T = bytemuck::pod_read_unaligned(x);
            let b: T = bytemuck::pod_read_unaligned(y);
            x.copy_from_slice(bytemuck::bytes_of(&f(a, b)));
        }
    }
}

macro_rules! int_ops {
    ($t:ty, $op:expr, $dst:expr, $src:expr) => {
        match $op {
            ReduceOp::Sum | ReduceOp::Avg => zip_apply::<$t>($dst, $src, |a, b| a.wrapping_add(b)),
            ReduceOp::Prod => zip_apply::<$t>($dst, $src, |a, b| a.wrapping_mul(b)),
            ReduceOp::Min => zip_apply::<$t>($dst, $src, |a, b| a.min(b)),
            ReduceOp::Max => zip_apply::<$t>($dst, $src, |a, b| a.max(b)),
        }
    };
}

macro_rules! float_ops {
    ($t:ty, $op:expr, $dst:expr, $src:expr) => {
        match $op {
            ReduceOp::Sum | ReduceOp::Avg => zip_apply::<$t>($dst, $src, |a, b| a + b),
            ReduceOp::Prod => zip_apply::<$t>($dst, $src, |a, b| a * b),
            ReduceOp::Min => zip_apply::<$t>($dst, $src, |a, b| a.min(b)),
            ReduceOp::Max => zip_apply::<$t>($dst, $src, |a, b| a.max(b)),
        }
    };
}

/// `dst[i] = op(dst[i], src[i])` over raw bytes of `dtype`.
///
/// For [`ReduceOp::Avg`] this sums; call [`finish_avg`] once on the final result.
/// Both slices must have the same length, a multiple of `dtype.size()`; extra
/// trailing bytes are ignored.
pub fn reduce_into(dtype: DType, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len()) / dtype.size() * dtype.size();
    let (dst, src) = (&mut dst[..n], &src[..n]);
    match dtype {
        DType::F32 => float_ops!(f32, op, dst, src),
        DType::F64 => float_ops!(f64, op, dst, src),
        // half's arithmetic goes through f32 and rounds back once per operation,
        // which is what a native half add would give for these inputs.
        DType::F16 => float_ops!(f16, op, dst, src),
        DType::BF16 => float_ops!(bf16, op, dst, src),
        DType::I32 => int_ops!(i32, op, dst, src),
        DType::I64 => int_ops!(i64, op, dst, src),
        DType::U8 => int_ops!(u8, op, dst, src),
    }
}

/// Divides every element by `n`: the last step of [`ReduceOp::Avg`].
pub fn finish_avg(dtype: DType, buf: &mut [u8], n: usize) {
    fn div<T: Pod>(buf: &mut [u8], f: impl Fn(T) -> T) {
        let size = std::mem::size_of::<T>();
        for x in buf.chunks_exact_mut(size) {
            let a: T = bytemuck::pod_read_unaligned(x);
            x.copy_from_slice(bytemuck::bytes_of(&f(a)));
        }
    }
    match dtype {
        DType::F32 => div::<f32>(buf, |a| a / n as f32),
        DType::F64 => div::<f64>(buf, |a| a / n as f64),
        DType::F16 => div::<f16>(buf, |a| f16::from_f32(a.to_f32() / n as f32)),
        DType::BF16 => div::<bf16>(buf, |a| bf16::from_f32(a.to_f32() / n as f32)),
        DType::I32 => div::<i32>(buf, |a| a / n as i32),
        DType::I64 => div::<i64>(buf, |a| a / n as i64),
        DType::U8 => div::<u8>(buf, |a| a / n as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_aligned_and_unaligned_f32() {
        let a: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..100).map(|i| 2.0 * i as f32).collect();
        let mut d = bytemuck::cast_slice::<f32, u8>(&a).to_vec();
        reduce_into(DType::F32, ReduceOp::Sum, &mut d, bytemuck::cast_slice(&b));
        let out: Vec<f32> = d
            .chunks_exact(4)
            .map(bytemuck::pod_read_unaligned)
            .collect();
        assert_eq!(out[99], 297.0);
        // Same through a deliberately misaligned view.
        let mut raw = vec![0u8; 401];
        raw[1..].copy_from_slice(bytemuck::cast_slice(&a));
        reduce_into(
            DType::F32,
            ReduceOp::Max,
            &mut raw[1..],
            bytemuck::cast_slice(&b),
        );
        let v: f32 = bytemuck::pod_read_unaligned(&raw[1 + 4 * 7..1 + 4 * 8]);
        assert_eq!(v, 14.0);
    }

    #[test]
    fn integer_avg_truncates_toward_zero() {
        let mut d = bytemuck::cast_slice::<i32, u8>(&[-7, 7]).to_vec();
        finish_avg(DType::I32, &mut d, 2);
        let got: Vec<i32> = d
            .chunks_exact(4)
            .map(bytemuck::pod_read_unaligned)
            .collect();
        assert_eq!(got, [-3, 3]);
    }

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d.code()), Some(d));
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_code(op.code()), Some(op));
        }
    }

    /// Gloo's shim and MPI's op tables index [Sum, Prod, Min, Max] by the
    /// combining op's code.
    #[test]
    fn avg_combines_as_a_sum_and_the_rest_as_themselves() {
        let codes = ReduceOp::ALL.map(|op| op.combining().code());
        assert_eq!(codes, [0, 1, 2, 3, 0]);
    }
}
