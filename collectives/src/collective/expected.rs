//! Inputs and expected results, nccl-tests' `InitData` and expected values:
//! small integers, so float sums and products are exact and results compare
//! bit for bit against a sequential reference.

use std::fmt::Write as _;

use half::{bf16, f16};

use crate::aligned::Aligned;
use crate::element::{DType, Element, ReduceOp, finish_avg, reduce_into};
use crate::error::Result;
use crate::{Buffer, BufferMut, Communicator, Input};

/// One checked call: which collective, on what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// The collective.
    pub collective: crate::Collective,
    /// Element type.
    pub dtype: DType,
    /// Reduction, for reducing collectives.
    pub op: Option<ReduceOp>,
    /// Per-rank count (the crate's buffer-shape table).
    pub count: usize,
    /// The in-place form.
    pub in_place: bool,
    /// Root, for rooted collectives.
    pub root: usize,
    /// Varies the inputs from case to case.
    pub salt: usize,
}

/// The outcome of one checked call: `Err` describes a wrong result.
pub type Checked = std::result::Result<(), Wrong>;

/// A wrong result: how many elements differ, and a description of the first.
#[derive(Debug)]
pub struct Wrong {
    /// Wrong elements on this rank.
    pub elements: usize,
    /// The first difference, for people.
    pub message: String,
}

impl std::fmt::Display for Wrong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The input element `i` of `rank` for a case: small integers, signed where the
/// type allows, 1..=3 for products so they stay exact in bf16 across 5 ranks.
fn value(dtype: DType, op: Option<ReduceOp>, rank: usize, i: usize, salt: usize) -> i64 {
    // Period PERIOD in i: 13 = 4 (mod 9) and gcd(4, 9) = 1.
    let h = (rank * 7 + i * 13 + salt * 5) % PERIOD;
    if op == Some(ReduceOp::Prod) {
        (h % 3) as i64 + 1
    } else if dtype == DType::U8 {
        h as i64
    } else {
        h as i64 - 4
    }
}

/// Inputs repeat with this period (in elements), so big buffers are built by
/// copying one period instead of converting every element.
const PERIOD: usize = 9;

/// Repeats `period` to `bytes` bytes.
fn tile(period: &[u8], bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes);
    out.extend_from_slice(&period[..period.len().min(bytes)]);
    // Doubling: log2(bytes / period) large copies instead of many small ones.
    while out.len() < bytes {
        let take = out.len().min(bytes - out.len());
        out.extend_from_within(..take);
    }
    out
}

fn fill_typed<T: Element>(len: usize, f: impl Fn(usize) -> i64) -> Vec<u8> {
    let v: Vec<T> = (0..len).map(|i| T::from_i64(f(i))).collect();
    bytemuck::cast_slice(&v).to_vec()
}

fn fill(dtype: DType, len: usize, f: impl Fn(usize) -> i64) -> Vec<u8> {
    match dtype {
        DType::F32 => fill_typed::<f32>(len, f),
        DType::F64 => fill_typed::<f64>(len, f),
        DType::F16 => fill_typed::<f16>(len, f),
        DType::BF16 => fill_typed::<bf16>(len, f),
        DType::I32 => fill_typed::<i32>(len, f),
        DType::I64 => fill_typed::<i64>(len, f),
        DType::U8 => fill_typed::<u8>(len, f),
    }
}

impl Case {
    /// The case as the suite reports it.
    pub fn name(&self) -> String {
        let mut s = format!(
            "{} dtype={} count={} {}",
            self.collective,
            self.dtype,
            self.count,
            if self.in_place {
                "in-place"
            } else {
                "out-of-place"
            }
        );
        if let Some(op) = self.op {
            let _ = write!(s, " op={op}");
        }
        if super::of(self.collective).rooted {
            let _ = write!(s, " root={}", self.root);
        }
        s
    }

    /// Rank `rank`'s input of `len` elements.
    pub fn input(&self, rank: usize, len: usize) -> Vec<u8> {
        tile(&self.period(rank), len * self.dtype.size())
    }

    /// One period of rank `rank`'s input ([`value`] repeats every [`PERIOD`] elements).
    fn period(&self, rank: usize) -> Vec<u8> {
        fill(self.dtype, PERIOD, |i| {
            value(self.dtype, self.op, rank, i, self.salt)
        })
    }

    /// The element-wise reduction of every rank's input, sequentially in rank
    /// order: computed on one period, which is all it takes for periodic inputs.
    pub fn reduced(&self, world: usize, len: usize) -> Vec<u8> {
        let op = self.op.unwrap_or(ReduceOp::Sum);
        let mut acc = Aligned::from(&self.period(0));
        for r in 1..world {
            let x = Aligned::from(&self.period(r));
            reduce_into(self.dtype, op, acc.bytes_mut(), x.bytes());
        }
        if op == ReduceOp::Avg {
            finish_avg(self.dtype, acc.bytes_mut(), world);
        }
        tile(acc.bytes(), len * self.dtype.size())
    }

