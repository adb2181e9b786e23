//! What `fp8c train` shows while it runs: the progress bar and the `--log` CSV (one row per
//! step; a resumed run keeps the rows before its first step and continues the file).

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Rewrites the log keeping only rows before `step` (a resumed run continues it).
fn truncate_log(path: &Path, step: u64) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let mut keep = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let s = line.split(',').next().and_then(|s| s.parse::<u64>().ok());
        if i == 0 || s.is_some_and(|s| s < step) {
            keep.push(line);
        }
    }
    std::fs::write(path, keep.join("\n") + "\n")
        .with_context(|| format!("--log {}: cannot write", path.display()))
}

/// Opens the `--log` CSV: fresh (with its header) or, when resuming, continued after the
/// rows before `start_step`.
pub fn open_log(path: &Path, start_step: u64) -> Result<std::io::BufWriter<std::fs::File>> {
    if start_step > 0 {
        truncate_log(path, start_step)?;
    }
    let fresh = start_step == 0 || !path.exists();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(!fresh)
        .truncate(fresh)
        .open(path)
        .with_context(|| format!("--log {}: cannot open", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    if fresh {
        writeln!(w, "step,loss,lr,applied,accuracy,elapsed_s")?;
    }
    Ok(w)
}

/// The progress bar over `steps` steps, starting at `start_step` (hidden when `quiet`).
pub fn bar(quiet: bool, steps: u64, start_step: u64) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(steps);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} step {pos}/{len}  {msg}  {per_sec}  eta {eta}",
        )
        .expect("a valid template"),
    );
    b.set_position(start_step);
    b
}
