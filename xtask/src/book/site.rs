//! Checks on the book's sources and on the pages mdBook built from them.

use crate::labs::info::Lab;
use crate::labs::walk;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Every lab in `labs/info.toml` has its chapter, and SUMMARY.md lists it.
pub fn chapters_for_every_lab(root: &Path, labs: &[Lab]) -> Result<()> {
    let src = root.join("book/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).context("reading SUMMARY.md")?;
    let mut problems = Vec::new();
    let mut last_at = 0;
    for lab in labs {
        let chapter = lab.chapter();
        if !src.join(&chapter).is_file() {
            problems.push(format!(
                "lab {}: book/src/{chapter} does not exist",
                lab.number
            ));
        }
        match summary.find(&format!("]({chapter})")) {
            None => problems.push(format!(
                "lab {}: SUMMARY.md does not list {chapter}",
                lab.number
            )),
            Some(at) if at < last_at => problems.push(format!(
                "lab {}: SUMMARY.md lists {chapter} out of lab order",
                lab.number
            )),
            Some(at) => last_at = at,
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// Checks every built HTML page: no empty code block (an include that expanded to
/// nothing), and every local `href`/`src` resolves to a file of the built book.
/// Returns the pages.
pub fn check_pages(out: &Path) -> Result<Vec<PathBuf>> {
    let mut pages = Vec::new();
    walk(out, &mut |p| {
        if p.extension().is_some_and(|e| e == "html") {
            pages.push(p.to_path_buf());
        }
    })?;
    pages.sort();
    let mut problems = Vec::new();
    for page in &pages {
        let html = std::fs::read_to_string(page)?;
        let name = page.strip_prefix(out).unwrap_or(page).display().to_string();
        if has_empty_code_block(&html) {
            problems.push(format!("{name}: an empty code block"));
        }
        let mut targets = local_targets(&html);
        targets.sort();
        targets.dedup();
        for target in targets {
            let file = target.split(['#', '?']).next().unwrap_or_default();
            if file.is_empty() {
                continue;
            }
            let resolved = page.parent().unwrap_or(out).join(file);
            if !resolved.exists() {
                problems.push(format!("{name}: links to {target}, which does not exist"));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in the built book:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(pages)
}

/// `<code ...>` immediately closed, or holding only white space.
fn has_empty_code_block(html: &str) -> bool {
    let mut rest = html;
    while let Some(i) = rest.find("<code") {
        rest = &rest[i + 5..];
        let Some(gt) = rest.find('>') else {
            return false;
        };
        let body = &rest[gt + 1..];
        let Some(end) = body.find("</code>") else {
            return false;
        };
        if body[..end].trim().is_empty() {
            return true;
        }
        rest = &body[end..];
    }
    false
}

/// Relative `href` and `src` targets (not URLs with a scheme, not `#fragment`s).
fn local_targets(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\""] {
        let mut rest = html;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            let Some(end) = rest.find('"') else { break };
            let t = &rest[..end];
            let has_scheme = t
                .split_once(':')
                .is_some_and(|(s, _)| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphabetic()));
            if !(t.is_empty() || t.starts_with('#') || t.starts_with("//") || has_scheme) {
                out.push(t.to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_code_blocks_are_found() {
        assert!(has_empty_code_block(
            r#"<pre><code class="language-rust">  </code></pre>"#
        ));
        assert!(!has_empty_code_block(
            r#"<pre><code class="x">fn main() {}</code></pre>"#
        ));
        assert!(!has_empty_code_block("<p>no code</p>"));
    }

    #[test]
    fn only_local_targets_are_checked() {
        let html = r##"<a href="https://x.org/a">x</a><a href="#top">t</a><a href="labs/01.html#q">q</a><img src="../figures/lab01/a.svg"><a href="mailto:a@b">m</a>"##;
        assert_eq!(
            local_targets(html),
            ["labs/01.html#q", "../figures/lab01/a.svg"]
        );
    }

    #[test]
    fn a_missing_link_target_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.html"),
            r#"<a href="b.html">b</a><a href="c.html">c</a>"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("b.html"), "<p>b</p>").unwrap();
        let e = check_pages(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a.html: links to c.html"), "{e}");
        assert!(!e.contains("b.html,"), "{e}");
    }
}
