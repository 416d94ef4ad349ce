//! What `cargo lab` remembers between runs, in `.ringside/labs.json` (ignored by git):
//! how many steps of each lab's hint ladder it has shown, the signature of the
//! last failed check (so the same failure twice spends no hint), and the last
//! self-check's verdict with the
//! fingerprint of the exercise file it judged, so `cargo lab list` can say
//! "passes" without recompiling every lab (rustlings keeps a state file the same way).

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The last self-check of one lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    /// Whether it passed.
    pub passed: bool,
    /// [`fingerprint`] of the exercise file it ran on.
    pub exercise: String,
}

/// One lab's remembered state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabProgress {
    /// Steps of the hint ladder shown so far.
    #[serde(default)]
    pub hints_shown: usize,
    /// [`super::hints::Failure::signature`] of the last failed check, cleared when
    /// a check passes.
    #[serde(default)]
    pub last_failure: Option<String>,
    /// The last `cargo lab check`.
    #[serde(default)]
    pub last_check: Option<Checked>,
}

/// Every lab's state, keyed by `labNN`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Progress {
    labs: BTreeMap<String, LabProgress>,
    #[serde(skip)]
    path: PathBuf,
}

impl Progress {
    /// Reads the state file; a missing or unreadable one is a fresh start (it holds
    /// nothing that cannot be recomputed by checking again).
    pub fn load(root: &Path) -> Progress {
        let path = root.join(".ringside/labs.json");
        let mut p: Progress = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        p.path = path;
        p
    }

    /// The state of lab `short` (`lab01`).
    pub fn get(&self, short: &str) -> LabProgress {
        self.labs.get(short).cloned().unwrap_or_default()
    }

    /// Changes the state of lab `short` and writes the file (atomically: a
    /// temporary file renamed over it).
    pub fn update(&mut self, short: &str, f: impl FnOnce(&mut LabProgress)) -> Result<()> {
        f(self.labs.entry(short.to_owned()).or_default());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// A stable fingerprint of a file's bytes (64-bit FNV-1a, hex): enough to notice
/// that the learner edited the exercise since it was last checked.
pub fn fingerprint(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_round_trips_and_a_garbled_file_is_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Progress::load(dir.path());
        assert_eq!(p.get("lab01"), LabProgress::default());
        p.update("lab01", |l| l.hints_shown = 2).unwrap();
        assert_eq!(Progress::load(dir.path()).get("lab01").hints_shown, 2);
        std::fs::write(dir.path().join(".ringside/labs.json"), b"{garbage").unwrap();
        assert_eq!(Progress::load(dir.path()).get("lab01").hints_shown, 0);
    }

    #[test]
    fn fingerprint_is_fnv1a() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fingerprint(b""), "cbf29ce484222325");
        assert_eq!(fingerprint(b"a"), "af63dc4c8601ec8c");
    }
}
