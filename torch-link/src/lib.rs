//! Links a package that uses `tch` to the libtorch that `cargo xtask setup` installed.
//!
//! `torch-sys` finds libtorch through the `LIBTORCH` variable (set for every cargo
//! command by `.cargo/config.toml`, pointing at the `.ringside/libtorch` link), but the
//! binaries it produces still need two things that only the *final* package can give
//! them, because `cargo::rustc-link-arg` from a dependency's build script does not
//! reach its dependents:
//!
//! * an rpath to the torch `lib/` folder, so a binary started directly (by `mpirun`,
//!   by a launcher, by hand) finds `libtorch_cpu.so` without `LD_LIBRARY_PATH`;
//! * `libtorch_cuda.so` linked with `--no-as-needed`: no Rust code calls into it
//!   directly, so rustc's default `--as-needed` drops it, its static initialisers never
//!   run, and `tch::Cuda::is_available()` is false even on a GPU machine.
//!
//! Use it from the `build.rs` of every package that depends on `tch`:
//!
//! ```no_run
//! fn main() -> Result<(), torch_link::Error> {
//!     torch_link::emit().map(drop)
//! }
//! ```
//!
//! and add `torch-link.workspace = true` under `[build-dependencies]`.
#![deny(missing_docs)]

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// The PyTorch release the workspace's `tch` version is built against.
///
/// `cargo xtask setup` installs exactly this version; change both together.
pub const TORCH_VERSION: &str = "2.11.0";

/// Environment variable (set by `.cargo/config.toml`) naming the torch folder.
pub const LIBTORCH_VAR: &str = "LIBTORCH";

/// Environment variable this crate sets for the package's own code: the absolute
/// torch `lib/` folder (read it with `env!("RINGSIDE_TORCH_LIB")`).
pub const TORCH_LIB_ENV: &str = "RINGSIDE_TORCH_LIB";

/// Environment variable this crate sets for the package's own code: the torch
/// version string from `torch/version.py` (e.g. `2.11.0+cu130`), or `unknown`.
pub const TORCH_VERSION_ENV: &str = "RINGSIDE_TORCH_VERSION";

const SETUP_HINT: &str = "run `cargo xtask setup` first (it installs torch once per user \
and links it at .ringside/libtorch, where .cargo/config.toml points LIBTORCH)";

/// Why libtorch could not be linked.
#[derive(thiserror::Error)]
pub enum Error {
    /// `LIBTORCH` is not set at all.
    #[error("LIBTORCH is not set: {SETUP_HINT}")]
    NotSet,
    /// `LIBTORCH` names a path that does not resolve (e.g. a dangling link).
    #[error("LIBTORCH is {}, which cannot be resolved ({source}): {SETUP_HINT}", path.display())]
    Missing {
        /// The path as given.
        path: PathBuf,
        /// Why resolving it failed.
        source: io::Error,
    },
    /// The folder exists but holds no `lib/libtorch.so`.
    #[error(
        "{} has no libtorch.so: LIBTORCH must name the `torch` folder of a PyTorch \
         {TORCH_VERSION} install; {SETUP_HINT}",
        lib_dir.display()
    )]
    NoLibrary {
        /// The `lib/` folder that was searched.
        lib_dir: PathBuf,
    },
    /// The resolved path cannot be written into a `-Wl,` linker argument.
    #[error("the libtorch path {} cannot be passed to the linker: {why}", path.display())]
    UnusablePath {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
}

// A build script's `main` returning `Err` prints the error with `Debug`; showing the
// human sentence there (instead of a struct dump) is the whole point of the message.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A resolved libtorch install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Libtorch {
    /// `LIBTORCH` as given (usually the `.ringside/libtorch` link).
    pub given: PathBuf,
    /// The torch folder with every link resolved, so binaries do not depend on the clone.
    pub root: PathBuf,
    /// `root/lib`, the folder holding `libtorch.so`.
    pub lib_dir: PathBuf,
    /// Whether `libtorch_cuda.so` is present (a CUDA build of torch).
    pub cuda: bool,
    /// The version from `torch/version.py`, when it could be read.
    pub version: Option<String>,
}

