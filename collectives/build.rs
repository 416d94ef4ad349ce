//! Compiles the Gloo C++ shim when the `gloo` feature is on; nothing otherwise.

fn main() {
    #[cfg(feature = "gloo")]
    gloo();
}

/// Builds `src/backends/gloo/shim.cc` with the cxx bridge in `src/backends/gloo/mod.rs`
/// and links Debian's libgloo (which itself needs pthreads).
#[cfg(feature = "gloo")]
fn gloo() {
    cxx_build::bridge("src/backends/gloo/mod.rs")
        .file("src/backends/gloo/shim.cc")
        .std("c++17")
        .flag_if_supported("-Wno-unused-parameter")
        .compile("ringside_gloo_shim");
    println!("cargo:rerun-if-changed=src/backends/gloo/mod.rs");
    println!("cargo:rerun-if-changed=src/backends/gloo/shim.cc");
    println!("cargo:rerun-if-changed=src/backends/gloo/shim.h");
    println!("cargo:rustc-link-lib=gloo");
    println!("cargo:rustc-link-lib=pthread");
}
