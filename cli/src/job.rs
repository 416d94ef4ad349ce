//! Shared start-up for subcommands that run as ranks. The job flags and the
//! start-up itself live in `collectives::job` (shared with ringside-train and
//! the labs); what is left here is the sizes the measuring subcommands take.

pub use collectives::job::{JobArgs, Joined};

/// Parses `8`, `4K`, `1M`, `64MiB`, `1G` into bytes (powers of 1024, as nccl-tests).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_uppercase();
    let t = t.trim_end_matches("IB").trim_end_matches('B');
    let (num, mul) = match t.chars().last() {
        Some('K') => (&t[..t.len() - 1], 1usize << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .map(|n| n * mul)
        .map_err(|_| format!("{s:?} is not a size (examples: 8, 4K, 1M, 64MiB)"))
}

/// Formats bytes the way nccl-tests' size column reads best for people.
pub fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert!(parse_size("lots").is_err());
        assert_eq!(human(64 << 20), "64M");
        assert_eq!(human(1000), "1000");
    }
}
