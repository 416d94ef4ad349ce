//! For the build scripts of the binaries that write results (cli, labkit):
//! records what the manifest reports about their build, the git commit and the
//! compiler, as `RINGSIDE_GIT_SHA` and `RINGSIDE_RUSTC` for [`crate::build!`].
//! In the binaries' crates, not in `measure`'s own build: a commit changes the
//! sha, and everything that depends on `measure` (collectives and all above it)
//! would be recompiled after every commit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Call from a build script: `fn main() { measure::build_script::emit(); }`.
pub fn emit() {
    let sha = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    // A build from a tree with uncommitted changes says so, so a result
    // cannot be attributed to a commit that did not produce it.
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    let sha = match (sha.is_empty(), dirty) {
        (true, _) => "unknown".to_owned(),
        (false, true) => format!("{sha}-dirty"),
        (false, false) => sha,
    };
    println!("cargo:rustc-env=RINGSIDE_GIT_SHA={sha}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    println!("cargo:rustc-env=RINGSIDE_RUSTC={version}");
    if let Some(git) = git_dir() {
        for p in ["HEAD", "index", "refs/heads"] {
            println!("cargo:rerun-if-changed={}", git.join(p).display());
        }
    }
}

/// The `.git` folder above the crate being built.
fn git_dir() -> Option<PathBuf> {
    let start = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    start
        .ancestors()
        .map(|d: &Path| d.join(".git"))
        .find(|g| g.exists())
}
