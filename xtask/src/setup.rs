//! `cargo xtask setup`: Debian packages, the per-user torch install, the `.ringside/` links.
//!
//! Every part checks before it acts, so a second run only reads a few files (well
//! under a second). Torch is installed into a temporary folder that is renamed into
//! place once it has been verified, so an interrupted install is redone, never trusted.

use crate::ui;
use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use torch_link::TORCH_VERSION;

/// Debian packages the workspace builds or runs against, with why.
pub const DEBIAN_PACKAGES: &[(&str, &str)] = &[
    (
        "build-essential",
        "C/C++ compiler: torch-sys, the Gloo shim; readelf",
    ),
    ("pkg-config", "finding system libraries"),
    ("libclang-dev", "bindgen, for the MPI bindings"),
    ("libopenmpi-dev", "the MPI backend"),
    ("openmpi-bin", "mpirun"),
    ("libgloo-dev", "the Gloo backend"),
    ("dataset-fashion-mnist", "training data for the trainers"),
    ("iproute2", "ip and tc: lab 8's simulated hosts"),
    (
        "python3-venv",
        "the per-user torch install is a Python venv",
    ),
    (
        "fonts-dejavu-core",
        "a font for the pages Chromium renders in the tests (the charts carry their own)",
    ),
    (
        "chromium",
        "the test suite checks the HTML report renders in a real browser",
    ),
];

/// The PyPI requirements of the torch install (torch pinned to what tch expects).
fn pip_requirements() -> [String; 2] {
    [format!("torch=={TORCH_VERSION}"), "numpy".to_owned()]
}

/// Written into the venv after it passed [`verify`]; its presence is the fast path.
const STAMP: &str = ".ringside-installed";

/// Where `.ringside/` lives inside the clone (ignored by git).
const LINK_DIR: &str = ".ringside";

/// Runs the whole set-up.
pub fn run(root: &Path) -> Result<()> {
    let start = Instant::now();
    let debs = ensure_debian_packages(root)?;
    let torch = ensure_torch(root)?;
    let links = ensure_links(root, &torch)?;
    let mut done = vec![debs];
    done.push(format!(
        "torch {} at {}",
        torch.version,
        home_relative(&torch.venv)
    ));
    done.push(links);
    ui::say(&format!(
        "setup ok in {}: {}",
        ui::fmt_duration(start.elapsed()),
        done.join("; ")
    ));
    Ok(())
}

// ---------------------------------------------------------------- Debian packages

/// Parses `dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n'` output into the
/// installed package names. "ii" = wanted install, currently installed.
fn installed_from_dpkg(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter_map(|l| {
            let (name, status) = l.split_once(' ')?;
            status
                .starts_with("ii")
                .then_some(name.split(':').next().unwrap_or(name))
        })
        .collect()
}

fn missing_debian_packages() -> Result<Option<Vec<&'static str>>> {
    let names: Vec<&str> = DEBIAN_PACKAGES.iter().map(|(n, _)| *n).collect();
    let out = match Command::new("dpkg-query")
        .args(["-W", "-f", "${Package} ${db:Status-Abbrev}\n"])
        .args(&names)
        .output()
    {
        Ok(out) => out,
        // No dpkg: not Debian. Say what is needed and let the build tell the rest.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("running dpkg-query"),
    };
    // dpkg-query exits 1 when some package is unknown; stdout still lists the rest.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let installed = installed_from_dpkg(&stdout);
    Ok(Some(
        names
            .into_iter()
            .filter(|n| !installed.contains(n))
            .collect(),
    ))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// True when apt has no package lists yet (a fresh container/VM): `install` would fail.
fn apt_lists_empty() -> bool {
    fs::read_dir("/var/lib/apt/lists")
        .map(|entries| {
            !entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with("_Packages"))
        })
        .unwrap_or(true)
}

