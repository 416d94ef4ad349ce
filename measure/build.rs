//! Records what the results manifest reports about this build: the git
//! commit, and the compiler.

use std::process::Command;

fn main() {
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
    for p in ["../.git/HEAD", "../.git/index", "../.git/refs/heads"] {
        println!("cargo:rerun-if-changed={p}");
    }
}
