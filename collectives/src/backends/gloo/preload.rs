//! Debian's libgloo ahead of libtorch's bundled Gloo, for binaries that link both.
//!
//! libtorch_cpu.so exports its own build of Gloo, and in a binary that links
//! tch and collectives it is loaded first, so the dynamic linker would bind
//! this backend's shim to it (the shim refuses with a clear error rather than
//! crash). Cargo offers no way to put libgloo first on the link line (link
//! arguments go last; the `-as-needed` modifier is unstable), so such a binary
//! re-executes itself once with `LD_PRELOAD` naming libgloo, which the loader
//! then searches before everything else. Child ranks inherit it. Binaries call
//! it through [`crate::backends::ensure_gloo_first`].

use std::ffi::OsString;
use std::path::Path;

/// Where Debian's libgloo-dev puts the library.
const LIBGLOO: &str = "/usr/lib/libgloo.so.0";

/// Marks the re-executed process, so it never loops.
const MARK: &str = "RINGSIDE_GLOO_PRELOADED";

/// The `LD_PRELOAD` value with libgloo first, or `None` when nothing needs to
/// change (already preloaded, opted out, or no libgloo installed).
pub fn preload_value(current: Option<&str>, marked: bool, libgloo_exists: bool) -> Option<String> {
    if marked || !libgloo_exists {
        return None;
    }
    match current {
        Some(v) if v.split([':', ' ']).any(|p| p.contains("libgloo")) => None,
        Some(v) if !v.is_empty() => Some(format!("{LIBGLOO}:{v}")),
        _ => Some(LIBGLOO.to_owned()),
    }
}

/// Re-executes the current program with libgloo preloaded when it is not yet;
/// returns (doing nothing) when no re-exec is needed or possible. Call it first
/// thing in `main`, before threads or libtorch start.
pub fn ensure_gloo_first() {
    let current = std::env::var("LD_PRELOAD").ok();
    let marked = std::env::var_os(MARK).is_some();
    let Some(value) = preload_value(current.as_deref(), marked, Path::new(LIBGLOO).exists()) else {
        return;
    };
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    use std::os::unix::process::CommandExt;
    // `exec` only returns on failure; then run on without the preload (Gloo
    // will say what is wrong if it is used).
    let err = std::process::Command::new(exe)
        .args(args)
        .env("LD_PRELOAD", value)
        .env(MARK, "1")
        .exec();
    eprintln!("note: could not re-execute with {LIBGLOO} preloaded: {err}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_is_added_once_and_first() {
        assert_eq!(preload_value(None, false, true).as_deref(), Some(LIBGLOO));
        assert_eq!(
            preload_value(Some("/x/libfoo.so"), false, true).as_deref(),
            Some("/usr/lib/libgloo.so.0:/x/libfoo.so")
        );
        assert_eq!(
            preload_value(Some("/usr/lib/libgloo.so.0"), false, true),
            None
        );
        assert_eq!(preload_value(None, true, true), None);
        assert_eq!(preload_value(None, false, false), None);
    }
}
