//! The conformance suite: every collective × dtype × op × size × in/out-of-place
//! × root, checked exactly against a sequential reference.
//!
//! It runs on any [`Communicator`], so one suite serves every backend: the
//! tests run it on threads and on real processes over each transport, and
//! `ringside conformance` runs it under any launcher (mpirun, torchrun, srun).
//! Inputs are small integers, so float sums and products are exact and results
//! compare bit for bit.

use std::fmt::Write as _;

use half::{bf16, f16};

use crate::aligned::Aligned;
use crate::element::{DType, Element, ReduceOp, finish_avg, reduce_into};
use crate::error::Result;
use crate::{Buffer, BufferMut, Collective, Communicator, Input};

/// What to cover.
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    /// Collectives to run.
    pub collectives: Vec<Collective>,
    /// Element types.
    pub dtypes: Vec<DType>,
    /// Reduction ops (for the reducing collectives).
    pub ops: Vec<ReduceOp>,
    /// Per-rank sizes; [`Size::Bytes`] becomes a count by dtype.
    pub sizes: Vec<Size>,
    /// Also run the in-place forms.
    pub in_place: bool,
}

/// A per-rank message size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// This many elements.
    Count(usize),
    /// `world · k + 1` elements: never divides evenly into per-rank blocks.
    WorldTimes(usize),
    /// This many bytes' worth of elements.
    Bytes(usize),
}

impl Size {
    fn count(self, world: usize, dtype: DType) -> usize {
        match self {
            Size::Count(c) => c,
            Size::WorldTimes(k) => world * k + 1,
            Size::Bytes(b) => b / dtype.size(),
        }
    }
}

impl SuiteConfig {
    /// The full matrix the issue asks for: sizes {0, 1, 7, 1000, world·k+1, 4 MiB}.
    pub fn full() -> Self {
        SuiteConfig {
            collectives: Collective::ALL.to_vec(),
            dtypes: DType::ALL.to_vec(),
            ops: ReduceOp::ALL.to_vec(),
            sizes: vec![
                Size::Count(0),
                Size::Count(1),
                Size::Count(7),
                Size::Count(1000),
                Size::WorldTimes(37),
                Size::Bytes(4 << 20),
            ],
            in_place: true,
        }
    }

    /// A quick subset (tens of milliseconds) for smoke tests and the tour.
    pub fn quick() -> Self {
        SuiteConfig {
            dtypes: vec![DType::F32, DType::I64, DType::BF16],
            ops: vec![ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg],
            sizes: vec![
                Size::Count(0),
                Size::Count(7),
                Size::WorldTimes(37),
                Size::Bytes(64 << 10),
            ],
            ..SuiteConfig::full()
        }
    }
}

/// What a run found.
#[derive(Debug, Default)]
pub struct SuiteReport {
    /// Cases run.
    pub cases: usize,
    /// One line per failing case.
    pub failures: Vec<String>,
    /// Cases the backend declined with [`crate::Error::Unsupported`] (for
    /// example bfloat16 on a library without it), one line each.
    pub unsupported: Vec<String>,
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

struct Case {
    collective: Collective,
    dtype: DType,
    op: Option<ReduceOp>,
    count: usize,
    in_place: bool,
    root: usize,
    salt: usize,
}

impl Case {
    fn name(&self) -> String {
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
        if matches!(
            self.collective,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        ) {
            let _ = write!(s, " root={}", self.root);
        }
        s
    }

