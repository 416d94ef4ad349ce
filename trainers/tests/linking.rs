//! How the test binaries are linked: what torch-link's build.rs promises, checked on
//! the real ELF file with `readelf -d` (binutils, part of build-essential).

use std::process::Command;

fn dynamic_section() -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&exe)
        .output()
        .expect("readelf (binutils) must be installed: run `cargo xtask setup`");
    assert!(
        out.status.success(),
        "readelf -d {}: {:?}",
        exe.display(),
        out
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Binaries started directly (by mpirun, say) found no libtorch: no rpath.
#[test]
fn test_binary_has_rpath_to_torch_lib() {
    let dynamic = dynamic_section();
    let lib = trainers::TORCH_LIB_DIR;
    let found = dynamic
        .lines()
        .filter(|l| l.contains("(RUNPATH)") || l.contains("(RPATH)"))
        .any(|l| l.split(['[', ']', ':']).any(|p| p == lib));
    assert!(found, "no RUNPATH/RPATH entry equal to {lib}:\n{dynamic}");
}

/// rustc's --as-needed dropped libtorch_cuda.so, so CUDA was "not available" on GPUs.
#[test]
fn libtorch_cuda_is_needed_despite_as_needed() {
    let cuda_lib = std::path::Path::new(trainers::TORCH_LIB_DIR).join("libtorch_cuda.so");
    let dynamic = dynamic_section();
    let needed = dynamic.contains("[libtorch_cuda.so]");
    if cuda_lib.exists() {
        assert!(
            needed,
            "{} exists but is not NEEDED:\n{dynamic}",
            cuda_lib.display()
        );
    } else {
        // A CPU-only torch has nothing to keep; linking it would fail, not pass.
        assert!(
            !needed,
            "NEEDED libtorch_cuda.so but {} is missing",
            cuda_lib.display()
        );
    }
}
