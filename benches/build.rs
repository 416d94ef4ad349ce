//! Compiles the peer programs in `peers/` (OpenMPI in C, Gloo in C++) into
//! OUT_DIR and exports their paths to the runner:
//!
//! - `RINGSIDE_MPI_PEER` / `RINGSIDE_GLOO_PEER`: path of the executable, or
//!   empty when it could not be built;
//! - `RINGSIDE_MPI_PEER_WHY` / `RINGSIDE_GLOO_PEER_WHY`: why not (empty when
//!   built).
//!
//! A missing compiler or library must not break `cargo build` for everyone
//! else in the workspace, so failures become a `cargo:warning` and the runner
//! later says "peer unavailable: <why>".
//!
//! Compilers can be overridden with `MPICC` and `CXX`; extra flags for the
//! Gloo build (e.g. `-I/opt/gloo/include -L/opt/gloo/lib`) with
//! `RINGSIDE_GLOO_FLAGS`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for f in [
        "build.rs",
        "peers/mpi_allreduce.c",
        "peers/gloo_allreduce.cc",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    for v in ["MPICC", "CXX", "RINGSIDE_GLOO_FLAGS"] {
        println!("cargo:rerun-if-env-changed={v}");
    }

    let Some(out_dir) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        // Cargo always sets OUT_DIR; if not, say so instead of failing.
        export("MPI", Err("OUT_DIR not set by cargo".into()));
        export("GLOO", Err("OUT_DIR not set by cargo".into()));
        return;
    };

    let mpicc = env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let mpi_exe = out_dir.join("mpi_allreduce");
    let mpi = compile(
        &mpicc,
        &[
            "-O2".into(),
            "-std=c11".into(),
            "-D_POSIX_C_SOURCE=200809L".into(),
            "-o".into(),
            mpi_exe.display().to_string(),
            "peers/mpi_allreduce.c".into(),
        ],
        &mpi_exe,
    );
    export("MPI", mpi);

    let cxx = env::var("CXX").unwrap_or_else(|_| "g++".into());
    let gloo_exe = out_dir.join("gloo_allreduce");
    // -O3, as cargo's release profile compiles the Gloo shim: the peer's
    // reduction (gloo::sum, a header template) must get the same compiler
    // treatment as the backend's, or the comparison measures the optimiser.
    let mut args: Vec<String> = vec![
        "-O3".into(),
        "-std=c++17".into(),
        "-o".into(),
        gloo_exe.display().to_string(),
        "peers/gloo_allreduce.cc".into(),
    ];
    if let Ok(extra) = env::var("RINGSIDE_GLOO_FLAGS") {
        args.extend(extra.split_whitespace().map(String::from));
    }
    // Libraries after the source: the linker resolves left to right.
    args.extend(["-lgloo".into(), "-pthread".into()]);
    export("GLOO", compile(&cxx, &args, &gloo_exe));
}

/// Runs one compiler command; Ok(path) if it produced `exe`.
fn compile(compiler: &str, args: &[String], exe: &Path) -> Result<PathBuf, String> {
    let output = Command::new(compiler)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `{compiler}`: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // The first error line is usually the useful one ("gloo/...h: No such
        // file", "ld: cannot find -lgloo"); collect2's summary line is not.
        let first = stderr
            .lines()
            .find(|l| {
                (l.contains("error") || l.contains("cannot find")) && !l.starts_with("collect2")
            })
            .or_else(|| stderr.lines().next())
            .unwrap_or("no compiler output");
        return Err(format!("`{compiler}` failed ({}): {first}", output.status));
    }
    if !exe.is_file() {
        return Err(format!(
            "`{compiler}` succeeded but wrote no {}",
            exe.display()
        ));
    }
    Ok(exe.to_path_buf())
}

/// Exports `RINGSIDE_<NAME>_PEER` and `RINGSIDE_<NAME>_PEER_WHY`.
fn export(name: &str, built: Result<PathBuf, String>) {
    match built {
        Ok(path) => {
            println!("cargo:rustc-env=RINGSIDE_{name}_PEER={}", path.display());
            println!("cargo:rustc-env=RINGSIDE_{name}_PEER_WHY=");
        }
        Err(why) => {
            // rustc-env values are single lines; keep the reason short too.
            let mut why: String = why.replace(['\n', '\r'], " ");
            if why.len() > 300 {
                let mut cut = 300;
                while !why.is_char_boundary(cut) {
                    cut -= 1;
                }
                why.truncate(cut);
            }
            println!(
                "cargo:warning={} peer not built: {why}",
                name.to_lowercase()
            );
            println!("cargo:rustc-env=RINGSIDE_{name}_PEER=");
            println!("cargo:rustc-env=RINGSIDE_{name}_PEER_WHY={why}");
        }
    }
}
