//! A run's results folder (`results/labNN/<stamp>/`), written in a temporary
//! folder and renamed into place only when complete.
//!
//! Readers pick "the newest run" by the folders' names (the book, lab 9's
//! table). A run that failed halfway (a full disk: a truncated `index.html`,
//! a 0-byte chart) must never be that run, and two runs started together must
//! never share a folder. So a run writes into `<parent>/.partial/<stamp>/`,
//! created exclusively under a name unique to its process and microsecond
//! ([`manifest::stamp`](crate::manifest::stamp)), and [`RunFolder::finish`]
//! renames it to `<parent>/<stamp>/`. A failed run's folder is removed when
//! its [`RunFolder`] is dropped unfinished. A run killed outright (Ctrl-C)
//! leaves its folder under `.partial/`, with what it measured, where no
//! reader of the newest run looks: the pickers look for `results.json` in
//! each folder of the parent, and `.partial` holds none.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::manifest;

/// The folder, beside the runs, that holds the runs still being written.
pub const PARTIAL_DIR: &str = ".partial";

/// How many suffixed names (`<stamp>-001`, ...) to try when a name is taken.
/// A name holds the process id and the microsecond, so a clash needs the same
/// process to start runs within one microsecond (or a clock set back).
const MAX_TRIES: u32 = 1000;

/// A run's results folder while it is written: under `<parent>/.partial/`
/// until [`RunFolder::finish`] renames it beside the finished runs; dropped
/// unfinished, it is removed, so a failed run is never "the newest run".
#[derive(Debug)]
pub struct RunFolder {
    parent: PathBuf,
    name: String,
    work: PathBuf,
    finished: bool,
}

impl RunFolder {
    /// Creates the temporary folder of a new run under `parent` (created if
    /// missing), named by [`manifest::stamp`].
    pub fn create(parent: &Path) -> Result<RunFolder> {
        Self::create_named(parent, &manifest::stamp())
    }

    /// [`RunFolder::create`] with a chosen name; a name that a finished or a
    /// running run already has gets a suffix, `-001` on, which sorts after it.
    pub fn create_named(parent: &Path, name: &str) -> Result<RunFolder> {
        let partial = parent.join(PARTIAL_DIR);
        for n in 0..MAX_TRIES {
            let name = match n {
                0 => name.to_owned(),
                n => format!("{name}-{n:03}"),
            };
            if parent.join(&name).symlink_metadata().is_ok() {
                continue;
            }
            make_partial(&partial)?;
            let work = partial.join(&name);
            // `create_dir`, not `create_dir_all`: it fails when the folder
            // exists, so two runs never both believe a folder is theirs.
            match std::fs::create_dir(&work) {
                Ok(()) => {
                    return Ok(RunFolder {
                        parent: parent.to_path_buf(),
                        name,
                        work,
                        finished: false,
                    });
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                // Another run's tidy-up removed the empty `.partial` between
                // the two calls: make it again.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(cause) => {
                    return Err(Error::Write {
                        doing: "creating",
                        path: work,
                        cause,
                    });
                }
            }
        }
        Err(Error::Write {
            doing: "creating",
            path: partial.join(name),
            cause: std::io::Error::new(
                ErrorKind::AlreadyExists,
                format!("{MAX_TRIES} run folders of this name exist already"),
            ),
        })
    }

    /// The folder to write the run's files into (the temporary one until
    /// [`RunFolder::finish`]).
    pub fn dir(&self) -> &Path {
        &self.work
    }

    /// Where the run will be once finished: `<parent>/<name>`.
    pub fn final_dir(&self) -> PathBuf {
        self.parent.join(&self.name)
    }

    /// Renames the complete run into place and returns where it now is. On
    /// failure the temporary folder is removed: the run never appears.
    pub fn finish(mut self) -> Result<PathBuf> {
        // Threads of one process that start runs in the same microsecond get
        // the same stamp; one may have finished under the name after the other
        // chose it. Such a run takes the next suffix, as `create_named` does.
        let base = self.name.clone();
        for n in 0..MAX_TRIES {
            let name = match n {
                0 => base.clone(),
                n => format!("{base}-{n:03}"),
            };
            let done = self.parent.join(&name);
            // A rename replaces an empty folder of the target's name; never let it.
            if done.symlink_metadata().is_ok() {
                continue;
            }
            match std::fs::rename(&self.work, &done) {
                Ok(()) => {
                    self.name = name;
                    self.finished = true;
                    // Best effort, only when empty: no other run is being written.
                    let _ = std::fs::remove_dir(self.parent.join(PARTIAL_DIR));
                    return Ok(done);
                }
                // Another run finished under this name since we looked (its
                // folder is never empty, so the rename fails rather than
                // replacing it).
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::AlreadyExists | ErrorKind::DirectoryNotEmpty
                    ) => {}
                Err(cause) => {
                    return Err(Error::Write {
                        doing: "renaming into place",
                        path: done,
                        cause,
                    });
                }
            }
        }
        Err(Error::Write {
            doing: "renaming into place",
            path: self.parent.join(&base),
            cause: std::io::Error::new(
                ErrorKind::AlreadyExists,
                format!("{MAX_TRIES} run folders of this name exist already"),
            ),
        })
    }
}

