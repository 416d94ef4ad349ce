//! `cargo xtask book [--serve]`: the mdBook, with each lab chapter's figures taken
//! from the reader's own latest run of that lab (`results/labNN/<time>/`), or from
//! the reference run committed in `book/reference/labNN/` until there is one.
//!
//! The figures are copied into `book/src/figures/` (ignored by git) before mdBook
//! runs, so `mdbook serve` can watch the sources as they are. [`check`] is the test
//! suite's `book` step: includes and anchors, solutions folded away
//! ([`solutions`]), then a build, then the built pages
//! (empty code blocks, internal links, one chapter per lab, and a headless
//! Chromium load of every page with no broken image).

mod chromium;
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

/// Fills `book/src/figures/labNN/` for every lab from the newest complete run in
/// `results/labNN/`, else from `book/reference/labNN/`, and writes the caption
/// `run.md` that the chapter includes. Returns one line per lab saying which.
pub fn stage_figures(root: &Path, labs: &[Lab]) -> Result<Vec<String>> {
    let mut said = Vec::new();
    for lab in labs {
        let dest = root.join("book/src/figures").join(lab.short());
        if dest.exists() {
            std::fs::remove_dir_all(&dest)?;
        }
        std::fs::create_dir_all(&dest)?;
        let reference = root.join("book/reference").join(lab.short());
        let (from, caption) = match latest_run(root, lab)? {
            Some(run) => {
                let when = run
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                (
                    run.clone(),
                    format!(
                        "*These figures are from **your own run** of lab {} ({when} UTC, \
                         `results/{}/{when}/`). Run `cargo lab {}` again to redraw them, then \
                         `cargo xtask book`.*\n",
                        lab.number,
                        lab.short(),
                        lab.number
                    ),
                )
            }
            None => {
                let about = std::fs::read_to_string(reference.join("run.md")).unwrap_or_default();
                (
                    reference.clone(),
                    format!(
                        "*A reference run: {} Run `cargo lab {}`, then `cargo xtask book`, \
                         to see your own here.*\n",
                        about.trim(),
                        lab.number
                    ),
                )
            }
        };
        let mut copied = 0;
        if from.is_dir() {
            for entry in std::fs::read_dir(&from)? {
                let path = entry?.path();
                let is_figure = path.extension().is_some_and(|e| e == "svg" || e == "png");
                if is_figure {
                    std::fs::copy(&path, dest.join(path.file_name().unwrap_or_default()))?;
                    copied += 1;
                }
            }
        }
        std::fs::write(dest.join("run.md"), caption)?;
        said.push(format!(
            "lab {}: {copied} figure(s) from {}",
            lab.number,
            from.strip_prefix(root).unwrap_or(&from).display()
        ));
    }
    Ok(said)
}

/// The newest `results/labNN/<time>/` that holds a results file and a chart.
fn latest_run(root: &Path, lab: &Lab) -> Result<Option<PathBuf>> {
    let dir = measure::results_root(root).join(lab.short());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(None);
    };
    let mut runs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter(|p| p.join("results.json").is_file() && has_svg(p))
        .collect();
    // Run folders are UTC stamps (YYYYMMDD-HHMMSS): the name order is the time order.
    runs.sort();
    Ok(runs.pop())
}

fn has_svg(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut it| {
        it.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "svg")))
    })
}
