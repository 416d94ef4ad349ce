//! Records the git commit and compiler for the results manifest (see
//! `measure::build_script`).

fn main() {
    measure::build_script::emit();
}
