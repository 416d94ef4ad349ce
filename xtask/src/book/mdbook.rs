//! The mdBook binary: installed once per user into the same cache as torch
//! (`<cache>/mdbook-<version>/bin/mdbook`), not per clone, because `cargo install`
//! takes about four minutes on 2 cores. A binary rather than a library of xtask:
//! as a dependency it would be compiled into every fresh clone's xtask before the
//! first `cargo xtask` could even print its help.

use crate::setup::{cache_root, lock};
use crate::ui;
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The mdBook release the book is written for.
pub const MDBOOK_VERSION: &str = "0.5.4";

/// The installed binary, installing it first when it is missing or broken.
pub fn ensure(root: &Path) -> Result<PathBuf> {
    let cache = cache_root()?;
    let name = format!("mdbook-{MDBOOK_VERSION}");
    let dir = cache.join(&name);
    let bin = dir.join("bin/mdbook");
    if works(&bin) {
        return Ok(bin);
    }
    fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let _lock = lock(&cache.join(format!(".{name}.lock")))?;
    if works(&bin) {
        return Ok(bin); // another set-up installed it while we waited
    }
    // Installed into a temporary root and renamed into place once it runs, so an
    // interrupted install is redone, never trusted.
    let partial = cache.join(format!(".{name}.partial"));
    for stale in [&partial, &dir] {
        if stale.exists() {
            fs::remove_dir_all(stale).with_context(|| format!("removing {}", stale.display()))?;
        }
    }
    ui::say(&format!(
        "installing mdbook {MDBOOK_VERSION} into {} (once per user; about 4 minutes on 2 cores)",
        dir.display()
    ));
    let log = root.join(".ringside/logs/mdbook-install.log");
    let took = ui::run_logged(
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["install", "mdbook", "--locked", "--version"])
            .arg(format!("={MDBOOK_VERSION}"))
            .arg("--root")
            .arg(&partial)
            // Its own target folder, so the workspace's is not locked meanwhile.
            .env("CARGO_TARGET_DIR", cache.join(format!(".{name}.build"))),
        "cargo install mdbook",
        &log,
    )?;
    let _ = fs::remove_dir_all(cache.join(format!(".{name}.build")));
    if !works(&partial.join("bin/mdbook")) {
        bail!(
            "mdbook {MDBOOK_VERSION} was installed into {} but does not run; log: {}",
            partial.display(),
            log.display()
        );
    }
    fs::rename(&partial, &dir).with_context(|| format!("moving {}", dir.display()))?;
    ui::say(&format!(
        "mdbook {MDBOOK_VERSION} installed in {}",
        ui::fmt_duration(took)
    ));
    Ok(bin)
}

/// Whether `bin` runs and says it is the pinned version.
fn works(bin: &Path) -> bool {
    Command::new(bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() && version_matches(&String::from_utf8_lossy(&o.stdout)))
}

/// `mdbook --version` prints `mdbook v0.5.4`.
fn version_matches(out: &str) -> bool {
    out.split_whitespace()
        .nth(1)
        .is_some_and(|v| v.trim_start_matches('v') == MDBOOK_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pinned_version_is_accepted() {
        assert!(version_matches(&format!("mdbook v{MDBOOK_VERSION}\n")));
        assert!(!version_matches("mdbook v0.4.40\n"));
        assert!(!version_matches(""));
    }
}
