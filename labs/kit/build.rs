//! Records the git commit and compiler for the results manifest (see
//! `measure::build_script`), and links libtorch with the `torch` feature.

fn main() -> Result<(), torch_link::Error> {
    measure::build_script::emit();
    // With the `torch` feature the kit's own test binaries link libtorch too.
    if std::env::var_os("CARGO_FEATURE_TORCH").is_some() {
        torch_link::emit()?;
    }
    Ok(())
}
