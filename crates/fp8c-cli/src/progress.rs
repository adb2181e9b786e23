//! What `fp8c train` shows while it runs: the progress bar, an observer of the library's
//! training loop (it also prints the steps whose update was skipped), and the flag SIGINT and
//! SIGTERM raise so that the loop finishes its step, checkpoints and stops.

use anyhow::{Context, Result};
use fp8c_session::train::{Observer, StepReport};
use std::path::Path;

/// A flag SIGINT and SIGTERM set: the training loop finishes its step, checkpoints and stops.
pub fn stop_flag() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&flag))
            .context("cannot watch for SIGINT/SIGTERM")?;
    }
    Ok(flag)
}

/// The progress bar over a run's steps (hidden with `--quiet`).
pub struct Bar(indicatif::ProgressBar);

impl Bar {
    /// A bar over `steps` steps, starting at `start_step`.
    pub fn new(quiet: bool, steps: u64, start_step: u64) -> Bar {
        if quiet {
            return Bar(indicatif::ProgressBar::hidden());
        }
        let b = indicatif::ProgressBar::new(steps);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} step {pos}/{len}  {msg}  {per_sec}  eta {eta}",
            )
            .expect("a valid template"),
        );
        b.set_position(start_step);
        Bar(b)
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

impl Observer for Bar {
    fn step(&mut self, r: &StepReport) -> fp8c_session::Result<()> {
        if !r.applied {
            self.0.suspend(|| {
                eprintln!(
                    "  step {}: non-finite loss or gradient, update skipped",
                    r.step
                )
            });
        }
        self.0.set_message(format!("loss {:.4}", r.loss));
        self.0.inc(1);
        Ok(())
    }

    fn checkpoint(&mut self, _dir: &Path, _step: u64) {}
}
