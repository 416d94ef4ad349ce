//! Human formatting of sizes and times, shared by charts, HTML and summary.

/// Bytes with binary units: `8 B`, `4 KiB`, `1.5 MiB`.
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

/// A time given in µs, in the unit that keeps it readable.
pub fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        return "—".into();
    }
    if us.abs() >= 1e6 {
        format!("{} s", sig3(us / 1e6))
    } else if us.abs() >= 1e3 {
        format!("{} ms", sig3(us / 1e3))
    } else {
        format!("{} µs", sig3(us))
    }
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

    #[test]
    fn formats() {
        assert_eq!(fmt_bytes(8.0), "8 B");
        assert_eq!(fmt_bytes(4096.0), "4 KiB");
        assert_eq!(fmt_bytes(1536.0 * 1024.0), "1.5 MiB");
        assert_eq!(axis_bytes(65536.0), "64K");
        assert_eq!(axis_bytes(1.0), "1");
        assert_eq!(fmt_us(2.5), "2.5 µs");
        assert_eq!(fmt_us(1234.0), "1.23 ms");
        assert_eq!(fmt_us(3.2e6), "3.2 s");
        assert_eq!(sig3(0.01234), "0.0123");
        assert_eq!(sig3(123.4), "123");
        assert_eq!(sig3(f64::NAN), "—");
    }
}
