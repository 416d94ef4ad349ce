//! Links this package's binaries and tests to libtorch (rpath, CUDA kept): see
//! torch-link; and compiles the autograd shim (src/autograd/shim.cc) against the
//! same libtorch's headers, with the C++ ABI torch-sys compiles its own wrapper with.
//!
//! The shim is one C++ file with a C interface, so calling the C++ compiler and
//! `ar` directly is all it takes; no bridge crate is needed. (Building
//! `-p trainers` alone recompiles torch-sys's libtorch wrapper once per target
//! folder whatever this script does: cargo unifies build-dependency features
//! over the packages selected, so torch-sys's build script gets another hash
//! than in a workspace build.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let torch = torch_link::emit()?;
    // torch-sys's default for a LIBTORCH install; the torch 2.11 wheels use the
    // new ABI, and a mismatch fails only at link time (std::string symbols).
    println!("cargo::rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo::rerun-if-env-changed=CXX");
    println!("cargo::rerun-if-changed=src/autograd/shim.cc");
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let include = torch.root.join("include");
    let obj = out.join("shim.o");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
    run(Command::new(&cxx)
        .args(["-c", "-fPIC", "-O2", "-std=c++17", "-Wno-unused-parameter"])
        .arg(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .arg("-DGLOG_USE_GLOG_EXPORT")
        .arg("-I")
        .arg(&include)
        .arg("-I")
        .arg(include.join("torch/csrc/api/include"))
        .arg("src/autograd/shim.cc")
        .arg("-o")
        .arg(&obj))?;
    let lib = out.join("libringside_autograd_shim.a");
    let _ = std::fs::remove_file(&lib);
    run(Command::new("ar").arg("crs").arg(&lib).arg(&obj))?;
    println!("cargo::rustc-link-search=native={}", display(&out)?);
    println!("cargo::rustc-link-lib=static=ringside_autograd_shim");
    println!("cargo::rustc-link-lib=dylib=stdc++");
    Ok(())
}

fn run(cmd: &mut Command) -> Result<(), Box<dyn std::error::Error>> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !status.success() {
        return Err(format!("{cmd:?} failed: {status}").into());
    }
    Ok(())
}

fn display(p: &Path) -> Result<&str, Box<dyn std::error::Error>> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()).into())
}
