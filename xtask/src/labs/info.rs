//! `labs/info.toml`: the one list of the workshop's labs, in course order (as
//! rustlings' `info.toml`). Everything else about a lab is derived from its number
//! and name: the folder `labs/NN-name/`, the package `labNN-name`, the learner's file
//! `src/exercise.rs`, the chapter `book/src/labs/NN-name.md`, the results folder
//! `results/labNN/`.

use super::hints;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One lab's metadata.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lab {
    /// Its place in the course, from 1.
    pub number: u32,
    /// The folder name after the number, e.g. `first-allreduce`.
    pub name: String,
    /// The chapter title.
    pub title: String,
    /// What the learner will have built and seen, one sentence.
    pub goal: String,
    /// About how long it takes, in minutes.
    pub minutes: u32,
    /// Whether it uses a CUDA GPU when one is present.
    #[serde(default)]
    pub gpu: bool,
    /// What "done" looks like.
    pub done: String,
    /// The hint ladder, questions one step more concrete each: the concept, the
    /// approach, then near the code (see [`super::hints`]).
    pub hints: Vec<String>,
    /// Hints for mistakes the self-check can name (`hint: <key>` in its failure).
    #[serde(default)]
    pub diagnosis: Vec<Diagnosis>,
}

/// A hint for one mistake the self-check recognises: `[[lab.diagnosis]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Diagnosis {
    /// What the check prints after `hint: `, e.g. `avg-not-sum`.
    pub key: String,
    /// The hint, a question like the ladder's.
    pub hint: String,
}

impl Lab {
    /// `01-first-allreduce`.
    pub fn dir_name(&self) -> String {
        format!("{:02}-{}", self.number, self.name)
    }

    /// `lab01-first-allreduce` (Cargo rejects package names that start with a digit).
    pub fn package(&self) -> String {
        format!("lab{:02}-{}", self.number, self.name)
    }

    /// `lab01`: the results folder's name and the tag in `TODO(lab 01)` markers.
    pub fn short(&self) -> String {
        format!("lab{:02}", self.number)
    }

    /// `labs/NN-name/`.
    pub fn dir(&self, root: &Path) -> PathBuf {
        root.join("labs").join(self.dir_name())
    }

    /// The one file the learner edits.
    pub fn exercise(&self, root: &Path) -> PathBuf {
        self.dir(root).join("src/exercise.rs")
    }

    /// The exercise file relative to the repository root (for git and messages).
    pub fn exercise_rel(&self) -> String {
        format!("labs/{}/src/exercise.rs", self.dir_name())
    }

    /// The book chapter, relative to `book/src`.
    pub fn chapter(&self) -> String {
        format!("labs/{}.md", self.dir_name())
    }