    /// Rank `rank`'s input of `len` elements.
    fn input(&self, rank: usize, len: usize) -> Vec<u8> {
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
    fn reduced(&self, world: usize, len: usize) -> Vec<u8> {
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
}

/// A wrong result: how many elements differ, and a description of the first.
#[derive(Debug)]
struct Wrong {
    elements: usize,
    message: String,
}

impl std::fmt::Display for Wrong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn compare(what: &str, got: &[u8], want: &[u8], esize: usize) -> std::result::Result<(), Wrong> {
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

/// Runs `collective` once on fresh integer inputs and returns how many
/// elements of this rank's result are wrong (0 when exact). Benchmarks use it
/// for nccl-tests' `#wrong` column; every rank must call it with the same
/// arguments. `count` is the per-rank count of the buffer-shape table in the
/// crate docs.
pub fn check_once(
    comm: &dyn Communicator,
    collective: Collective,
    dtype: DType,
    op: Option<ReduceOp>,
    count: usize,
    in_place: bool,
    root: usize,
) -> Result<usize> {
    let case = Case {
        collective,
        dtype,
        op,
        count,
        in_place,
        root,
        salt: 0,
    };
    Ok(match run_case(comm, &case)? {
        Ok(()) => 0,
        Err(w) => w.elements.max(1),
    })
}

/// The output buffer for a case whose output has the input's shape: the input
/// itself for the in-place form, zeros otherwise.
fn output_like(c: &Case, input: &Aligned) -> Aligned {
    if c.in_place {
        Aligned::from(input.bytes())
    } else {
        Aligned::zeros(input.len())
    }
}

/// The collective's input argument: `InPlace`, or a view of `input`.
fn input_arg<'a>(c: &Case, input: &'a Aligned) -> Result<Input<'a>> {
    Ok(if c.in_place {
        Input::InPlace
    } else {
        Input::Buffer(Buffer::from_bytes(c.dtype, input.bytes())?)
    })
}

/// Runs one case; `Ok(Err(_))` is a wrong result, `Err(_)` a communicator error.
fn run_case(comm: &dyn Communicator, c: &Case) -> Result<std::result::Result<(), Wrong>> {
    let (me, n) = (comm.rank(), comm.world_size());
    let (dt, count, es) = (c.dtype, c.count, c.dtype.size());
    let op = c.op.unwrap_or(ReduceOp::Sum);
    let block = |r: usize| r * count * es..(r + 1) * count * es;
    let check = |what: &str, got: &[u8], want: &[u8]| compare(what, got, want, es);
    Ok(match c.collective {
        Collective::AllReduce => {
            let want = c.reduced(n, count);
            let input = Aligned::from(&c.input(me, count));
            let mut out = output_like(c, &input);
            let inp = input_arg(c, &input)?;
            comm.all_reduce(inp, &mut BufferMut::from_bytes(dt, out.bytes_mut())?, op)?;
            check("output", out.bytes(), &want)
        }
        Collective::Broadcast => {
            let want = c.input(c.root, count);
            let input = Aligned::from(&c.input(me, count));
            let mut out = output_like(c, &input);
            let inp = input_arg(c, &input)?;
            comm.broadcast(
                inp,
                &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
                c.root,
            )?;
            check("output", out.bytes(), &want)
        }
        Collective::Reduce => {
            let input = Aligned::from(&c.input(me, count));
            let mut out = output_like(c, &input);
            let inp = input_arg(c, &input)?;
            comm.reduce(
                inp,
                &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
                op,
                c.root,
            )?;
            if me == c.root {
                check("root output", out.bytes(), &c.reduced(n, count))
            } else if c.in_place {
                check(
                    "non-root buffer (must be left unchanged)",
                    out.bytes(),
                    input.bytes(),
                )
            } else {
                Ok(())
            }
        }
        Collective::AllGather => {
            let want: Vec<u8> = (0..n).flat_map(|r| c.input(r, count)).collect();
            let input = Aligned::from(&c.input(me, count));
            let mut out = Aligned::zeros(n * count * es);
            let inp = if c.in_place {
                out.bytes_mut()[block(me)].copy_from_slice(input.bytes());
                Input::InPlace
            } else {
                Input::Buffer(Buffer::from_bytes(dt, input.bytes())?)
            };
            comm.all_gather(inp, &mut BufferMut::from_bytes(dt, out.bytes_mut())?)?;
            check("output", out.bytes(), &want)
        }
        Collective::ReduceScatter => {
            let want = c.reduced(n, n * count);
            let input = Aligned::from(&c.input(me, n * count));
            if c.in_place {
                let mut out = Aligned::from(input.bytes());
                comm.reduce_scatter(
                    Input::InPlace,
                    &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
                    op,
                )?;
                check("own block", &out.bytes()[block(me)], &want[block(me)])
            } else {
                let mut out = Aligned::zeros(count * es);
                comm.reduce_scatter(
                    Input::Buffer(Buffer::from_bytes(dt, input.bytes())?),
                    &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
                    op,
                )?;
                check("output", out.bytes(), &want[block(me)])
            }
        }
        Collective::AllToAll => {
            let want: Vec<u8> = (0..n)
                .flat_map(|r| c.input(r, n * count)[block(me)].to_vec())
                .collect();
            let input = Aligned::from(&c.input(me, n * count));
            let mut out = output_like(c, &input);
            let inp = input_arg(c, &input)?;
            comm.all_to_all(inp, &mut BufferMut::from_bytes(dt, out.bytes_mut())?)?;
            check("output", out.bytes(), &want)
        }
        Collective::Gather => {
            let want: Vec<u8> = (0..n).flat_map(|r| c.input(r, count)).collect();
            let input = Aligned::from(&c.input(me, count));
            let mut out = Aligned::zeros(n * count * es);
            let inp = if c.in_place {
                out.bytes_mut()[block(me)].copy_from_slice(input.bytes());
                Input::InPlace
            } else {
                Input::Buffer(Buffer::from_bytes(dt, input.bytes())?)
            };
            comm.gather(
                inp,
                &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
                c.root,
            )?;
            if me == c.root {
                check("root output", out.bytes(), &want)
            } else {
                Ok(())
            }
        }
        Collective::Scatter => {
            let root_data = c.input(c.root, n * count);
            let want = root_data[block(me)].to_vec();
            if c.in_place {
                let mut out = if me == c.root {
                    Aligned::from(&root_data)
                } else {
                    Aligned::zeros(n * count * es)
                };
                comm.scatter(
                    Input::InPlace,
                    &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
                    c.root,
                )?;
                check("own block", &out.bytes()[block(me)], &want)
            } else {
                let input = Aligned::from(if me == c.root { &root_data } else { &[] });
                let mut out = Aligned::zeros(count * es);
                comm.scatter(
                    Input::Buffer(Buffer::from_bytes(dt, input.bytes())?),
                    &mut BufferMut::from_bytes(dt, out.bytes_mut())?,
                    c.root,
                )?;
                check("output", out.bytes(), &want)
            }
        }
        Collective::Barrier => {
            comm.barrier()?;
            Ok(())
        }
        Collective::SendRecv => {
            if n == 1 {
                return Ok(Ok(()));
            }
            let (right, left) = ((me + 1) % n, (me + n - 1) % n);
            let input = Aligned::from(&c.input(me, count));
            let mut out = Aligned::zeros(count * es);
            let send = Buffer::from_bytes(dt, input.bytes())?;
            // Odd ranks receive first, so blocking sends of large messages cannot
            // all wait on each other around the ring.
            if me % 2 == 0 {
                comm.send(&send, right)?;
                comm.recv(&mut BufferMut::from_bytes(dt, out.bytes_mut())?, left)?;
            } else {
                comm.recv(&mut BufferMut::from_bytes(dt, out.bytes_mut())?, left)?;
                comm.send(&send, right)?;
            }
            check("received", out.bytes(), &c.input(left, count))
        }
    })
}

/// Runs the suite. A wrong result is recorded and the run goes on; a
/// communicator error stops it (the communicator is unusable afterwards).
/// `progress` is called after every case with (cases done, case name).
pub fn run(
    comm: &dyn Communicator,
    cfg: &SuiteConfig,
    mut progress: impl FnMut(usize, &str),
) -> Result<SuiteReport> {
    let n = comm.world_size();
    let mut report = SuiteReport::default();
    let mut salt = 0;
    for &collective in &cfg.collectives {
        let reducing = matches!(
            collective,
            Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
        );
        let rooted = matches!(
            collective,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        );
        let ops: Vec<Option<ReduceOp>> = if reducing {
            cfg.ops.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        let sizes: &[Size] = if collective == Collective::Barrier {
            &[Size::Count(0)]
        } else {
            &cfg.sizes
        };
        for &dtype in if collective == Collective::Barrier {
            &[DType::U8][..]
        } else {
            &cfg.dtypes[..]
        } {
            for &op in &ops {
                for &size in sizes {
                    for in_place in [false, true] {
                        if in_place
                            && (!cfg.in_place
                                || matches!(collective, Collective::Barrier | Collective::SendRecv))
                        {
                            continue;
                        }
                        salt += 1;
                        // Roots other than 0 get most of the coverage; rotate so
                        // every rank is root for some case.
                        let root = if rooted { (n - 1 + salt) % n } else { 0 };
                        let case = Case {
                            collective,
                            dtype,
                            op,
                            count: size.count(n, dtype),
                            in_place,
                            root,
                            salt,
                        };
                        let name = case.name();
                        match run_case(comm, &case) {
                            Ok(Ok(())) => report.cases += 1,
                            Ok(Err(wrong)) => {
                                report.failures.push(format!("{name}: {wrong}"));
                                report.cases += 1;
                            }
                            // A backend declines a case identically on every
                            // rank, before communicating: record it and go on.
                            Err(crate::Error::Unsupported { what, .. }) => {
                                report.unsupported.push(format!("{name}: {what}"))
                            }
                            Err(e) => return Err(e),
                        }
                        progress(report.cases, &name);
                    }
                }
            }
        }
    }
    Ok(report)
}
