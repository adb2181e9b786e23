//! The one way fp8c writes a file (IR and its weight sidecar, ONNX, .npz, checkpoints, plots,
//! statistics), so that nothing is lost or overwritten by mistake:
//!
//! - the target is checked before any long work starts ([`Output::check`]): it must be a new
//!   path in an existing folder, or an existing regular file; a symbolic link, a directory, a
//!   device or a FIFO is refused (writing through a link, or renaming over a device, would
//!   replace what the user did not name), and so is a file that is one of the inputs being
//!   read (`compile m.onnx -o m.onnx`); `/dev/null` is accepted as "discard";
//! - the bytes go to a fresh temporary file in the same folder (unique name, private mode),
//!   are flushed and `fsync`ed, and the file is renamed over the target: a process killed at
//!   any moment, or a full disk, leaves the old file or the new one, never half of one.
//!
//! Appending logs and private dump files have their own helpers below.

use crate::error::{Error, Result, bail};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A checked output target (see the module docs).
#[derive(Clone, Debug)]
pub struct Output {
    path: PathBuf,
    discard: bool,
    /// The flag it was given by (`-o`), for messages about later failures.
    what: String,
}

/// What an output target is for, in messages (`-o out.onnx`).
fn named(what: &str, path: &Path) -> String {
    if what.is_empty() {
        path.display().to_string()
    } else {
        format!("{what} {}", path.display())
    }
}

impl Output {
    /// Checks that `path` may be written: see the module docs. `what` names the flag in
    /// messages (`"-o"`, `"--checkpoint"`); `inputs` are the files the command reads.
    pub fn check(what: &str, path: &Path, inputs: &[&Path]) -> Result<Output> {
        let name = named(what, path);
        if path.as_os_str().is_empty() {
            bail!("{what}: the path is empty");
        }
        if path == Path::new("/dev/null") {
            return Ok(Output {
                path: path.to_path_buf(),
                discard: true,
                what: what.to_string(),
            });
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) => {
                let ft = meta.file_type();
                if ft.is_symlink() {
                    bail!(
                        "{name}: is a symbolic link; fp8c does not write through links (give the target's own path)"
                    );
                }
                if ft.is_dir() {
                    bail!("{name}: is a directory, not a file");
                }
                if !ft.is_file() {
                    bail!(
                        "{name}: is not a regular file (a device, FIFO or socket); fp8c writes regular files only"
                    );
                }
                for input in inputs {
                    if same_file(path, input) {
                        bail!(
                            "{name}: is the input {} itself; refusing to overwrite it",
                            input.display()
                        );
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format_args!("{name}: cannot inspect"), e)),
        }
        let dir = parent_dir(path);
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!("{name}: {} is not a directory", dir.display()),
            Err(e) => {
                return Err(Error::io(
                    format_args!("{name}: folder {}", dir.display()),
                    e,
                ));
            }
        }
        Ok(Output {
            path: path.to_path_buf(),
            discard: false,
            what: what.to_string(),
        })
    }

    /// Checks that the target's folder takes a new file now (permissions, a read-only or
    /// full file system): creates and removes a temporary file there. A run calls this for
    /// every output before its long work, so a target it cannot write fails at once.
    pub fn probe(&self) -> Result<()> {
        if self.discard {
            return Ok(());
        }
        let dir = parent_dir(&self.path);
        ordinary_mode(
            tempfile::Builder::new()
                .prefix(".fp8c-probe-")
                .suffix(".tmp"),
        )
        .tempfile_in(&dir)
        .map(drop)
        .map_err(|e| {
            Error::io(
                format_args!(
                    "{}: cannot create a file in {}",
                    named(&self.what, &self.path),
                    dir.display()
                ),
                e,
            )
        })
    }

    /// The flag and path of this target, as messages name it (`-o out.onnx`).
    pub fn name(&self) -> String {
        named(&self.what, &self.path)
    }

    /// The target path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True for `/dev/null`: writes are skipped.
    pub fn is_discard(&self) -> bool {
        self.discard
    }

    /// Writes the file atomically: `write` fills a temporary file in the same folder, which is
    /// flushed, synced and renamed over the target.
    pub fn write(&self, write: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
        if self.discard {
            return write(&mut std::io::sink());
        }
        let name = self.name();
        let dir = parent_dir(&self.path);
        let mut tmp = ordinary_mode(tempfile::Builder::new().prefix(".fp8c-").suffix(".tmp"))
            .tempfile_in(&dir)
            .map_err(|e| {
                Error::io(
                    format_args!("{name}: cannot create a file in {}", dir.display()),
                    e,
                )
            })?;
        {
            let mut w = std::io::BufWriter::new(tmp.as_file_mut());
            write(&mut w)?;
            w.flush()
                .map_err(|e| Error::io(format_args!("{name}: cannot write"), e))?;
        }
        tmp.as_file()
            .sync_all()
            .map_err(|e| Error::io(format_args!("{name}: cannot write"), e))?;
        tmp.persist(&self.path)
            .map_err(|e| Error::io(format_args!("{name}: cannot move into place"), e.error))?;
        Ok(())
    }

    /// Like [`Output::write`], for writers that open a path themselves (a plotting backend):
    /// `write` is given the temporary file's path.
    pub fn write_path(&self, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
        let name = self.name();
        if self.discard {
            return Ok(());
        }
        let dir = parent_dir(&self.path);
        let tmp = ordinary_mode(tempfile::Builder::new().prefix(".fp8c-").suffix(&format!(
            ".tmp.{}",
            self.path.extension().and_then(|e| e.to_str()).unwrap_or("")
        )))
        .tempfile_in(&dir)
        .map_err(|e| {
            Error::io(
                format_args!("{name}: cannot create a file in {}", dir.display()),
                e,
            )
        })?;
        write(tmp.path())?;
        std::fs::File::open(tmp.path())
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(format_args!("{name}: cannot write"), e))?;
        tmp.persist(&self.path)
            .map_err(|e| Error::io(format_args!("{name}: cannot move into place"), e.error))?;
        Ok(())
    }

    /// Writes `bytes` atomically.
    pub fn write_bytes(&self, bytes: &[u8]) -> Result<()> {
        self.write(|w| {
            w.write_all(bytes)
                .map_err(|e| Error::io(format_args!("{}: cannot write", self.name()), e))
        })
    }
}