    /// The op the collective runs with (sum where it takes none).
    pub(crate) fn op_or_sum(&self) -> ReduceOp {
        self.op.unwrap_or(ReduceOp::Sum)
    }

    /// Byte range of rank `r`'s block of `count` elements.
    pub(crate) fn block(&self, r: usize) -> std::ops::Range<usize> {
        let b = self.count * self.dtype.size();
        r * b..(r + 1) * b
    }

    /// Runs the collective once (its descriptor's `run`) with `input`,
    /// writing into `out`.
    pub(crate) fn call(
        &self,
        comm: &dyn Communicator,
        input: Input<'_>,
        out: &mut Aligned,
    ) -> Result<()> {
        let out = &mut BufferMut::from_bytes(self.dtype, out.bytes_mut())?;
        (super::of(self.collective).run)(comm, input, out, self.op_or_sum(), self.root)
    }

    /// Compares `got` with `want` element by element.
    pub(crate) fn compare(&self, what: &str, got: &[u8], want: &[u8]) -> Checked {
        compare(what, got, want, self.dtype.size())
    }

    /// The output buffer for a case whose output has the input's shape: the
    /// input itself for the in-place form, zeros otherwise.
    pub(crate) fn output_like(&self, input: &Aligned) -> Aligned {
        if self.in_place {
            Aligned::from(input.bytes())
        } else {
            Aligned::zeros(input.len())
        }
    }

    /// Runs a gathering collective (all_gather, gather): every rank's input
    /// becomes block `rank` of the output. Returns the output and what a rank
    /// that receives everything must hold.
    pub(crate) fn gathered(&self, comm: &dyn Communicator) -> Result<(Aligned, Vec<u8>)> {
        let (me, n) = (comm.rank(), comm.world_size());
        let want: Vec<u8> = (0..n).flat_map(|r| self.input(r, self.count)).collect();
        let input = Aligned::from(&self.input(me, self.count));
        let mut out = Aligned::zeros(n * self.count * self.dtype.size());
        let inp = if self.in_place {
            out.bytes_mut()[self.block(me)].copy_from_slice(input.bytes());
            Input::InPlace
        } else {
            Input::Buffer(Buffer::from_bytes(self.dtype, input.bytes())?)
        };
        self.call(comm, inp, &mut out)?;
        Ok((out, want))
    }

    /// Runs a collective whose output is this rank's block (reduce_scatter,
    /// scatter) with `input` and compares that block with `want`. In place the
    /// call works on one buffer of every rank's block, which starts as `input`
    /// zero-padded (a scatter's non-root has no input).
    pub(crate) fn check_own_block(
        &self,
        comm: &dyn Communicator,
        input: &[u8],
        want: &[u8],
    ) -> Result<Checked> {
        let (me, n, es) = (comm.rank(), comm.world_size(), self.dtype.size());
        Ok(if self.in_place {
            let mut out = Aligned::zeros(n * self.count * es);
            out.bytes_mut()[..input.len()].copy_from_slice(input);
            self.call(comm, Input::InPlace, &mut out)?;
            self.compare("own block", &out.bytes()[self.block(me)], want)
        } else {
            let input = Aligned::from(input);
            let mut out = Aligned::zeros(self.count * es);
            self.call(
                comm,
                Input::Buffer(Buffer::from_bytes(self.dtype, input.bytes())?),
                &mut out,
            )?;
            self.compare("output", out.bytes(), want)
        })
    }

    /// The collective's input argument: `InPlace`, or a view of `input`.
    pub(crate) fn input_arg<'a>(&self, input: &'a Aligned) -> Result<Input<'a>> {
        Ok(if self.in_place {
            Input::InPlace
        } else {
            Input::Buffer(Buffer::from_bytes(self.dtype, input.bytes())?)
        })
    }
}

fn compare(what: &str, got: &[u8], want: &[u8], esize: usize) -> Checked {
    if got == want {
        return Ok(());
    }
    if got.len() != want.len() {
        return Err(Wrong {
            elements: want.len().max(got.len()) / esize.max(1),
            message: format!("{what}: {} bytes, expected {}", got.len(), want.len()),
        });
    }
    let wrong = got
        .chunks(esize)
        .zip(want.chunks(esize))
        .filter(|(a, b)| a != b)
        .count();
    let first = got
        .chunks(esize)
        .zip(want.chunks(esize))
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    Err(Wrong {
        elements: wrong,
        message: format!(
            "{what}: {wrong} wrong elements, first at index {first}: got bytes {:?}, expected {:?}",
            &got[first * esize..(first + 1) * esize],
            &want[first * esize..(first + 1) * esize]
        ),
    })
}