/// Locates libtorch from `LIBTORCH` and prints the cargo directives for it.
///
/// Call it from `build.rs`. Returns what it found, for build scripts that want more.
pub fn emit() -> Result<Libtorch, Error> {
    // Printed before any failure so that setting LIBTORCH later reruns the script.
    println!("cargo::rerun-if-env-changed={LIBTORCH_VAR}");
    let torch = locate(std::env::var_os(LIBTORCH_VAR))?;
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    for line in directives(&torch, &target_os)? {
        println!("{line}");
    }
    Ok(torch)
}

/// Resolves the value of `LIBTORCH` (relative paths are taken from the current
/// directory, as torch-sys does) into a [`Libtorch`].
pub fn locate(libtorch: Option<OsString>) -> Result<Libtorch, Error> {
    let given = match libtorch {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => return Err(Error::NotSet),
    };
    let root = given.canonicalize().map_err(|source| Error::Missing {
        path: given.clone(),
        source,
    })?;
    let lib_dir = root.join("lib");
    if !lib_dir.join("libtorch.so").is_file() && !lib_dir.join("libtorch.dylib").is_file() {
        return Err(Error::NoLibrary { lib_dir });
    }
    let cuda = lib_dir.join("libtorch_cuda.so").is_file();
    let version = read_version(&root);
    Ok(Libtorch {
        given,
        root,
        lib_dir,
        cuda,
        version,
    })
}

/// Reads `__version__` from `torch/version.py`; `None` when absent (e.g. a libtorch zip).
fn read_version(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("version.py")).ok()?;
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("__version__")?.trim_start();
        let rest = rest.strip_prefix('=')?.trim();
        let quoted = rest.strip_prefix('\'').or_else(|| rest.strip_prefix('"'))?;
        let end = quoted.find(['\'', '"'])?;
        Some(quoted[..end].to_owned())
    })
}

