//! The job token: 16 secret bytes every rank of a job shares, proved (never
//! sent) on every connection to the store (see [`proof`](super::proof)), and
//! presented, through [`TransportOptions`], to every transport peer, so other
//! jobs and stray connections are kept out.
//!
//! [`TransportOptions`]: crate::transport::TransportOptions

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The environment variable that carries the job token to every rank.
pub const TOKEN_VAR: &str = "RINGSIDE_JOB_TOKEN";

/// A 16-byte secret shared by the ranks of one job; the store refuses
/// connections that do not present it.
///
/// `Display` writes it as 32 lowercase hex digits (that is how it travels in
/// `RINGSIDE_JOB_TOKEN`); `Debug` hides it so it does not end up in logs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; 16]);

/// Launcher variables that identify one job (or job step); hashed, in this
/// order, into a derived token. Missing ones are skipped.
const JOB_ID_VARS: &[&str] = &[
    "TORCHELASTIC_RUN_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
];

impl Token {
    /// A fresh random token from the operating system's generator.
    pub fn generate() -> Result<Token> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::Rendezvous(format!("cannot draw a random job token: {e}")))?;
        Ok(Token(bytes))
    }

    /// A token with these bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Token {
        Token(bytes)
    }

    /// The raw bytes (what [`crate::transport::TransportOptions::token`] takes).
    pub const fn bytes(&self) -> [u8; 16] {
        self.0
    }

    /// Parses 32 hex digits (surrounding whitespace ignored). The error never
    /// repeats the input, which may be a real token with a typo.
    pub fn parse(s: &str) -> Result<Token> {
        let s = s.trim();
        if s.len() != 32 {
            return Err(Error::InvalidArgument(format!(
                "a job token is 32 hex digits (16 bytes); got {} characters",
                s.chars().count()
            )));
        }
        let mut bytes = [0u8; 16];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let hi = hex_digit(pair[0]);
            let lo = hex_digit(pair[1]);
            match (hi, lo) {
                (Some(hi), Some(lo)) => bytes[i] = hi << 4 | lo,
                _ => {
                    return Err(Error::InvalidArgument(
                        "a job token is 32 hex digits (0-9, a-f); this one has other characters"
                            .into(),
                    ));
                }
            }
        }
        Ok(Token(bytes))
    }

    /// The job token from the process environment; see [`Token::from_vars`].
    pub fn from_env() -> Result<Option<Token>> {
        Token::from_vars(&env_var)
    }

    /// The job token from a set of environment variables (`get` returns a
    /// variable's value):
    ///
    /// 1. `RINGSIDE_JOB_TOKEN` (32 hex digits) if set — an error if malformed;
    /// 2. else, if an external launcher names the job (`TORCHELASTIC_RUN_ID`,
    ///    `PMIX_NAMESPACE` / `OMPI_MCA_ess_base_jobid`,
    ///    `SLURM_JOB_ID` + `SLURM_STEP_ID`), a token derived from those ids and
    ///    `MASTER_ADDR`/`MASTER_PORT` (see [`Token::derive`]);
    /// 3. else `None`.
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Token>> {
        if let Some(v) = get(TOKEN_VAR) {
            return Token::parse(&v)
                .map(Some)
                .map_err(|e| Error::Rendezvous(format!("{TOKEN_VAR} is not a valid token: {e}")));
        }
        if JOB_ID_VARS.iter().any(|k| get(k).is_some()) {
            return Ok(Some(Token::derive(get)));
        }
        Ok(None)
    }

    /// A token every rank of a job computes alike without being told: a hash
    /// of the launcher's job ids (those of `TORCHELASTIC_RUN_ID`,
    /// `PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`, `SLURM_JOB_ID`,
    /// `SLURM_STEP_ID` that are set) and `MASTER_ADDR`/`MASTER_PORT`.
    ///
    /// **Weaker than a random token**: anyone who can read the job's
    /// environment (or guess its job id) can compute it. It keeps *other jobs*
    /// out of the store — a stale rank of yesterday's run, a second job that
    /// picked the same port — not a determined attacker. Set
    /// `RINGSIDE_JOB_TOKEN` to a random value on every rank for that.
    pub fn derive(get: &dyn Fn(&str) -> Option<String>) -> Token {
        // FNV-1a 128: stable across Rust versions and machines (std's
        // DefaultHasher is not), which matters because every node computes it.
        const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
        const PRIME: u128 = 0x0000000001000000000000000000013B;
        let mut h = OFFSET;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u128::from(b);
                h = h.wrapping_mul(PRIME);
            }
        };
        eat(b"ringside derived job token v1\0");
        for name in JOB_ID_VARS.iter().chain(&["MASTER_ADDR", "MASTER_PORT"]) {
            if let Some(v) = get(name) {
                eat(name.as_bytes());
                eat(b"=");
                eat(v.as_bytes());
                eat(b"\0");
            }
        }
        Token(h.to_le_bytes())
    }
}

/// Reads a process environment variable; non-UTF-8 values are converted lossily.
pub(crate) fn env_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl FromStr for Token {
    type Err = Error;
    fn from_str(s: &str) -> Result<Token> {
        Token::parse(s)
    }
}