/// Creates `partial` (and its parents) where missing. Another run's tidy-up
/// may remove the empty folder at any moment (see [`RunFolder`]'s `Drop`), and
/// `create_dir_all` then failed with "File exists" for a folder that was gone
/// when it looked again (two runs started at once, one failing while the other
/// was created): retry until it stands or a real error comes.
fn make_partial(partial: &Path) -> Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::create_dir_all(partial) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < MAX_TRIES => tries += 1,
            Err(cause) => {
                return Err(Error::Write {
                    doing: "creating",
                    path: partial.to_path_buf(),
                    cause,
                });
            }
        }
    }
}

impl Drop for RunFolder {
    /// An unfinished run (its program failed, a write hit a full disk) takes
    /// its temporary folder with it, freeing the space and leaving no half run;
    /// the `.partial` and run-kind folders too where they are left empty.
    fn drop(&mut self) {
        if !self.finished {
            // Best effort: the run's own error is what its program reports.
            // `remove_dir` removes only empty folders, never another run's.
            let _ = std::fs::remove_dir_all(&self.work);
            let _ = std::fs::remove_dir(self.parent.join(PARTIAL_DIR));
            let _ = std::fs::remove_dir(&self.parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of `dir`'s entries, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn two_runs_started_in_the_same_second_get_their_own_folders() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join("lab06");
        // A run an older build named by the second, already on disk.
        std::fs::create_dir_all(parent.join("20261126-121746")).unwrap();
        // Runs started at once, as two `cargo lab 6` were.
        let start = std::sync::Barrier::new(8);
        let done: Vec<PathBuf> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..8)
                .map(|i| {
                    let (parent, start) = (&parent, &start);
                    s.spawn(move || {
                        start.wait();
                        let run = RunFolder::create(parent).unwrap();
                        std::fs::write(run.dir().join("results.json"), i.to_string()).unwrap();
                        run.finish().unwrap()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for (i, dir) in done.iter().enumerate() {
            let kept = std::fs::read_to_string(dir.join("results.json")).unwrap();
            assert_eq!(
                kept,
                i.to_string(),
                "{}: another run wrote here",
                dir.display()
            );
        }
        // Eight new folders and the old one; no `.partial` once none runs.
        let all = names(&parent);
        assert_eq!(all.len(), 9, "{all:?}");
        assert_eq!(all[0], "20261126-121746", "an old name sorts first");

        // One name asked for twice: the second run gets a suffix sorting after.
        let a = RunFolder::create_named(&parent, "20261126-121747.000001-p1").unwrap();
        let b = RunFolder::create_named(&parent, "20261126-121747.000001-p1").unwrap();
        assert_ne!(a.final_dir(), b.final_dir());
        let (a, b) = (a.finish().unwrap(), b.finish().unwrap());
        assert!(a < b, "{} then {}", a.display(), b.display());
        // And a finished run's name is never handed out again.
        let c = RunFolder::create_named(&parent, "20261126-121747.000001-p1").unwrap();
        assert!(c.final_dir() > b, "{}", c.final_dir().display());
    }

    #[test]
    fn a_failed_run_leaves_nothing_and_never_becomes_the_newest_run() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join("lab06");
        let earlier = RunFolder::create(&parent).unwrap().finish().unwrap();
        let run = RunFolder::create(&parent).unwrap();
        std::fs::write(run.dir().join("index.html"), "<html><body>trunc").unwrap();
        assert!(run.dir().starts_with(parent.join(PARTIAL_DIR)));
        let would_be = run.final_dir();
        drop(run);
        assert!(!would_be.exists());
        assert!(!parent.join(PARTIAL_DIR).exists());
        // The newest run, by the pickers' rule (the greatest name with a
        // results file), is still the earlier one.
        let newest = names(&parent)
            .into_iter()
            .rfind(|n| parent.join(n).is_dir() && n != PARTIAL_DIR);
        assert_eq!(newest.map(|n| parent.join(n)), Some(earlier));
    }

    #[test]
    fn a_run_folder_that_cannot_be_made_is_an_error_and_a_taken_name_is_never_replaced() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("results");
        std::fs::write(&file, "").unwrap();
        let e = RunFolder::create(&file.join("lab06")).unwrap_err();
        assert!(e.to_string().contains("creating"), "{e}");

        // Something took the final name meanwhile: never replaced, the run
        // takes the next suffix (threads of one process that started in the
        // same microsecond raced so).
        let parent = root.path().join("lab07");
        let run = RunFolder::create(&parent).unwrap();
        std::fs::create_dir(run.final_dir()).unwrap();
        let taken = run.final_dir();
        let done = run.finish().unwrap();
        assert_eq!(
            done.file_name().unwrap().to_string_lossy(),
            format!("{}-001", taken.file_name().unwrap().to_string_lossy())
        );
        assert!(names(&taken).is_empty(), "the other folder was replaced");
        assert!(!parent.join(PARTIAL_DIR).exists());
        // A run that fails alone leaves not even its lab's folder.
        let alone = root.path().join("lab08");
        drop(RunFolder::create(&alone).unwrap());
        assert!(!alone.exists());
    }
}
