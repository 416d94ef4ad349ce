//! A one-host job started without `RINGSIDE_JOB_TOKEN` (plain `RANK`/`WORLD_SIZE`
//! variables, torchrun, mpirun): its derived token is a hash of values anyone on the
//! host can read or guess, so rank 0 draws a random token instead and hands it to
//! the other ranks through a file only this user can read (mode 0600, in a 0700
//! folder: `$XDG_RUNTIME_DIR/ringside/`, else `/tmp/ringside-<uid>/`), named after
//! the derived token so that every rank of the job, and only it, finds the same
//! file. Rank 0 publishes it only once its store listens (a port already taken
//! fails before anything is written), and removes it once every rank has joined,
//! or as soon as it fails or gives up before that ([`Published`] removes it when
//! dropped). Only a rank 0 killed outright leaves one behind, which the next job
//! of the same name replaces; a rank that reads such a stale token cannot
//! complete the store's hello with it, and never sends it (the store proves the
//! token first).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::rendezvous::store::Token;

/// The private folder for this user's job secrets, created if missing, and
/// refused unless it is a real folder of this user that nobody else can enter.
pub(super) fn private_dir() -> Result<PathBuf> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(run) => PathBuf::from(run).join("ringside"),
        None => std::env::temp_dir().join(format!("ringside-{uid}")),
    };
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io(format!("creating {}", dir.display()), e)),
    }
    let meta = fs::symlink_metadata(&dir)
        .map_err(|e| Error::io(format!("inspecting {}", dir.display()), e))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(Error::Rendezvous(format!(
            "{} is not a private folder of this user (a folder owned by uid {uid}, mode \
             0700): refusing to keep the job's secret there; set RINGSIDE_JOB_TOKEN instead",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The secret's file for the job whose derived token is `key`.
pub(super) fn path_in(dir: &Path, key: &Token) -> PathBuf {
    // The derived token is public anyway; the file name only has to be the job's.
    dir.join(format!("job-{key}.token"))
}

/// A published secret: the file is removed when this is dropped, on every way
/// out of rank 0's rendezvous (joined, failed or timed out).
#[derive(Debug)]
pub(super) struct Published {
    path: PathBuf,
}

impl Drop for Published {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

/// Rank 0: publishes the job's `token` at `path` (replacing a stale file of an
/// earlier job with the same name), readable by this user only, until the
/// returned guard is dropped.
pub(super) fn publish(path: &Path, token: &Token) -> Result<Published> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(token.to_string().as_bytes())?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(format!("writing the job secret {}", path.display()), e)
    })?;
    Ok(Published {
        path: path.to_owned(),
    })
}

/// The token at `path`, if the file is there, this user's and private.
pub(super) fn read(path: &Path) -> Option<Token> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    // SAFETY: getuid has no preconditions.
    let mine = meta.uid() == unsafe { libc::getuid() };
    if !mine || meta.permissions().mode() & 0o077 != 0 {
        return None;
    }
    let text = std::io::read_to_string(f).ok()?;
    Token::parse(&text).ok()
}

/// Removes the secret (best effort: it only held a token that is useless once
/// the job ends).
fn remove(path: &Path) {
    let _ = fs::remove_file(path);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_secret_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let key = Token::from_bytes([3; 16]);
        let path = path_in(dir.path(), &key);
        assert!(read(&path).is_none());
        let t = Token::generate().unwrap();
        let first = publish(&path, &t).unwrap();
        assert_eq!(read(&path), Some(t));
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A second job of the same name replaces a stale file.
        std::mem::forget(first);
        let t2 = Token::generate().unwrap();
        let second = publish(&path, &t2).unwrap();
        assert_eq!(read(&path), Some(t2));
        // A file others could read is not trusted.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read(&path).is_none());
        drop(second);
        assert!(!path.exists());
    }

    #[test]
    fn the_private_dir_is_this_users_and_closed() {
        let dir = private_dir().unwrap();
        let meta = fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o077, 0);
    }
}
