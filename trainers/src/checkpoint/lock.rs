//! One live run per checkpoint folder.
//!
//! A run that saves into a folder holds an exclusive `flock` on the folder's
//! [`LOCK_FILE`], which records its pid, when it started and its command line.
//! A second run (a `--resume` while the first still trains) is refused with an
//! error naming the first's pid, instead of both resuming from each other's
//! saves and overwriting one file.
//!
//! `flock`, not a pid file alone: the kernel releases the lock when its holder
//! exits, however it exits (SIGKILL, a crash), so a lock left by a dead run is
//! taken over without guessing from pids, and a pid reused by an unrelated
//! process cannot keep a folder locked. The file itself is never removed:
//! unlinking a lock file lets a third process lock a new file of the same name
//! while a second still holds the old one.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Error, Result};

/// The lock file's name inside a checkpoint folder.
pub const LOCK_FILE: &str = ".lock";

/// A checkpoint folder held by this process; released when dropped (or when the
/// process exits, however it exits).
#[derive(Debug)]
pub struct FolderLock {
    file: File,
    dir: PathBuf,
}

impl FolderLock {
    /// The folder held.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // Still held here: empty the record so that it never names a run that
        // has finished. Closing the file releases the lock. Best effort: a
        // leftover record names a dead pid, which the next run ignores.
        let _ = self.file.set_len(0);
    }
}

/// Creates `dir` if missing and locks it for this process, or fails naming the
/// live process that holds it ("checkpoint DIR: folder in use by pid N (started
/// 12 s ago: ringside-train ...)").
pub fn lock_folder(dir: impl AsRef<Path>) -> Result<FolderLock> {
    let dir = dir.as_ref();
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(LOCK_FILE);
    // O_NOFOLLOW: a neighbour's symbolic link must not make us write our record
    // into a file of theirs. O_NONBLOCK: nor a FIFO in its place block the open.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(io(&path))?;
    if !file.metadata().map_err(io(&path))?.is_file() {
        return Err(in_use(
            dir,
            "something that is not a regular file in its place",
        ));
    }
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::Io { path, source: e });
        }
        let mut record = String::new();
        // A record being written (the holder locked a moment ago) reads short:
        // the message says so rather than failing.
        let _ = file.read_to_string(&mut record);
        return Err(in_use(dir, &holder(&record)));
    }
    // Ours. A record left there names a run that exited without emptying it.
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let command: Vec<String> = std::env::args().collect();
    let record = format!(
        "pid {}\nstarted {started}\ncommand {}\n",
        std::process::id(),
        command.join(" ")
    );
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(record.as_bytes()))
        .map_err(io(&path))?;
    Ok(FolderLock {
        file,
        dir: dir.to_path_buf(),
    })
}

fn in_use(dir: &Path, by: &str) -> Error {
    Error::Checkpoint {
        path: dir.to_path_buf(),
        what: format!(
            "folder in use by {by}; wait for it to finish or choose another --checkpoint folder"
        ),
    }
}

/// "pid N (started 12 s ago: COMMAND)" from a lock record.
fn holder(record: &str) -> String {
    let field = |key: &str| {
        record
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
    };
    let Some(pid) = field("pid").and_then(|p| p.trim().parse::<i32>().ok()) else {
        return "another process (it has not recorded its pid yet)".into();
    };
    let mut about = Vec::new();
    if let Some(started) = field("started").and_then(|s| s.trim().parse::<u64>().ok()) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        about.push(format!("started {} s ago", now.saturating_sub(started)));
    }
    if let Some(command) = field("command").filter(|c| !c.is_empty()) {
        about.push(command.to_owned());
    }
    // kill(pid, 0) probes without signalling: ESRCH means no such process.
    // SAFETY: signal 0 sends nothing.
    let gone = pid > 0
        && unsafe { libc::kill(pid, 0) } == -1
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    if gone {
        about.push("it has exited, but a process it started still holds the lock".into());
    }
    if about.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid} ({})", about.join(": "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_while_another_live_run_trains_into_the_folder_is_refused_naming_its_pid() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let first = lock_folder(&dir).unwrap();
        assert_eq!(first.dir(), dir);
        // A second open file description conflicts with the first under flock,
        // as a second process's would.
        let e = lock_folder(&dir).unwrap_err().to_string();
        let pid = format!("pid {} (started ", std::process::id());
        for part in [dir.to_str().unwrap(), "in use by", &pid, "--checkpoint"] {
            assert!(e.contains(part), "{part:?} not in: {e}");
        }
        // Once the first run is done, the folder is free again.
        drop(first);
        let again = lock_folder(&dir).unwrap();
        drop(again);
        assert_eq!(std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap(), "");
    }

    #[test]
    fn a_lock_left_by_a_dead_run_is_taken_over() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        // A run killed with SIGKILL leaves its record; the kernel released its
        // flock. A child that has exited has a pid no live process holds... yet.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        std::fs::write(
            dir.join(LOCK_FILE),
            format!("pid {dead}\nstarted 1\ncommand ringside-train\n"),
        )
        .unwrap();
        let lock = lock_folder(dir).unwrap();
        let record = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert!(
            record.starts_with(&format!("pid {}\n", std::process::id())),
            "{record}"
        );
        drop(lock);
    }

    #[test]
    fn a_symbolic_link_as_the_lock_file_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let theirs = root.path().join("theirs");
        std::fs::write(&theirs, "keep me").unwrap();
        let dir = root.path().join("ckpt");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&theirs, dir.join(LOCK_FILE)).unwrap();
        assert!(lock_folder(&dir).is_err());
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "keep me");
    }

    #[test]
    fn the_holder_is_described_from_its_record() {
        assert_eq!(
            holder(""),
            "another process (it has not recorded its pid yet)"
        );
        let me = std::process::id();
        assert_eq!(holder(&format!("pid {me}\n")), format!("pid {me}"));
        let s = holder(&format!("pid {me}\nstarted 0\ncommand x --resume\n"));
        assert!(s.starts_with(&format!("pid {me} (started ")), "{s}");
        assert!(s.ends_with(" s ago: x --resume)"), "{s}");
    }
}
