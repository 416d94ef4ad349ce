//! Message sizes: the sweep rule the peers use (the flags parse with
//! `collectives::job::parse_size`, as `ringside bench`'s do).

use crate::{Error, Result};

/// Bytes per element of the swept dtype (f32).
pub const ELEM_BYTES: u64 = 4;

/// Formats bytes for tables: `8 B`, `4 KiB`, `64 MiB`, `1.5 KiB`
/// (`measure::size::fmt_bytes`).
pub fn format_size(bytes: u64) -> String {
    measure::size::fmt_bytes(bytes as f64)
}

/// One sweep's flags, shared by every implementation (`-b -e -f -n -w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// Smallest message in bytes (`-b`).
    pub min_bytes: u64,
    /// Largest message in bytes (`-e`).
    pub max_bytes: u64,
    /// Sizes multiply by this (`-f`).
    pub factor: u64,
    /// Timed iterations per size (`-n`).
    pub iters: u32,
    /// Untimed warm-up iterations per size (`-w`).
    pub warmup: u32,
}

impl Sweep {
    /// Rejects flags the peers would reject, so errors show before any launch:
    /// what no sweep can measure (`measure::size::sweep_sizes`, the rule every
    /// binary shares), plus what only the C and C++ peers cannot run.
    pub fn validate(&self) -> Result<()> {
        // The peers only multiply (`s *= f`), so a factor below 2 never ends
        // their loop, even when min = max.
        if self.factor < 2 {
            return Err(Error::BadSweep(format!(
                "factor must be >= 2, got {}",
                self.factor
            )));
        }
        if self.iters < 1 {
            return Err(Error::BadSweep("need at least one iteration (-n)".into()));
        }
        if self.max_bytes < ELEM_BYTES {
            return Err(Error::BadSweep(format!(
                "max ({}) must hold at least one f32 ({ELEM_BYTES} bytes)",
                self.max_bytes
            )));
        }
        measure::size::sweep_sizes(self.min_bytes.max(1), self.max_bytes, self.factor, 0)
            .map_err(|e| Error::BadSweep(format!("{}: {}", e.input, e.why)))?;
        // The peers pass element counts as C `int`.
        if self.max_bytes / ELEM_BYTES > i32::MAX as u64 {
            return Err(Error::BadSweep("max size must be below 8 GiB".into()));
        }
        Ok(())
    }

    /// The byte sizes every implementation reports, in order:
    /// `m, m·f, m·f², … <= max` with `m = max(min, 4)` (at least one f32),
    /// each rounded down to whole elements as nccl-tests does. Mirrors the
    /// loops in `peers/*.c*` and `collectives::bench::sizes`.
    pub fn sizes(&self) -> Vec<u64> {
        if self.factor < 2 {
            return Vec::new();
        }
        let first = self.min_bytes.max(ELEM_BYTES);
        measure::size::sizes(first, self.max_bytes, self.factor, 0)
            .into_iter()
            .map(|bytes| bytes / ELEM_BYTES * ELEM_BYTES)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_size_picks_units() {
        assert_eq!(format_size(8), "8 B");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(64 << 20), "64 MiB");
        assert_eq!(format_size(1536), "1.5 KiB");
    }

    fn sweep(min: u64, max: u64, factor: u64) -> Sweep {
        Sweep {
            min_bytes: min,
            max_bytes: max,
            factor,
            iters: 1,
            warmup: 0,
        }
    }

    #[test]
    fn sizes_follow_factor_and_include_max() {
        assert_eq!(sweep(8, 64 << 20, 2).sizes().len(), 24);
        let s = sweep(8, 64 << 20, 8).sizes();
        assert_eq!(s.first(), Some(&8));
        assert_eq!(s.last(), Some(&(16 << 20)));
        assert_eq!(sweep(4096, 4096, 2).sizes(), vec![4096]);
    }

    #[test]
    fn sizes_start_at_one_float_and_round_down_to_whole_floats() {
        // Starts at 4 like collectives::bench::sizes: 4, 12, 36 -> whole floats.
        assert_eq!(sweep(1, 40, 3).sizes(), vec![4, 12, 36]);
        assert_eq!(sweep(6, 60, 3).sizes(), vec![4, 16, 52]); // 6, 18, 54
    }

    #[test]
    fn sizes_do_not_overflow() {
        let s = sweep(1 << 62, u64::MAX, 4).sizes();
        assert_eq!(s, vec![1 << 62]);
    }

    #[test]
    fn validate_rejects_nonsense() {
        assert!(sweep(8, 64, 1).validate().is_err());
        assert!(sweep(64, 8, 2).validate().is_err());
        assert!(sweep(1, 3, 2).validate().is_err());
        assert!(sweep(8, 16 << 30, 2).validate().is_err());
        assert!(sweep(8, 64 << 20, 2).validate().is_ok());
        // The shared rule's words reach the user.
        let e = sweep(64, 8, 2).validate().unwrap_err().to_string();
        assert!(e.contains("above the largest"), "{e}");
    }
}
