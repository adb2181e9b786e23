//! Writing files so that a reader never sees half of one: a temporary file in the same folder,
//! then a rename (checkpoints, trained models).

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The temporary name [`write_atomic`] writes to: `path` with `.tmp` added to its extension.
fn temp_path(path: &Path) -> PathBuf {
    path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ))
}

/// Calls `write` on a temporary file next to `path`, then renames it into place: a process
/// killed at any moment leaves either the old file or the new one.
pub fn write_atomic(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = temp_path(path);
    write(&tmp)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        Error::io(
            format_args!("{}: cannot move into place", path.display()),
            e,
        )
    })
}

/// Writes `bytes` to `path` atomically (see [`write_atomic`]).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |p| {
        std::fs::write(p, bytes)
            .map_err(|e| Error::io(format_args!("{}: cannot write", p.display()), e))
    })
}