/// Checks that an input `path` (`what` names its flag, `--data`; empty for none) is an
/// existing regular file, with a message saying what it is otherwise: "no such file", "is a
/// directory", "is not a regular file (a FIFO, device or socket)" (reading a FIFO would block,
/// a device would be read forever).
pub fn check_input_file(what: &str, path: &Path) -> Result<()> {
    let name = named(what, path);
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("{name}: no such file"),
        Err(e) => Err(Error::io(format_args!("{name}: cannot read"), e)),
        Ok(m) if m.is_dir() => bail!("{name}: is a directory, not a file"),
        Ok(m) if !m.is_file() => {
            bail!("{name}: is not a regular file (a FIFO, device or socket)")
        }
        Ok(_) => Ok(()),
    }
}

/// The folder a path lives in (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// True if `a` and `b` name the same existing file (same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Checks and writes `path` in one call (for outputs produced at once, right after the
/// check): see [`Output`].
pub fn write_atomic(path: &Path, write: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    Output::check("", path, &[])?.write(write)
}

/// Writes `bytes` to `path` atomically (see [`Output`]).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    Output::check("", path, &[])?.write_bytes(bytes)
}

/// Opens a log for appending rows (`--log`): the same checks as [`Output::check`], then a
/// file opened without following links; each row should be flushed as written.
pub fn open_append(what: &str, path: &Path, truncate: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let out = Output::check(what, path, &[])?;
    if out.discard {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io(format_args!("{}: cannot open", named(what, path)), e));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(!truncate)
        .truncate(truncate)
        .custom_flags(libc_o_nofollow())
        .open(path)
        .map_err(|e| Error::io(format_args!("{}: cannot open", named(what, path)), e))
}

