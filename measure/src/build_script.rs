//! For the build scripts of the binaries that write results (cli, labkit):
//! records what the manifest reports about their build, the git commit and the
//! compiler, as `RINGSIDE_GIT_SHA` and `RINGSIDE_RUSTC` for [`crate::build!`].
//! In the binaries' crates, not in `measure`'s own build: a commit changes the
//! sha, and everything that depends on `measure` (collectives and all above it)
//! would be recompiled after every commit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Call from a build script: `fn main() { measure::build_script::emit(); }`.
pub fn emit() {
    let sha = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    // A build from a tree with uncommitted changes says so, so a result
    // cannot be attributed to a commit that did not produce it.
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    let sha = match (sha.is_empty(), dirty) {
        (true, _) => "unknown".to_owned(),
        (false, true) => format!("{sha}-dirty"),
        (false, false) => sha,
    };
    println!("cargo:rustc-env=RINGSIDE_GIT_SHA={sha}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    println!("cargo:rustc-env=RINGSIDE_RUSTC={version}");
    let here = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    for path in watched(here.as_deref().unwrap_or(Path::new("."))) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The files whose change means a new commit or a changed tree: `HEAD` and
/// `index` in this checkout's git directory, and the branch refs in the
/// common one. In a linked worktree (`git worktree add`) `.git` is a file
/// naming the checkout's own directory under the main repository's, and the
/// refs live in the main one: watching `.git/HEAD` there named files that do
/// not exist, which makes cargo rerun the script, and rebuild the binaries,
/// on every build. Only paths that exist are returned.
fn watched(dir: &Path) -> Vec<PathBuf> {
    let ask = |what: &str| -> Option<PathBuf> {
        let out = Command::new("git")
            .args(["rev-parse", "--path-format=absolute", what])
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let s = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (!s.is_empty()).then(|| PathBuf::from(s))
    };
    let mut paths = Vec::new();
    if let Some(git) = ask("--git-dir") {
        paths.extend(["HEAD", "index"].map(|f| git.join(f)));
    }
    if let Some(common) = ask("--git-common-dir") {
        paths.extend(["refs/heads", "packed-refs"].map(|f| common.join(f)));
    }
    paths.retain(|p| p.exists());
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "git {args:?} in {}", dir.display());
    }

    #[test]
    fn a_worktree_checkout_watched_files_that_do_not_exist() {
        if Command::new("git").arg("--version").output().is_err() {
            eprintln!("skipped: no git on this machine");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let main = tmp.path().join("main");
        std::fs::create_dir(&main).unwrap();
        git(&main, &["init", "-q", "-b", "main"]);
        std::fs::write(main.join("f"), "x").unwrap();
        git(&main, &["add", "f"]);
        git(&main, &["commit", "-q", "-m", "one"]);
        let wt = tmp.path().join("wt");
        git(
            &main,
            &["worktree", "add", "-q", "-b", "side", wt.to_str().unwrap()],
        );
        assert!(
            wt.join(".git").is_file(),
            "a linked worktree's .git is a file"
        );
        for checkout in [&main, &wt] {
            let paths = watched(checkout);
            let names: Vec<String> = paths
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            assert!(
                names.contains(&"HEAD".into()) && names.contains(&"heads".into()),
                "{}: {paths:?}",
                checkout.display()
            );
            assert!(paths.iter().all(|p| p.exists()), "{paths:?}");
        }
        // The worktree's HEAD is its own, not the main checkout's.
        let head = |c: &Path| watched(c).into_iter().find(|p| p.ends_with("HEAD"));
        assert_ne!(head(&main), head(&wt));
    }
}
