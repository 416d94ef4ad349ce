//! `book-check`: every `{{#include path:anchor}}` in the book must point at a file
//! that exists and an anchor that is defined in it. mdBook renders a missing
//! anchor as empty text without a warning, so a renamed anchor would silently
//! blank a listing.

use anyhow::{Context, Result, bail};
use std::path::Path;

/// Checks every include in `book/src/**/*.md`.
pub fn check(root: &Path) -> Result<()> {
    let src = root.join("book/src");
    let mut problems = Vec::new();
    let mut includes = 0;
    for page in markdown_files(&src)? {
        let text = std::fs::read_to_string(&page)
            .with_context(|| format!("reading {}", page.display()))?;
        for (line_no, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(start) = rest.find("{{#include ") {
                let after = &rest[start + "{{#include ".len()..];
                let Some(end) = after.find("}}") else { break };
                let target = after[..end].trim();
                rest = &after[end..];
                includes += 1;
                let (file, anchor) = match target.split_once(':') {
                    Some((f, a)) if !a.chars().all(|c| c.is_ascii_digit()) => (f, Some(a)),
                    Some((f, _)) => (f, None),
                    None => (target, None),
                };
                let path = page.parent().unwrap_or(&src).join(file);
                let where_ = format!(
                    "{}:{}",
                    page.strip_prefix(root).unwrap_or(&page).display(),
                    line_no + 1
                );
                let Ok(code) = std::fs::read_to_string(&path) else {
                    problems.push(format!("{where_}: {file} does not exist"));
                    continue;
                };
                if let Some(a) = anchor {
                    let opened = code
                        .lines()
                        .any(|l| l.trim_end().ends_with(&format!("ANCHOR: {a}")));
                    let closed = code
                        .lines()
                        .any(|l| l.trim_end().ends_with(&format!("ANCHOR_END: {a}")));
                    if !(opened && closed) {
                        problems.push(format!(
                            "{where_}: anchor {a:?} is not defined (ANCHOR / ANCHOR_END) in {file}"
                        ));
                    }
                }
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} broken book include(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    println!("book-check: {includes} includes, all resolve");
    Ok(())
}

fn markdown_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(markdown_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_anchor_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("book/src")).unwrap();
        std::fs::write(
            dir.path().join("code.rs"),
            "// ANCHOR: here\nfn f() {}\n// ANCHOR_END: here\n",
        )
        .unwrap();
        let page = dir.path().join("book/src/p.md");
        std::fs::write(&page, "{{#include ../../code.rs:here}}\n").unwrap();
        check(dir.path()).unwrap();
        std::fs::write(&page, "{{#include ../../code.rs:gone}}\n").unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(err.contains("\"gone\""), "{err}");
        std::fs::write(&page, "{{#include ../../nothing.rs}}\n").unwrap();
        assert!(check(dir.path()).is_err());
    }
}