fn ensure_debian_packages(root: &Path) -> Result<String> {
    let missing = match missing_debian_packages()? {
        Some(m) => m,
        None => {
            let names: Vec<&str> = DEBIAN_PACKAGES.iter().map(|(n, _)| *n).collect();
            ui::say(&format!(
                "no dpkg-query here (not Debian?): make sure the equivalents of these are \
                 installed: {}",
                names.join(" ")
            ));
            return Ok("Debian packages not checked (no dpkg)".to_owned());
        }
    };
    if missing.is_empty() {
        return Ok(format!("{} Debian packages present", DEBIAN_PACKAGES.len()));
    }
    for name in &missing {
        let why = DEBIAN_PACKAGES
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, w)| *w);
        ui::say(&format!("missing Debian package {name} ({why})"));
    }
    if !is_root() {
        bail!(
            "some Debian packages are missing. Install them with\n\n    sudo apt-get install -y {}\n\n\
             and run the command again.",
            missing.join(" ")
        );
    }
    let log = root.join(LINK_DIR).join("logs/apt.log");
    let apt = |args: &[&str]| {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive").args(args);
        cmd
    };
    let mut updated = false;
    if apt_lists_empty() {
        ui::say("apt-get update (no package lists yet)");
        ui::run_logged(&mut apt(&["update"]), "apt-get update", &log)?;
        updated = true;
    }
    let mut install_args = vec!["install", "-y"];
    install_args.extend(missing.iter().copied());
    ui::say(&format!("apt-get install -y {}", missing.join(" ")));
    let started = Instant::now();
    if let Err(first) = ui::run_logged(&mut apt(&install_args), "apt-get install", &log) {
        if updated {
            return Err(first);
        }
        // Stale lists name package versions the mirror no longer has: refresh, retry once.
        ui::say("apt-get install failed; running apt-get update and trying again");
        ui::run_logged(&mut apt(&["update"]), "apt-get update", &log)?;
        ui::run_logged(&mut apt(&install_args), "apt-get install", &log)?;
    }
    if let Some(still) = missing_debian_packages()?.filter(|m| !m.is_empty()) {
        bail!(
            "apt-get finished but these are still not installed: {}",
            still.join(" ")
        );
    }
    Ok(format!(
        "installed {} Debian package(s) in {}",
        missing.len(),
        ui::fmt_duration(started.elapsed())
    ))
}

// ---------------------------------------------------------------- torch

/// A verified torch install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torch {
    /// The venv folder.
    pub venv: PathBuf,
    /// `<venv>/lib/python3.X/site-packages/torch`.
    pub torch_dir: PathBuf,
    /// The torch version string (e.g. `2.11.0+cu130`).
    pub version: String,
}

/// `${RINGSIDE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/ringside}`, from the given values.
fn cache_root_from(
    ringside_cache: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf> {
    let nonempty = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = nonempty(ringside_cache) {
        return Ok(dir);
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(dir) = nonempty(xdg_cache_home).filter(|d| d.is_absolute()) {
        return Ok(dir.join("ringside"));
    }
    match nonempty(home) {
        Some(home) => Ok(home.join(".cache").join("ringside")),
        None => bail!("neither RINGSIDE_CACHE, XDG_CACHE_HOME nor HOME is set"),
    }
}

/// The per-user cache folder (torch, mdbook), made absolute.
pub fn cache_root() -> Result<PathBuf> {
    let env = |k| std::env::var_os(k);
    let dir = cache_root_from(env("RINGSIDE_CACHE"), env("XDG_CACHE_HOME"), env("HOME"))?;
    // Relative RINGSIDE_CACHE would make the links depend on the current directory.
    Ok(if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()?.join(dir)
    })
}

/// `~/...` for paths under HOME, to keep lines short.
fn home_relative(p: &Path) -> String {
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if !home.as_os_str().is_empty() => match p.strip_prefix(&home) {
            Ok(rest) => format!("~/{}", rest.display()),
            Err(_) => p.display().to_string(),
        },
        _ => p.display().to_string(),
    }
}

