//! Names of the shared-memory files, and removing those a killed parent left in
//! /dev/shm (file-system sharing).

use super::*;

/// Removes the named shared-memory files of this module whose owner (the pid in the
/// name) is no longer running: what a killed parent left behind. Returns them.
pub fn remove_stale_shm() -> Result<Vec<PathBuf>> {
    remove_stale_in(Path::new(SHM_DIR))
}

/// [`remove_stale_shm`] in another folder.
pub fn remove_stale_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // No /dev/shm: nothing can be stale there.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        let path = entry.path();
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            // Another process cleaned it up first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(Error::Io { path, source }),
        }
    }
    Ok(removed)
}

/// The pid in `ringside-hogwild-<pid>-<n>`, if `name` has that form.
pub fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(SHM_PREFIX)?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok().filter(|&p: &i32| p > 0)
}

pub(super) fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    // EPERM: it exists but belongs to someone else.
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

pub(super) fn unique_name() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{SHM_PREFIX}{}-{n}", std::process::id())
}
