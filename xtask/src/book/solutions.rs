//! A lab's solution is one deliberate step away: a chapter shows it folded in a
//! `<details>` block, never open under the exercise.
//!
//! An include in a lab chapter shows solution code when its file is under
//! `trainers/` or `collectives/` (where the labs' solutions live), is a lab's
//! `solution.rs`, or sits under a heading that names a solution. Such an include
//! must be inside `<details>` … `</details>`, unless the line above its code block is
//! a comment `<!-- not the solution: why -->`: the seam the learner plugs into, or
//! code the chapter explains around the exercise.

use crate::labs::info::Lab;
use anyhow::{Context, Result, bail};
use std::path::Path;

/// The comment that says an include of trainers' or collectives' code is context.
pub const NOT_THE_SOLUTION: &str = "<!-- not the solution:";

/// Checks every lab's chapter.
pub fn folded(root: &Path, labs: &[Lab]) -> Result<()> {
    let mut problems = Vec::new();
    for lab in labs {
        let rel = format!("book/src/{}", lab.chapter());
        let text =
            std::fs::read_to_string(root.join(&rel)).with_context(|| format!("reading {rel}"))?;
        for (line, target) in open_solutions(&text) {
            problems.push(format!(
                "{rel}:{line}: {target} is solution code outside a <details> block \
                 (fold it, or mark context with `{NOT_THE_SOLUTION} why -->` above its code block)"
            ));
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} solution(s) open in the book:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// The includes of solution code outside `<details>` in a chapter: line (from 1)
/// and include target.
fn open_solutions(chapter: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = chapter.lines().collect();
    let mut open = Vec::new();
    let mut fenced = false;
    let mut details = 0usize;
    let mut heading_names_solution = false;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            if trimmed.starts_with('#') {
                heading_names_solution = trimmed.to_ascii_lowercase().contains("solution");
            }
            details += trimmed.matches("<details").count();
            details = details.saturating_sub(trimmed.matches("</details>").count());
        }
        let Some(target) = include_target(line) else {
            continue;
        };
        let is_solution = target.contains("trainers/")
            || target.contains("collectives/")
            || target
                .split(':')
                .next()
                .is_some_and(|f| f.ends_with("solution.rs"))
            || heading_names_solution;
        if is_solution && details == 0 && !marked_context(&lines[..i]) {
            open.push((i + 1, target.to_owned()));
        }
    }
    open
}

/// The target of a `{{#include target}}` on this line.
fn include_target(line: &str) -> Option<&str> {
    let start = line.find("{{#include ")? + "{{#include ".len();
    let end = line[start..].find("}}")?;
    Some(line[start..start + end].trim())
}

/// Whether the first line above the include's code block (skipping its fence
/// and blank lines) is a `<!-- not the solution: ... -->` comment.
fn marked_context(above: &[&str]) -> bool {
    above
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| !l.is_empty() && !l.starts_with("```"))
        .is_some_and(|l| l.starts_with(NOT_THE_SOLUTION))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXERCISE: &str = "## The exercise\n\n```rust,ignore\n\
        {{#include ../../../labs/07-ddp/src/exercise.rs:step1}}\n```\n\n";

    #[test]
    fn a_solution_open_under_the_exercise_is_found() {
        let open = format!(
            "{EXERCISE}## The solution\n\n```rust,ignore\n\
             {{{{#include ../../../trainers/src/ddp/sync.rs:broadcast}}}}\n```\n"
        );
        assert_eq!(
            open_solutions(&open),
            [(10, "../../../trainers/src/ddp/sync.rs:broadcast".to_owned())]
        );
        // A lab's own solution file or anything under a solution heading counts too.
        let own = "## A solution\n\n```rust\n{{#include ../../../labs/09/src/lib.rs:rule}}\n```\n";
        assert_eq!(open_solutions(own).len(), 1);
        let file = "## Elsewhere\n```rust\n{{#include ../../../labs/01/src/solution.rs:s}}\n```\n";
        assert_eq!(open_solutions(file).len(), 1);
    }

    #[test]
    fn a_folded_solution_and_marked_context_pass() {
        let folded = format!(
            "{EXERCISE}## The solution\n\n<details>\n<summary>The solution</summary>\n\n\
             ```rust,ignore\n{{{{#include ../../../trainers/src/ddp/sync.rs:broadcast}}}}\n```\n\n\
             </details>\n\n## What you should see\n\n{{{{#include ../figures/lab07/run.md}}}}\n"
        );
        assert!(open_solutions(&folded).is_empty());
        let context = "## The exercise\n\n<!-- not the solution: the seam -->\n\n```rust\n\
            {{#include ../../../collectives/src/algorithms/plug.rs:plug}}\n```\n";
        assert!(open_solutions(context).is_empty());
        // The mark covers one block only.
        let twice = format!(
            "{context}\n```rust\n{{{{#include ../../../collectives/src/algorithms/ring.rs:x}}}}\n```\n"
        );
        assert_eq!(open_solutions(&twice).len(), 1);
    }

    #[test]
    fn the_workspace_chapters_fold_their_solutions() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let labs = crate::labs::info::load(root).unwrap();
        folded(root, &labs).unwrap();
    }
}