/// Facts about an install, as written in the stamp (`key=value` lines).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Facts {
    torch: String,
    numpy: String,
    python: String,
    /// The torch folder relative to the venv, so the venv can be renamed into place.
    torch_dir: PathBuf,
}

impl Facts {
    fn parse(text: &str) -> Option<Facts> {
        let get = |key: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().to_owned())
            })
        };
        Some(Facts {
            torch: get("torch")?,
            numpy: get("numpy")?,
            python: get("python")?,
            torch_dir: PathBuf::from(get("torch_dir")?),
        })
    }

    fn render(&self) -> String {
        format!(
            "# Written by `cargo xtask setup` after verifying this install.\n\
             # Delete it to make the next setup check the install again.\n\
             torch={}\nnumpy={}\npython={}\ntorch_dir={}\n",
            self.torch,
            self.numpy,
            self.python,
            self.torch_dir.display()
        )
    }
}

/// The fast path: a stamp naming a torch folder whose libtorch.so exists.
fn stamped(venv: &Path) -> Option<Torch> {
    let facts = Facts::parse(&fs::read_to_string(venv.join(STAMP)).ok()?)?;
    let torch_dir = venv.join(&facts.torch_dir);
    let ok = facts.torch.starts_with(TORCH_VERSION)
        && torch_dir.join("lib/libtorch.so").is_file()
        && venv.join("bin/python").exists();
    ok.then(|| Torch {
        venv: venv.to_path_buf(),
        torch_dir,
        version: facts.torch,
    })
}

/// Checked by the venv's own python: imports work, the versions and C++ ABI are the
/// ones tch needs, and every file pip recorded is there with its recorded size
/// (an interrupted pip leaves files missing or short).
const VERIFY_PY: &str = r#"
import os, sys, importlib.metadata as md
import torch, numpy
want = sys.argv[1]
bad = []
for d in md.distributions():
    files = d.files
    if files is None:
        bad.append("%s: no RECORD" % d.metadata["Name"])
        continue
    for f in files:
        # '../' entries are console scripts outside site-packages; setup rewrites them.
        if f.size is None or str(f).startswith(".."):
            continue
        p = f.locate()
        try:
            if os.path.getsize(p) != f.size:
                bad.append("size differs: %s" % p)
        except OSError:
            bad.append("missing: %s" % p)
if torch.__version__.split("+")[0] != want:
    bad.append("torch is %s, not %s" % (torch.__version__, want))
if not torch._C._GLIBCXX_USE_CXX11_ABI:
    bad.append("torch was not built with the C++11 ABI that torch-sys assumes")
print("torch=" + torch.__version__)
print("numpy=" + numpy.__version__)
print("python=%d.%d.%d" % sys.version_info[:3])
print("torch_dir=" + os.path.relpath(os.path.dirname(torch.__file__), sys.prefix))
for b in bad[:10]:
    print("bad=" + b)
sys.exit(1 if bad else 0)
"#;

fn verify(venv: &Path) -> Result<Facts> {
    let python = venv.join("bin/python");
    let out = Command::new(&python)
        .args(["-c", VERIFY_PY, TORCH_VERSION])
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let bad: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("bad="))
            .collect();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = if bad.is_empty() {
            stderr.lines().last().unwrap_or("no output").to_owned()
        } else {
            bad.join("; ")
        };
        bail!(
            "torch install at {} failed its check: {why}",
            venv.display()
        );
    }
    let check = Command::new(&python)
        .args(["-m", "pip", "check", "--disable-pip-version-check"])
        .output()
        .context("running pip check")?;
    if !check.status.success() {
        bail!(
            "pip check in {}: {}",
            venv.display(),
            String::from_utf8_lossy(&check.stdout).trim()
        );
    }
    Facts::parse(&stdout).context("the torch check printed no versions")
}

