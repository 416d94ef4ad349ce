//! `labs/info.toml`: the one list of the workshop's labs, in course order (as
//! rustlings' `info.toml`). Everything else about a lab is derived from its number
//! and name: the folder `labs/NN-name/`, the package `labNN-name`, the learner's file
//! `src/exercise.rs`, the chapter `book/src/labs/NN-name.md`, the results folder
//! `results/labNN/`. A lab may have an optional stretch goal (`[lab.stretch]`):
//! its learner's file is `src/stretch.rs`, its self-check the test `tests/stretch.rs`,
//! built and run apart from the main exercise's so that neither depends on the other.

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
    /// The optional stretch goal for fast learners.
    #[serde(default)]
    pub stretch: Option<Stretch>,
}

/// A lab's optional stretch goal: `[lab.stretch]`. The learner who never opens
/// it is done when the main check passes; `cargo lab check N --stretch` judges it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stretch {
    /// A short title, e.g. "a bidirectional ring".
    pub title: String,
    /// What it asks of the learner, one or two sentences.
    pub ask: String,
    /// Its own hint ladder (concept, approach, near-code), questions as the main one's.
    pub hints: Vec<String>,
    /// Hints for mistakes its check can name.
    #[serde(default)]
    pub diagnosis: Vec<Diagnosis>,
}

/// Which part of a lab a command is about: the main exercise or its stretch goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `src/exercise.rs`, checked by `tests/check.rs`.
    Main,
    /// `src/stretch.rs`, checked by `tests/stretch.rs`.
    Stretch,
}

impl Part {
    /// The integration test that checks this part (also its executable's name).
    pub fn test(self) -> &'static str {
        match self {
            Part::Main => "check",
            Part::Stretch => "stretch",
        }
    }

    /// The learner's file, relative to the lab's folder.
    pub fn file(self) -> &'static str {
        match self {
            Part::Main => "src/exercise.rs",
            Part::Stretch => "src/stretch.rs",
        }
    }

    /// ` --stretch` for the stretch (to append to a command), empty for the main part.
    pub fn flag(self) -> &'static str {
        match self {
            Part::Main => "",
            Part::Stretch => " --stretch",
        }
    }
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

    /// The learner's file of `part` (`src/exercise.rs`, the one file the main
    /// exercise edits; `src/stretch.rs`).
    pub fn file(&self, root: &Path, part: Part) -> PathBuf {
        self.dir(root).join(part.file())
    }

    /// The learner's file of `part` relative to the repository root.
    pub fn file_rel(&self, part: Part) -> String {
        format!("labs/{}/{}", self.dir_name(), part.file())
    }

    /// The key of `part` in `.ringside/labs.json`: `lab06`, `lab06-stretch`.
    pub fn progress_key(&self, part: Part) -> String {
        match part {
            Part::Main => self.short(),
            Part::Stretch => format!("{}-stretch", self.short()),
        }
    }

    /// The marker every unsolved piece of `part` carries: `TODO(lab 06)`,
    /// `TODO(lab 06 stretch)` (which does not contain the first, so the gate
    /// tells a stretch's TODO from the main exercise's).
    pub fn marker(&self, part: Part) -> String {
        match part {
            Part::Main => self.todo_marker(),
            Part::Stretch => format!("TODO(lab {:02} stretch)", self.number),
        }
    }

    /// `part`'s hint ladder and keyed hints, or the error saying this lab has no
    /// stretch goal (and which labs do).
    pub fn hints_of(&self, part: Part) -> Result<(&[String], &[Diagnosis])> {
        match (part, &self.stretch) {
            (Part::Main, _) => Ok((&self.hints, &self.diagnosis)),
            (Part::Stretch, Some(s)) => Ok((&s.hints, &s.diagnosis)),
            (Part::Stretch, None) => bail!("lab {} has no stretch goal", self.number),
        }
    }

    /// Checks that `part` exists for this lab: the main part always does; the
    /// stretch only where `[lab.stretch]` says so.
    pub fn require(&self, part: Part) -> Result<()> {
        self.hints_of(part).map(drop)
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
        let what = format!("lab {}", lab.number);
        validate_hints(&what, &lab.hints, &lab.diagnosis)?;
        if let Some(s) = &lab.stretch {
            let what = format!("lab {}'s stretch goal", lab.number);
            if s.title.trim().is_empty() || s.ask.trim().is_empty() {
                bail!("{what}: title and ask must say something");
            }
            validate_hints(&what, &s.hints, &s.diagnosis)?;
        }
    }
    Ok(labs)
}

