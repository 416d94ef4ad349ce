//! Human formatting of sizes and times, shared by charts, HTML and summary.

pub use measure::size::{axis_bytes, fmt_bytes, sig3};

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

/// The bandwidth (GB/s) of a cost in µs per byte, `∞` for a zero cost.
pub fn fmt_gbps_of_cost(us_per_byte: f64) -> String {
    // b µs/byte → 1/b bytes/µs = 1e-3/b GB/s.
    if us_per_byte > 0.0 {
        sig3(1e-3 / us_per_byte)
    } else {
        "∞".into()
    }
}

/// A model's fixed cost, e.g. `102 µs`, or with a latency step
/// `102 µs → 301 µs from 8 B`.
pub fn fmt_alpha(m: &crate::fit::Regimes) -> String {
    match m.step {
        Some(st) => format!(
            "{} → {} from {}",
            fmt_us(m.alpha_us),
            fmt_us(m.alpha_large_us()),
            fmt_bytes(st.from_bytes)
        ),
        None => fmt_us(m.alpha_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_pick_their_unit() {
        assert_eq!(fmt_us(2.5), "2.5 µs");
        assert_eq!(fmt_us(1234.0), "1.23 ms");
        assert_eq!(fmt_us(3.2e6), "3.2 s");
    }
}