/// An exclusive lock on a file, released when dropped (the fd closes).
pub struct Lock(#[allow(dead_code)] fs::File);

/// Takes the lock at `path`, waiting (and saying so) while another set-up holds it.
pub fn lock(path: &Path) -> Result<Lock> {
    use std::os::fd::AsRawFd;
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let fd = file.as_raw_fd();
    // SAFETY: flock on a valid, owned fd; no memory is shared with the call.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        ui::say(&format!(
            "waiting for another setup (lock {})",
            path.display()
        ));
        // SAFETY: as above; blocking until the other holder closes its fd.
        if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("locking {}", path.display()));
        }
    }
    Ok(Lock(file))
}

/// Bytes free on the file system holding `dir`, via `df` (None if unknown).
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(dir).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kb: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Console scripts and activate files name the folder pip ran in; point them at the
/// folder the venv is renamed to. (Python itself finds its prefix from pyvenv.cfg.)
fn relocate_scripts(bin: &Path, from: &Path, to: &Path) -> Result<usize> {
    let (from, to) = (
        from.as_os_str().as_encoded_bytes(),
        to.as_os_str().as_encoded_bytes(),
    );
    let mut changed = 0;
    for entry in fs::read_dir(bin)? {
        let path = entry?.path();
        let meta = fs::symlink_metadata(&path)?;
        if !meta.is_file() || meta.len() > 1 << 20 {
            continue;
        }
        let data = fs::read(&path)?;
        if !data.windows(from.len()).any(|w| w == from) {
            continue;
        }
        let mut out = Vec::with_capacity(data.len());
        let mut i = 0;
        while i < data.len() {
            if data[i..].starts_with(from) {
                out.extend_from_slice(to);
                i += from.len();
            } else {
                out.push(data[i]);
                i += 1;
            }
        }
        // fs::write truncates the existing file, which keeps its mode (executable).
        fs::write(&path, out)?;
        changed += 1;
    }
    Ok(changed)
}

fn python_for_venv() -> OsString {
    std::env::var_os("RINGSIDE_PYTHON")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "python3".into())
}

fn ensure_torch(root: &Path) -> Result<Torch> {
    let cache = cache_root()?;
    let name = format!("torch-{TORCH_VERSION}");
    let venv = cache.join(&name);
    if let Some(t) = stamped(&venv) {
        return Ok(t);
    }
    fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let _lock = lock(&cache.join(format!(".{name}.lock")))?;
    // Another setup may have finished while we waited for the lock.
    if let Some(t) = stamped(&venv) {
        return Ok(t);
    }
    if venv.exists() {
        // An install made by hand, or a stamp deleted on purpose: check it rather than
        // download 4.6 GB again.
        ui::say(&format!("checking the torch install at {}", venv.display()));
        match ui::with_spinner("checking torch", || verify(&venv)) {
            Ok(facts) => {
                fs::write(venv.join(STAMP), facts.render())?;
                return stamped(&venv).context("stamp written but not readable");
            }
            Err(e) => {
                ui::say(&format!("{e:#}; installing it again"));
                let old = cache.join(format!(".{name}.broken"));
                if old.exists() {
                    fs::remove_dir_all(&old)?;
                }
                fs::rename(&venv, &old)?;
                fs::remove_dir_all(&old)?;
            }
        }
    }
    install_torch(root, &cache, &venv)
}