/// `O_NOFOLLOW` (Linux and the BSDs agree on opening a final symlink failing with ELOOP).
fn libc_o_nofollow() -> i32 {
    #[cfg(target_os = "linux")]
    {
        0o400000
    }
    #[cfg(not(target_os = "linux"))]
    {
        0x0100
    }
}

/// Writes `text` to a fresh private temporary file named `fp8c-{stem}-XXXX{suffix}` and
/// returns its path (kept after the process ends): where failure dumps go.
pub fn private_dump(stem: &str, suffix: &str, text: &str) -> Result<PathBuf> {
    let mut f = tempfile::Builder::new()
        .prefix(&format!("fp8c-{stem}-"))
        .suffix(suffix)
        .tempfile()
        .map_err(|e| Error::io("cannot create a temporary file", e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::io("cannot write a temporary file", e))?;
    let (_, path) = f
        .keep()
        .map_err(|e| Error::io("cannot keep a temporary file", e.error))?;
    Ok(path)
}

/// Gives the temporary file the mode of a file a user asked for (`-o`, `--plot`, a
/// checkpoint): read-write for all less the umask, as a shell redirection or `cp` creates it
/// (a temporary file is otherwise private to its owner, and the rename would keep that).
fn ordinary_mode<'x, 'a, 'b>(
    b: &'x mut tempfile::Builder<'a, 'b>,
) -> &'x mut tempfile::Builder<'a, 'b> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o666))
    }
    #[cfg(not(unix))]
    {
        b
    }
}

#[cfg(test)]
mod tests {
    #[cfg(unix)]
    #[test]
    fn written_files_get_an_ordinary_mode_not_the_temporary_files() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.bin");
        super::Output::check("-o", &p, &[])
            .unwrap()
            .write_bytes(b"x")
            .unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // The mode File::create gives (0o666 less the umask), not the temporary file's 0o600.
        let reference = d.path().join("ref.bin");
        std::fs::File::create(&reference).unwrap();
        assert_eq!(format!("{:o}", mode(&p)), format!("{:o}", mode(&reference)));
    }

    use super::*;

    #[test]
    fn links_devices_directories_and_inputs_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("a.txt");
        std::fs::write(&file, "old").unwrap();
        let link = d.path().join("link.txt");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = Output::check("-o", &link, &[]).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(
            Output::check("-o", d.path(), &[])
                .unwrap_err()
                .to_string()
                .contains("is a directory")
        );
        assert!(
            Output::check("-o", Path::new("/dev/zero"), &[])
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        let e = Output::check("-o", &file, &[&file])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is the input"), "{e}");
        assert!(
            Output::check("-o", Path::new("/dev/null"), &[])
                .unwrap()
                .is_discard()
        );
        assert!(Output::check("-o", &d.path().join("no/such/dir/x"), &[]).is_err());
    }

    /// Issue #46 case 10: `--data`/`--text` naming a directory or a FIFO said "no such file".
    #[test]
    fn a_directory_or_fifo_given_as_input_says_what_it_is() {
        let d = tempfile::tempdir().unwrap();
        let e = check_input_file("--data", d.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
        let fifo = d.path().join("f");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = check_input_file("--text", &fifo).unwrap_err().to_string();
        assert!(
            e.contains("--text") && e.contains("is not a regular file"),
            "{e}"
        );
        let e = check_input_file("", &d.path().join("none")).unwrap_err();
        assert!(e.to_string().ends_with("none: no such file"), "{e}");
    }

    #[test]
    fn writes_replace_the_file_whole_and_failures_leave_it() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("a.txt");
        std::fs::write(&file, "old").unwrap();
        let out = Output::check("-o", &file, &[]).unwrap();
        out.write_bytes(b"new").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        let failed = out.write(|w| {
            w.write_all(b"half").unwrap();
            Err(Error::invalid("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
