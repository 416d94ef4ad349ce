//! Running cargo from xtask: the suite's steps and the labs' checks both start
//! it, with the toolchain that started us.

use std::path::Path;
use std::process::Command;

/// `cargo` as the toolchain running us ($CARGO), in the repository root.
pub fn cargo(root: &Path) -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root);
    cmd
}