fn install_torch(root: &Path, cache: &Path, venv: &Path) -> Result<Torch> {
    let partial = cache.join(format!(".torch-{TORCH_VERSION}.partial"));
    if partial.exists() {
        // Left by an interrupted install (we hold the lock, so nobody is using it).
        fs::remove_dir_all(&partial).with_context(|| format!("removing {}", partial.display()))?;
    }
    let need = 8u64 << 30;
    if let Some(free) = free_bytes(cache).filter(|&f| f < need) {
        ui::say(&format!(
            "warning: {} has {:.1} GiB free; the install needs about 5 GiB (plus ~3 GiB \
             of downloads in the temporary folder)",
            cache.display(),
            free as f64 / (1u64 << 30) as f64
        ));
    }
    ui::say(&format!(
        "installing torch {TORCH_VERSION} + numpy from PyPI into {} (once per user: \
         ~3 GB download, ~4.6 GB on disk, a few minutes)",
        venv.display()
    ));
    let log = root.join(LINK_DIR).join("logs/torch-install.log");
    let start = Instant::now();
    let python = python_for_venv();
    ui::run_logged(
        Command::new(&python).arg("-m").arg("venv").arg(&partial),
        "python3 -m venv",
        &log,
    )
    .with_context(|| {
        format!(
            "creating a venv with {} (Debian: apt-get install python3-venv; another \
             interpreter: set RINGSIDE_PYTHON)",
            python.to_string_lossy()
        )
    })?;
    ui::run_logged(
        Command::new(partial.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--no-input",
                "--disable-pip-version-check",
            ])
            // pip's own cache would keep a second copy of the ~3 GB of wheels.
            .arg("--no-cache-dir")
            .args(pip_requirements()),
        "pip install torch",
        &log,
    )
    .context("pip could not install torch (is this Python version supported by this torch?)")?;
    let facts = ui::with_spinner("checking torch", || verify(&partial))?;
    relocate_scripts(&partial.join("bin"), &partial, venv)?;
    // Last write before the rename: only a verified folder ever carries a stamp.
    fs::write(partial.join(STAMP), facts.render())?;
    fs::rename(&partial, venv)
        .with_context(|| format!("renaming {} to {}", partial.display(), venv.display()))?;
    ui::say(&format!(
        "torch {} installed in {}",
        facts.torch,
        ui::fmt_duration(start.elapsed())
    ));
    stamped(venv).context("install finished but its stamp is not readable")
}

// ---------------------------------------------------------------- .ringside links

/// Points `link` at `target`, replacing an older link atomically. Returns whether it
/// changed anything.
fn ensure_link(link: &Path, target: &Path) -> Result<bool> {
    if fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(false);
    }
    if let Ok(meta) = fs::symlink_metadata(link) {
        if !meta.file_type().is_symlink() {
            bail!(
                "{} exists and is not a link; move it away and run setup again",
                link.display()
            );
        }
    }
    let name = link.file_name().context("link path has no file name")?;
    let tmp = link.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    symlink(target, &tmp).with_context(|| format!("creating {}", tmp.display()))?;
    // rename() over an existing link is atomic: a concurrent build sees old or new.
    fs::rename(&tmp, link).with_context(|| format!("creating {}", link.display()))?;
    Ok(true)
}

