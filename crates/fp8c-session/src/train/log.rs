//! The training log (`fp8c train --log run.csv`): one CSV row per step,
//! `step,loss,lr,applied,accuracy,elapsed_s,grad_norm`, written whole as each step ends (a
//! killed run leaves no torn row, and a row that fails to write, as on a full disk, is cut
//! off again). A resumed run keeps the rows before its first step and continues the file.
//! [`CsvLog`] is an [`Observer`] of the training loop.

use super::fit::Observer;
use super::trainer::StepReport;
use crate::error::{Error, Result};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

/// The header row.
pub const CSV_HEADER: &str = "step,loss,lr,applied,accuracy,elapsed_s,grad_norm";

/// A CSV log being written.
pub struct CsvLog {
    path: PathBuf,
    out: std::fs::File,
    /// The length of the file's whole rows.
    len: u64,
}

impl CsvLog {
    /// Opens the log at `path`: fresh (with its header) or, when resuming at `start_step`,
    /// continued after the rows before it. The file is checked like every output (never a
    /// link or a device).
    pub fn open(path: &Path, start_step: u64) -> Result<CsvLog> {
        if start_step > 0 {
            truncate_log(path, start_step)?;
        }
        let fresh = start_step == 0 || !path.exists();
        let out = crate::files::open_append("--log", path, fresh)?;
        let len = out
            .metadata()
            .map_err(|e| Error::io(format_args!("--log {}", path.display()), e))?
            .len();
        let mut log = CsvLog {
            path: path.to_path_buf(),
            out,
            len,
        };
        if fresh {
            log.row(CSV_HEADER)?;
        }
        Ok(log)
    }

    /// Appends `line` in one write; one that fails part way is cut off again, so the file
    /// keeps whole rows only.
    fn row(&mut self, line: &str) -> Result<()> {
        let row = format!("{line}\n");
        match self.out.write_all(row.as_bytes()) {
            Ok(()) => {
                self.len += row.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Best effort: the write's own error is the one to report.
                let _ = self
                    .out
                    .set_len(self.len)
                    .and_then(|()| self.out.seek(std::io::SeekFrom::Start(self.len)));
                Err(Error::io(
                    format_args!("--log {}: cannot write", self.path.display()),
                    e,
                ))
            }
        }
    }

    /// Flushes what is buffered.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| {
            Error::io(
                format_args!("--log {}: cannot write", self.path.display()),
                e,
            )
        })
    }
}

impl Observer for CsvLog {
    fn step(&mut self, r: &StepReport) -> Result<()> {
        let line = format!(
            "{},{},{},{},{},{:.3},{}",
            r.step,
            r.loss,
            r.lr,
            u8::from(r.applied),
            r.accuracy.map(|v| v.to_string()).unwrap_or_default(),
            r.elapsed_s,
            r.grad_norm.map(|v| v.to_string()).unwrap_or_default()
        );
        self.row(&line)
    }
}

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
        .map_err(|e| Error::io(format_args!("--log {}: cannot write", path.display()), e))
}