/// A ladder and its keyed hints, the same rules for a lab and its stretch goal
/// (`what`: "lab 6", "lab 6's stretch goal"): at least one ladder step, every
/// hint a question, keys lowercase-with-dashes and not repeated.
fn validate_hints(what: &str, ladder: &[String], diagnosis: &[Diagnosis]) -> Result<()> {
    let is_question = |h: &String| h.trim_end().ends_with('?');
    if ladder.is_empty() || !ladder.iter().all(is_question) {
        bail!("{what}: hints must be questions (end with '?')");
    }
    for (i, d) in diagnosis.iter().enumerate() {
        if !hints::is_key(&d.key) {
            bail!(
                "{what}: diagnosis key {:?} must be lowercase-with-dashes",
                d.key
            );
        }
        if diagnosis[..i].iter().any(|e| e.key == d.key) {
            bail!("{what}: diagnosis key {:?} is repeated", d.key);
        }
        if !is_question(&d.hint) {
            bail!(
                "{what}: the hint for {:?} must be a question (end with '?')",
                d.key
            );
        }
    }
    Ok(())
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

    const STRETCH: &str = "\n[lab.stretch]\ntitle = \"a bidirectional ring\"\nask = \"a\"\n\
        hints = [\"Which way?\", \"How?\"]\n\n[[lab.stretch.diagnosis]]\nkey = \"one-way\"\n\
        hint = \"Both ways?\"\n";

    #[test]
    fn a_stretch_goal_is_read_with_its_own_ladder_and_keyed_hints() {
        let labs = parse(&format!("{ONE}{STRETCH}")).unwrap();
        let l = &labs[0];
        let s = l.stretch.as_ref().unwrap();
        assert_eq!(s.title, "a bidirectional ring");
        let (ladder, keyed) = l.hints_of(Part::Stretch).unwrap();
        assert_eq!(ladder, ["Which way?", "How?"]);
        assert_eq!(keyed[0].key, "one-way");
        // The main ladder stays the main one.
        assert_eq!(l.hints_of(Part::Main).unwrap().0, ["Who adds?"]);
        assert_eq!(l.marker(Part::Stretch), "TODO(lab 01 stretch)");
        assert!(!l.marker(Part::Stretch).contains(&l.marker(Part::Main)));
        assert_eq!(
            l.file_rel(Part::Stretch),
            "labs/01-first-allreduce/src/stretch.rs"
        );
        assert_eq!(l.progress_key(Part::Stretch), "lab01-stretch");
    }

    #[test]
    fn a_stretch_hint_that_is_not_a_question_is_refused() {
        let bad = format!("{ONE}{}", STRETCH.replace("How?", "Halve it."));
        let e = parse(&bad).unwrap_err();
        assert!(
            e.to_string()
                .contains("lab 1's stretch goal: hints must be questions"),
            "{e}"
        );
        let bad = format!("{ONE}{}", STRETCH.replace("Both ways?", "Both ways."));
        let e = parse(&bad).unwrap_err();
        assert!(e.to_string().contains("stretch goal: the hint for"), "{e}");
        let bad = format!(
            "{ONE}{}",
            STRETCH.replace("hints = [\"Which way?\", \"How?\"]", "hints = []")
        );
        assert!(parse(&bad).is_err());
        assert!(parse(&format!("{ONE}{}", STRETCH.replace("ask", "asks"))).is_err());
    }

    #[test]
    fn a_lab_without_a_stretch_says_so_when_the_stretch_is_asked_for() {
        let labs = parse(&ONE.replace("number = 1", "number = 3")).unwrap();
        let e = labs[0].require(Part::Stretch).unwrap_err();
        assert_eq!(e.to_string(), "lab 3 has no stretch goal");
        labs[0].require(Part::Main).unwrap();
    }

    /// The real file parses, and every lab in it has its folder, learner's file
    /// and stretch goal.
    #[test]
    fn the_workspace_labs_exist() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let labs = load(root).unwrap();
        assert!(!labs.is_empty());
        for lab in &labs {
            let exercise = lab.file(root, Part::Main);
            assert!(exercise.is_file(), "{}", lab.file_rel(Part::Main));
            // Every lab offers whoever finishes early a stretch goal (issue 24).
            assert!(
                lab.stretch.is_some(),
                "lab {} has no [lab.stretch]",
                lab.number
            );
            if lab.stretch.is_some() {
                // A stretch goal has its learner's file, its check, and its
                // section at the end of the chapter.
                let rel = lab.file_rel(Part::Stretch);
                assert!(lab.file(root, Part::Stretch).is_file(), "{rel}");
                assert!(lab.dir(root).join("tests/stretch.rs").is_file(), "{rel}");
                let chapter =
                    std::fs::read_to_string(root.join("book/src").join(lab.chapter())).unwrap();
                assert!(
                    chapter.contains("## Stretch goal"),
                    "{} needs a \"## Stretch goal\" section",
                    lab.chapter()
                );
            }
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