fn ensure_links(root: &Path, torch: &Torch) -> Result<String> {
    let dir = root.join(LINK_DIR);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut changed = ensure_link(&dir.join("libtorch"), &torch.torch_dir)?;
    // The venv folder itself, not its interpreter: Python finds its venv by
    // looking for pyvenv.cfg above the path it was started by, so a link to
    // bin/python would start a Python without torch.
    changed |= ensure_link(&dir.join("venv"), &torch.venv)?;
    let stale = dir.join("python");
    if fs::symlink_metadata(&stale).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::remove_file(&stale).with_context(|| format!("removing {}", stale.display()))?;
    }
    Ok(if changed {
        format!("linked {LINK_DIR}/libtorch and {LINK_DIR}/venv")
    } else {
        format!("{LINK_DIR}/ links in place")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_output_counts_only_ii() {
        let out = "build-essential ii \nlibgloo-dev rc \nopenmpi-bin:amd64 ii \npkg-config un \n";
        assert_eq!(installed_from_dpkg(out), ["build-essential", "openmpi-bin"]);
    }

    #[test]
    fn cache_root_precedence() {
        let s = |v: &str| Some(OsString::from(v));
        let r = cache_root_from(s("/c"), s("/x"), s("/h")).unwrap();
        assert_eq!(r, Path::new("/c"));
        let r = cache_root_from(None, s("/x"), s("/h")).unwrap();
        assert_eq!(r, Path::new("/x/ringside"));
        // Empty and relative XDG values are ignored, as the XDG spec says.
        let r = cache_root_from(s(""), s("rel"), s("/h")).unwrap();
        assert_eq!(r, Path::new("/h/.cache/ringside"));
        assert!(cache_root_from(None, None, None).is_err());
    }

    fn fake_venv(dir: &Path) -> PathBuf {
        let venv = dir.join("torch-x");
        let torch = venv.join("lib/python3.11/site-packages/torch");
        fs::create_dir_all(torch.join("lib")).unwrap();
        fs::create_dir_all(venv.join("bin")).unwrap();
        fs::write(torch.join("lib/libtorch.so"), b"").unwrap();
        fs::write(venv.join("bin/python"), b"").unwrap();
        venv
    }

    fn facts() -> Facts {
        Facts {
            torch: format!("{TORCH_VERSION}+cu130"),
            numpy: "2.4.6".into(),
            python: "3.11.7".into(),
            torch_dir: "lib/python3.11/site-packages/torch".into(),
        }
    }

    #[test]
    fn stamp_round_trips() {
        assert_eq!(Facts::parse(&facts().render()), Some(facts()));
        assert_eq!(Facts::parse("torch=1\n"), None);
    }

    #[test]
    fn unstamped_install_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let venv = fake_venv(dir.path());
        assert_eq!(stamped(&venv), None);
        fs::write(venv.join(STAMP), facts().render()).unwrap();
        let t = stamped(&venv).unwrap();
        assert_eq!(t.torch_dir, venv.join("lib/python3.11/site-packages/torch"));
        assert!(t.version.starts_with(TORCH_VERSION));
    }

    #[test]
    fn stamp_without_libtorch_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let venv = fake_venv(dir.path());
        fs::write(venv.join(STAMP), facts().render()).unwrap();
        fs::remove_file(venv.join("lib/python3.11/site-packages/torch/lib/libtorch.so")).unwrap();
        assert_eq!(stamped(&venv), None);
    }

    #[test]
    fn stamp_for_another_torch_version_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let venv = fake_venv(dir.path());
        let old = Facts {
            torch: "2.0.1".into(),
            ..facts()
        };
        fs::write(venv.join(STAMP), old.render()).unwrap();
        assert_eq!(stamped(&venv), None);
    }

    #[test]
    fn links_are_created_replaced_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("libtorch");
        assert!(ensure_link(&link, Path::new("/a")).unwrap());
        assert!(!ensure_link(&link, Path::new("/a")).unwrap());
        assert!(ensure_link(&link, Path::new("/b")).unwrap());
        assert_eq!(fs::read_link(&link).unwrap(), Path::new("/b"));
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        assert!(ensure_link(&real, Path::new("/a")).is_err());
    }

    #[test]
    fn scripts_are_relocated_and_stay_executable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        let script = bin.join("torchrun");
        fs::write(&script, "#!/c/.torch.partial/bin/python\nimport x\n").unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(bin.join("other"), "#!/usr/bin/env python\n").unwrap();
        symlink("/nowhere", bin.join("python")).unwrap();
        let n =
            relocate_scripts(&bin, Path::new("/c/.torch.partial"), Path::new("/c/torch")).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            fs::read_to_string(&script).unwrap(),
            "#!/c/torch/bin/python\nimport x\n"
        );
        assert_eq!(
            fs::metadata(&script).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }

    #[test]
    fn lock_is_exclusive_within_the_process_too() {
        // flock locks belong to the open file description: a second open must wait.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let held = lock(&path).unwrap();
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: valid fd owned by `f`.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_ne!(r, 0, "second lock should fail while the first is held");
        drop(held);
        // SAFETY: as above.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(r, 0);
    }
}
