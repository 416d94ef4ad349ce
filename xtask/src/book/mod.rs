//! `cargo xtask book [--serve]`: the mdBook, with each lab chapter's figures taken
//! from the reader's own latest run of that lab (`results/labNN/<time>/`), set beside
//! the reference solution's; a solution run is never labelled as the reader's
//! ([`figures`]). The reference run committed in `book/reference/labNN/` stands in
//! until there is a run.
//!
//! The figures are copied into `book/src/figures/` (ignored by git) before mdBook
//! runs, so `mdbook serve` can watch the sources as they are. [`check`] is the test
//! suite's `book` step: includes and anchors, solutions folded away
//! ([`solutions`]), then a build, then the built pages
//! (empty code blocks, internal links, one chapter per lab, and a headless
//! Chromium load of every page with no broken image).

mod chromium;
pub mod figures;
pub mod includes;
pub mod mdbook;
mod site;
pub mod solutions;

use crate::labs::info::{self, Lab};
use crate::ui;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the built book goes.
pub fn out_dir(root: &Path) -> PathBuf {
    root.join("book/book")
}

/// Builds the book (or serves it, rebuilding on change, at http://localhost:3000).
pub fn build(root: &Path, serve: bool) -> Result<()> {
    let mdbook = mdbook::ensure(root)?;
    let labs = info::load(root)?;
    for line in stage_figures(root, &labs)? {
        ui::say(&line);
    }
    let mut cmd = Command::new(&mdbook);
    cmd.arg(if serve { "serve" } else { "build" })
        .arg(root.join("book"))
        .arg("--dest-dir")
        .arg(out_dir(root));
    ui::say(&format!("running {}", ui::show_command(&cmd)));
    let status = cmd.status().context("starting mdbook")?;
    if !status.success() {
        bail!("mdbook failed ({status})");
    }
    if !serve {
        ui::say(&format!(
            "the book is at {}",
            out_dir(root).join("index.html").display()
        ));
    }
    Ok(())
}

/// The test suite's `book` step.
pub fn check(root: &Path) -> Result<()> {
    let labs = info::load(root)?;
    // First, so the includes of each chapter's generated caption resolve.
    stage_figures(root, &labs)?;
    includes::check(root)?;
    site::chapters_for_every_lab(root, &labs)?;
    solutions::folded(root, &labs)?;
    figures::references_carry_their_machine(root, &labs)?;
    let mdbook = mdbook::ensure(root)?;
    let out = tempfile::tempdir()?;
    let built = Command::new(&mdbook)
        .arg("build")
        .arg(root.join("book"))
        .arg("--dest-dir")
        .arg(out.path())
        .output()
        .context("starting mdbook")?;
    let log = String::from_utf8_lossy(&built.stderr);
    if !built.status.success() {
        bail!("mdbook build failed:\n{log}");
    }
    // mdBook reports some problems (a missing include file, a bad link target in
    // SUMMARY) as errors but still builds.
    if let Some(line) = log.lines().find(|l| l.contains("ERROR")) {
        bail!("mdbook reported an error: {line}");
    }
    let pages = site::check_pages(out.path())?;
    chromium::no_broken_images(out.path(), &pages)?;
    ui::say(&format!(
        "book: {} pages built, linked and rendered",
        pages.len()
    ));
    Ok(())
}

/// Fills `book/src/figures/labNN/` for every lab and writes each chapter's caption
/// ([`figures`]). Returns one line per lab saying which run it used.
pub fn stage_figures(root: &Path, labs: &[Lab]) -> Result<Vec<String>> {
    figures::stage(root, &measure::results_root(root), labs)
}