    /// The marker every unsolved piece of the exercise carries.
    pub fn todo_marker(&self) -> String {
        format!("TODO(lab {:02})", self.number)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    lab: Vec<Lab>,
}

/// Reads and checks `labs/info.toml`.
pub fn load(root: &Path) -> Result<Vec<Lab>> {
    let path = root.join("labs/info.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("in {}", path.display()))
}

fn parse(text: &str) -> Result<Vec<Lab>> {
    let labs = toml::from_str::<File>(text)?.lab;
    // The course's order. A number may be missing while a lab is being
    // written (the course is built lab by lab, not always in order), but
    // never repeated or out of order.
    let mut last = 0;
    for lab in &labs {
        if lab.number <= last {
            bail!(
                "lab {:?} is number {} but follows lab {last} (labs are listed in increasing order)",
                lab.name,
                lab.number
            );
        }
        last = lab.number;
        if lab.name.is_empty()
            || !lab
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            bail!(
                "lab {}: name {:?} must be lowercase-with-dashes",
                lab.number,
                lab.name
            );
        }
        let is_question = |h: &String| h.trim_end().ends_with('?');
        if lab.hints.is_empty() || !lab.hints.iter().all(is_question) {
            bail!("lab {}: hints must be questions (end with '?')", lab.number);
        }
        for (i, d) in lab.diagnosis.iter().enumerate() {
            if !hints::is_key(&d.key) {
                bail!(
                    "lab {}: diagnosis key {:?} must be lowercase-with-dashes",
                    lab.number,
                    d.key
                );
            }
            if lab.diagnosis[..i].iter().any(|e| e.key == d.key) {
                bail!("lab {}: diagnosis key {:?} is repeated", lab.number, d.key);
            }
            if !is_question(&d.hint) {
                bail!(
                    "lab {}: the hint for {:?} must be a question (end with '?')",
                    lab.number,
                    d.key
                );
            }
        }
    }
    Ok(labs)
}

/// The lab with this number, or an error listing the ones there are.
pub fn find(labs: &[Lab], number: u32) -> Result<&Lab> {
    labs.iter().find(|l| l.number == number).with_context(|| {
        let there: Vec<String> = labs.iter().map(|l| l.number.to_string()).collect();
        format!(
            "there is no lab {number}; the labs are {} (`cargo lab list`)",
            there.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
[[lab]]
number = 1
name = "first-allreduce"
title = "A first all-reduce"
goal = "g"
minutes = 20
done = "d"
hints = ["Who adds?"]
"#;

    #[test]
    fn names_are_derived_from_number_and_name() {
        let labs = parse(ONE).unwrap();
        let l = &labs[0];
        assert_eq!(l.dir_name(), "01-first-allreduce");
        assert_eq!(l.package(), "lab01-first-allreduce");
        assert_eq!(l.todo_marker(), "TODO(lab 01)");
        assert_eq!(l.chapter(), "labs/01-first-allreduce.md");
        assert!(!l.gpu);
    }

    #[test]
    fn repeated_or_out_of_order_numbers_and_statements_as_hints_are_refused() {
        let two = format!("{ONE}{}", ONE.replace("first-allreduce", "second"));
        let e = parse(&two).unwrap_err();
        assert!(e.to_string().contains("follows lab 1"), "{e}");
        // A gap is allowed (a lab being written); the order is not.
        assert!(parse(&two.replacen("number = 1", "number = 3", 1)).is_err());
        assert!(parse(&format!("{ONE}{}", ONE.replace("number = 1", "number = 4"))).is_ok());
        let e = parse(&ONE.replace("Who adds?", "Rank 0 adds.")).unwrap_err();
        assert!(e.to_string().contains("questions"), "{e}");
        assert!(parse(&ONE.replace("minutes", "minutos")).is_err());
    }

    #[test]
    fn keyed_hints_are_read_and_bad_keys_refused() {
        let keyed =
            format!("{ONE}\n[[lab.diagnosis]]\nkey = \"avg-not-sum\"\nhint = \"Sum or mean?\"\n");
        let labs = parse(&keyed).unwrap();
        assert_eq!(labs[0].diagnosis[0].key, "avg-not-sum");
        assert!(parse(&keyed.replace("avg-not-sum", "Avg Not Sum")).is_err());
        assert!(parse(&keyed.replace("Sum or mean?", "Divide.")).is_err());
        let twice =
            format!("{keyed}\n[[lab.diagnosis]]\nkey = \"avg-not-sum\"\nhint = \"Again?\"\n");
        let e = parse(&twice).unwrap_err();
        assert!(e.to_string().contains("repeated"), "{e}");
    }

    /// The real file parses, and every lab in it has its folder and learner's file.
    #[test]
    fn the_workspace_labs_exist() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let labs = load(root).unwrap();
        assert!(!labs.is_empty());
        for lab in &labs {
            assert!(lab.exercise(root).is_file(), "{}", lab.exercise_rel());
            let manifest = std::fs::read_to_string(lab.dir(root).join("Cargo.toml")).unwrap();
            assert!(
                manifest.contains(&format!("name = \"{}\"", lab.package())),
                "labs/{}/Cargo.toml must name the package {}",
                lab.dir_name(),
                lab.package()
            );
        }
    }
}
