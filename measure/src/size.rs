//! Message sizes: parsed from flags (`64M`), stepped through (nccl-tests'
//! `-b -e -f -i`), and printed for people.

use std::fmt;

/// Why a size flag does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad size {:?}: {}", self.input, self.why)
    }
}

impl std::error::Error for SizeError {}

/// Parses `8`, `4K`, `1M`, `2G`, `64MiB`, `1GB` (any case; powers of 1024,
/// as nccl-tests and the C and C++ peers read them).
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let bad = |why| SizeError {
        input: input.to_string(),
        why,
    };
    let s = input.trim().to_ascii_uppercase();
    let s = s.strip_suffix('B').unwrap_or(&s);
    let s = s.strip_suffix('I').unwrap_or(s);
    let (digits, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("expected digits with an optional K/M/G suffix"));
    }
    let n: u64 = digits.parse().map_err(|_| bad("number too large"))?;
    n.checked_mul(mult).ok_or_else(|| bad("number too large"))
}

/// Sizes from `min` to `max` bytes: multiplying by `factor` (nccl-tests
/// `-f`), or adding `step` when it is above 0 (`-i`). Starts at 1 byte at
/// least; one size when neither progresses.
pub fn sizes(min: u64, max: u64, factor: u64, step: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        let next = if step > 0 {
            s.checked_add(step)
        } else if factor >= 2 {
            s.checked_mul(factor)
        } else {
            None
        };
        match next {
            Some(x) => s = x,
            None => break,
        }
    }
    out
}

/// [`sizes`] for a sweep's flags (`-b min -e max -f factor -i step`), refusing
/// flags that would measure nothing or loop forever: a minimum above the maximum,
/// a maximum of 0, a factor below 2 with no step (unless min = max: one size).
/// A sweep that measured nothing used to end with a green "0 OK".
pub fn sweep_sizes(min: u64, max: u64, factor: u64, step: u64) -> Result<Vec<u64>, SizeError> {
    let flags = || format!("-b {} -e {} -f {factor} -i {step}", human(min), human(max));
    let bad = |why| {
        Err(SizeError {
            input: flags(),
            why,
        })
    };
    if max == 0 {
        return bad("the largest size (-e) is 0: nothing to measure");
    }
    if min > max {
        return bad("the smallest size (-b) is above the largest (-e): nothing to measure");
    }
    if step == 0 && factor < 2 && min < max {
        return bad("-f must be 2 or more (or -i above 0) for the sizes to grow from -b to -e");
    }
    Ok(sizes(min, max, factor, step))
}

/// Short form for flags and progress bars: `64M`, `4K`, `1000`.
pub fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

/// Bytes with binary units for tables and reports: `8 B`, `4 KiB`, `1.5 MiB`.
pub fn fmt_bytes(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if !bytes.is_finite() {
        return "—".into();
    }
    let mut v = bytes;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 || (v - v.round()).abs() < 1e-9 {
        format!("{} {}", v.round(), UNITS[unit])
    } else {
        format!("{} {}", sig3(v), UNITS[unit])
    }
}

/// Compact axis label for a power-of-two size: `8`, `4K`, `64M`, `1G`.
pub fn axis_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut v = bytes;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{}{}", sig3(v), UNITS[unit])
}

/// Three significant digits without exponent noise: 1.23, 12.3, 123, 1234.
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let a = v.abs();
    let decimals = if a == 0.0 || a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else if a >= 0.1 {
        3
    } else {
        // Small values keep three significant digits.
        (-(a.log10().floor()) as usize + 2).min(12)
    };
    let s = format!("{v:.decimals$}");
    // 1.50 → 1.5, 2.00 → 2: trailing zeros add nothing here.
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-b 1M -e 4K`, `-f 1`, `-f 0` and `-e 0` exited 0 with "0 OK" having
    /// measured nothing, or one size.
    #[test]
    fn sweeps_that_would_measure_nothing_are_errors() {
        for (min, max, f, why) in [
            (1 << 20, 4 << 10, 2, "above the largest"),
            (8, 64 << 20, 1, "-f must be 2"),
            (8, 64 << 20, 0, "-f must be 2"),
            (8, 0, 2, "is 0"),
        ] {
            let e = sweep_sizes(min, max, f, 0).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
            assert!(e.to_string().contains("-b "), "{e}");
        }
        assert_eq!(sweep_sizes(8, 8, 1, 0).unwrap(), [8]);
        assert_eq!(sweep_sizes(8, 32, 1, 8).unwrap(), [8, 16, 24, 32]);
        assert_eq!(sweep_sizes(8, 32, 2, 0).unwrap(), [8, 16, 32]);
    }

    /// `-e 17179869184G` wrapped to 0 and measured nothing.
    #[test]
    fn sizes_that_overflow_are_errors() {
        for s in ["17179869184G", "18446744073709551616", "16777216T"] {
            assert!(parse_size(s).is_err(), "{s}");
        }
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn parse_size_accepts_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GB"), Ok(1 << 30));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert_eq!(parse_size(" 8B "), Ok(8));
    }

    #[test]
    fn parse_size_rejects_garbage() {
        for bad in [
            "",
            "M",
            "1.5M",
            "-1",
            "12X",
            "lots",
            "99999999999999999999",
            "99999999999G",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            parse_size("12X").unwrap_err().to_string(),
            "bad size \"12X\": expected digits with an optional K/M/G suffix"
        );
    }

    #[test]
    fn sizes_step_or_multiply() {
        assert_eq!(sizes(8, 64, 2, 0), vec![8, 16, 32, 64]);
        assert_eq!(sizes(1 << 20, 4 << 20, 4, 0), vec![1 << 20, 4 << 20]);
        assert_eq!(sizes(8, 32, 2, 8), vec![8, 16, 24, 32]);
        assert_eq!(sizes(8, 64, 1, 0), vec![8]);
        assert_eq!(sizes(0, 2, 2, 0), vec![1, 2]);
        assert_eq!(sizes(1 << 62, u64::MAX, 4, 0), vec![1 << 62]);
    }

    #[test]
    fn formats() {
        assert_eq!(human(64 << 20), "64M");
        assert_eq!(human(1000), "1000");
        assert_eq!(fmt_bytes(8.0), "8 B");
        assert_eq!(fmt_bytes(4096.0), "4 KiB");
        assert_eq!(fmt_bytes(1536.0 * 1024.0), "1.5 MiB");
        assert_eq!(fmt_bytes(1536.0), "1.5 KiB");
        assert_eq!(axis_bytes(65536.0), "64K");
        assert_eq!(axis_bytes(1.0), "1");
        assert_eq!(sig3(0.01234), "0.0123");
        assert_eq!(sig3(123.4), "123");
        assert_eq!(sig3(f64::NAN), "—");
    }
}
