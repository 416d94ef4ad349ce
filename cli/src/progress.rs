//! The progress bar every measuring subcommand shows on the lead rank: one
//! place for "only rank 0 draws, and never over machine-readable output".

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `len` steps, or a spinner where the count is not known up front;
/// hidden unless `show` (the other ranks, or `--json`).
pub fn bar(show: bool, len: Option<u64>, template: &str) -> anyhow::Result<ProgressBar> {
    let bar = match (show, len) {
        (false, _) => ProgressBar::hidden(),
        (true, Some(n)) => ProgressBar::new(n),
        (true, None) => ProgressBar::new_spinner(),
    };
    bar.set_style(ProgressStyle::with_template(template)?);
    Ok(bar)
}