/// The cargo directives for `torch`, for a target OS named as in `CARGO_CFG_TARGET_OS`.
pub fn directives(torch: &Libtorch, target_os: &str) -> Result<Vec<String>, Error> {
    let lib = torch.lib_dir.to_str().ok_or_else(|| Error::UnusablePath {
        path: torch.lib_dir.clone(),
        why: "it is not valid UTF-8",
    })?;
    // `-Wl,` splits its argument at commas, so a comma would silently cut the rpath.
    if lib.contains(',') {
        return Err(Error::UnusablePath {
            path: torch.lib_dir.clone(),
            why: "it contains a comma",
        });
    }
    // (`rerun-if-env-changed=LIBTORCH` is printed by `emit` before it can fail.)
    let mut out = vec![
        // Tracks the link itself: re-pointing .ringside/libtorch reruns the script.
        format!("cargo::rerun-if-changed={}", torch.given.display()),
        format!("cargo::rustc-link-arg=-Wl,-rpath,{lib}"),
        format!("cargo::rustc-env={TORCH_LIB_ENV}={lib}"),
        format!(
            "cargo::rustc-env={TORCH_VERSION_ENV}={}",
            torch.version.as_deref().unwrap_or("unknown")
        ),
    ];
    if torch.cuda && target_os == "linux" {
        for arg in [
            format!("-L{lib}"),
            "-Wl,--no-as-needed".to_owned(),
            "-ltorch_cuda".to_owned(),
            "-lc10_cuda".to_owned(),
            // Restores rustc's default for whatever the linker sees after us.
            "-Wl,--as-needed".to_owned(),
        ] {
            out.push(format!("cargo::rustc-link-arg={arg}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fake torch folder: `lib/libtorch.so`, optionally the CUDA library, a version.py.
    fn fake_torch(dir: &Path, cuda: bool) -> PathBuf {
        let root = dir.join("site-packages").join("torch");
        fs::create_dir_all(root.join("lib")).unwrap();
        fs::write(root.join("lib/libtorch.so"), b"").unwrap();
        if cuda {
            fs::write(root.join("lib/libtorch_cuda.so"), b"").unwrap();
        }
        fs::write(
            root.join("version.py"),
            "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n",
        )
        .unwrap();
        root
    }

    #[test]
    fn unset_or_empty_libtorch_says_run_setup() {
        for value in [None, Some(OsString::new())] {
            let err = locate(value).unwrap_err();
            assert!(matches!(err, Error::NotSet));
            assert!(format!("{err:?}").contains("cargo xtask setup"), "{err:?}");
        }
    }

    #[test]
    fn dangling_link_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("libtorch");
        std::os::unix::fs::symlink(dir.path().join("gone"), &link).unwrap();
        let err = locate(Some(link.into_os_string())).unwrap_err();
        assert!(matches!(err, Error::Missing { .. }), "{err}");
        assert!(err.to_string().contains("cargo xtask setup"));
    }

    #[test]
    fn folder_without_libtorch_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let err = locate(Some(dir.path().into())).unwrap_err();
        assert!(matches!(err, Error::NoLibrary { .. }), "{err}");
    }

    #[test]
    fn link_is_resolved_and_version_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = fake_torch(dir.path(), false);
        let link = dir.path().join("libtorch");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let t = locate(Some(link.clone().into_os_string())).unwrap();
        assert_eq!(t.given, link);
        assert_eq!(t.root, root.canonicalize().unwrap());
        assert_eq!(t.lib_dir, t.root.join("lib"));
        assert!(!t.cuda);
        assert_eq!(t.version.as_deref(), Some("2.11.0+cu130"));
    }

    #[test]
    fn rpath_names_the_resolved_lib_dir_not_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = fake_torch(dir.path(), false);
        let link = dir.path().join("libtorch");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let t = locate(Some(link.into_os_string())).unwrap();
        let lines = directives(&t, "linux").unwrap();
        let lib = root.canonicalize().unwrap().join("lib");
        let rpath = format!("cargo::rustc-link-arg=-Wl,-rpath,{}", lib.display());
        assert!(lines.contains(&rpath), "{lines:#?}");
        assert!(
            !lines.iter().any(|l| l.contains("torch_cuda")),
            "no CUDA library, no CUDA link args: {lines:#?}"
        );
    }

    #[test]
    fn torch_cuda_is_linked_no_as_needed_so_as_needed_cannot_drop_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = fake_torch(dir.path(), true);
        let t = locate(Some(root.into_os_string())).unwrap();
        assert!(t.cuda);
        let args: Vec<String> = directives(&t, "linux")
            .unwrap()
            .into_iter()
            .filter_map(|l| l.strip_prefix("cargo::rustc-link-arg=").map(str::to_owned))
            .collect();
        let pos = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert!(pos("-Wl,--no-as-needed") < pos("-ltorch_cuda"));
        assert!(pos("-ltorch_cuda") < pos("-Wl,--as-needed"));
        assert!(pos("-lc10_cuda") < pos("-Wl,--as-needed"));
        // --no-as-needed is a GNU ld flag: other targets must not get it.
        let mac = directives(&t, "macos").unwrap();
        assert!(!mac.iter().any(|l| l.contains("as-needed")), "{mac:#?}");
    }

    #[test]
    fn comma_in_path_is_refused_not_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let root = fake_torch(&dir.path().join("a,b"), false);
        let t = locate(Some(root.into_os_string())).unwrap();
        let err = directives(&t, "linux").unwrap_err();
        assert!(matches!(err, Error::UnusablePath { .. }), "{err}");
    }

    #[test]
    fn version_py_variants() {
        let dir = tempfile::tempdir().unwrap();
        for (text, want) in [
            ("__version__ = '2.11.0+cpu'\n", Some("2.11.0+cpu")),
            ("__version__=\"2.11.0\"\n", Some("2.11.0")),
            ("version = '1'\n", None),
        ] {
            fs::write(dir.path().join("version.py"), text).unwrap();
            assert_eq!(read_version(dir.path()).as_deref(), want, "{text}");
        }
    }
}
