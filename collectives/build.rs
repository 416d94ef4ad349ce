//! Compiles the Gloo C++ shim when the `gloo` feature is on; nothing otherwise.

fn main() {
    #[cfg(feature = "gloo")]
    gloo();
}

/// Builds `src/backends/gloo_shim.cc` with the cxx bridge in `src/backends/gloo.rs`
/// and links Debian's libgloo (which itself needs pthreads).
#[cfg(feature = "gloo")]
fn gloo() {
    cxx_build::bridge("src/backends/gloo.rs")
        .file("src/backends/gloo_shim.cc")
        .std("c++17")
        .flag_if_supported("-Wno-unused-parameter")
        .compile("ringside_gloo_shim");
    println!("cargo:rerun-if-changed=src/backends/gloo.rs");
    println!("cargo:rerun-if-changed=src/backends/gloo_shim.cc");
    println!("cargo:rerun-if-changed=src/backends/gloo_shim.h");
    println!("cargo:rustc-link-lib=gloo");
    println!("cargo:rustc-link-lib=pthread");
}
