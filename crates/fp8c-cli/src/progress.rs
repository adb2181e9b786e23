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
/// rows before `start_step`. Rows are written whole, one line at a time (a killed run leaves
/// no torn row); the file is checked like every output (never a link or a device).
pub fn open_log(path: &Path, start_step: u64) -> Result<std::io::LineWriter<std::fs::File>> {
    if start_step > 0 {
        truncate_log(path, start_step)?;
    }
    let fresh = start_step == 0 || !path.exists();
    let f = fp8c_session::files::open_append("--log", path, fresh)?;
    let mut w = std::io::LineWriter::new(f);
    if fresh {
        writeln!(w, "step,loss,lr,applied,accuracy,elapsed_s,grad_norm")?;
    }
    Ok(w)
}

/// A flag SIGINT and SIGTERM set: the training loop finishes its step, checkpoints and stops.
pub fn stop_flag() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&flag))
            .context("cannot watch for SIGINT/SIGTERM")?;
    }
    Ok(flag)
}

/// Where an interrupted run without `--checkpoint` saves its state: a new folder
/// `fp8c-interrupted-<seconds since the epoch>` in the current directory.
pub fn interrupted_dir() -> Result<std::path::PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(std::path::PathBuf::from(format!("fp8c-interrupted-{secs}")))
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
