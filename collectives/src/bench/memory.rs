//! Does a sweep fit in this machine's memory? Asked before the first buffer is
//! allocated: `-e 200G` used to allocate until the kernel's OOM killer ended the
//! job (and could take other processes with it), or abort under `ulimit -v`.

use super::Case;
use crate::collective::Shape;
use crate::error::{Error, Result};

/// The bytes one rank allocates for `case` at `n` ranks: the timed input and
/// output buffers, and as much again for the check's fresh input, output and
/// expected values (an estimate from above: backends' own scratch is small
/// beside it). An error where that is more than 2^64 bytes (`-e` near
/// `u64::MAX`), which no memory holds: counted in `u64` it wrapped to a small
/// number, passed the check, and the allocation aborted the process.
pub fn bytes_needed(case: &Case, n: usize) -> Result<u64> {
    let shape = Shape::of(case.collective, case.bytes, n, case.dtype);
    let e = case.dtype.size() as u128;
    // Two usize counts times a small element size times 2 cannot overflow u128.
    let need = 2 * (shape.input as u128 + shape.output as u128) * e;
    u64::try_from(need).map_err(|_| {
        Error::InvalidArgument(format!(
            "{} bytes × 2 buffers (input and output) × 2 (timed, then checked) per rank \
             does not fit in memory (more than 2^64 bytes): lower the largest size",
            case.bytes
        ))
    })
}

/// What this process may still allocate: the smaller of the kernel's estimate of
/// available memory (`MemAvailable`) and the address-space limit (`ulimit -v`).
/// `None` where neither is known.
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let avail = meminfo.as_deref().and_then(mem_available);
    // SAFETY: getrlimit writes one rlimit struct we own.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let as_limit = (unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY)
        .then_some(lim.rlim_cur);
    match (avail, as_limit) {
        (Some(a), Some(l)) => Some(a.min(l)),
        (a, l) => a.or(l),
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuses a sweep whose largest case needs more than `available` bytes for
/// `local_ranks` ranks of `needed_per_rank` each, with the figures in the error
/// and the flag (`size_flag`) that lowers it.
pub fn check_fits(
    needed_per_rank: u64,
    local_ranks: usize,
    available: Option<u64>,
    size_flag: &str,
) -> Result<()> {
    let ranks = local_ranks.max(1);
    let Some(total) = needed_per_rank.checked_mul(ranks as u64) else {
        // Refused whatever is available (even unknown): no memory holds it.
        return Err(Error::InvalidArgument(format!(
            "{needed_per_rank} bytes per rank × {ranks} ranks on this machine does not fit \
             in memory (more than 2^64 bytes): lower {size_flag}"
        )));
    };
    let Some(available) = available else {
        return Ok(());
    };
    if total <= available {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    Err(Error::InvalidArgument(format!(
        "the largest size needs about {:.1} GiB per rank ({:.1} GiB for the {} ranks on this \
         machine), and only {:.1} GiB is available (MemAvailable, ulimit -v): lower {size_flag}",
        gib(needed_per_rank),
        gib(total),
        ranks,
        gib(available)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Collective, DType, ReduceOp};

    fn case(collective: Collective, bytes: usize) -> Case {
        Case {
            collective,
            dtype: DType::F32,
            op: ReduceOp::Sum,
            root: 0,
            in_place: false,
            bytes,
        }
    }

    #[test]
    fn needs_count_the_gathered_output() {
        assert_eq!(
            bytes_needed(&case(Collective::AllReduce, 1 << 20), 4).unwrap(),
            4 << 20
        );
        // all_gather: 1/4 in, the whole gathered buffer out.
        assert_eq!(
            bytes_needed(&case(Collective::AllGather, 1 << 20), 4).unwrap(),
            2 * (5 << 18)
        );
    }

    /// `-e 200G` allocated until the OOM killer fired (exit 137 after 51 s).
    #[test]
    fn a_sweep_larger_than_memory_is_refused_with_the_figures() {
        let need = bytes_needed(&case(Collective::AllReduce, 200 << 30), 2).unwrap();
        let e = check_fits(need, 2, Some(20 << 30), "-e")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("800.0 GiB") && e.contains("20.0 GiB") && e.contains("-e"),
            "{e}"
        );
        assert!(check_fits(need, 2, Some(u64::MAX), "-e").is_ok());
        assert!(check_fits(need, 2, None, "-e").is_ok());
        assert!(available_bytes().is_some_and(|b| b > 0));
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       24000000 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(mem_available(text), Some(2 << 20));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }

    /// `bench -b 4G -e 18446744073709551615` aborted (SIGABRT): the need,
    /// counted in u64, wrapped to a small number, passed the check, and the
    /// allocation failed.
    #[test]
    fn sizes_near_u64_max_are_refused_not_wrapped() {
        let max = usize::MAX;
        for c in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::AllToAll,
        ] {
            let e = bytes_needed(&case(c, max), 2).unwrap_err().to_string();
            assert!(
                e.contains(&max.to_string()) && e.contains("does not fit in memory"),
                "{c:?}: {e}"
            );
        }
        // Just below the edge per rank, but not for several ranks, and refused
        // even where the available memory is unknown.
        let need = bytes_needed(&case(Collective::AllReduce, 1 << 61), 2).unwrap();
        assert_eq!(need, 1 << 63);
        let e = check_fits(need, 4, None, "-e").unwrap_err().to_string();
        assert!(
            e.contains("4 ranks") && e.contains("does not fit in memory") && e.contains("-e"),
            "{e}"
        );
        assert!(check_fits(need, 1, None, "-e").is_ok());
    }
}
