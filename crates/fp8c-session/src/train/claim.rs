//! Who owns a checkpoint directory: one live process at a time, by an advisory lock
//! (`flock`) on its lock file [`LOCK_FILE`], which names the owner's pid and host. A second
//! `fp8c train --checkpoint DIR` is refused at its start ("in use by pid N") instead of losing
//! one run's state or mixing the two runs' files. The kernel drops the lock of a killed
//! process, so a directory is never locked by nobody; the next owner rewrites the file.
//!
//! Taking a directory ([`claim`]) also makes it safe to write into: it refuses a `meta.json`
//! or state file that is not an fp8c checkpoint's (someone else's files are never
//! overwritten), and it removes the temporary files a killed checkpoint write left
//! (`.fp8c-*.tmp`, see [`crate::files::Output::write`]; only the owner writes there).
//!
//! Within a process a directory is claimed once: further claims share it ([`Claim`] is a
//! handle), and it is released when the last handle goes, or at [`release_all`]. A directory
//! that [`claim`] created and nothing was saved into is removed on release (a run that fails
//! before its first checkpoint leaves nothing behind). The lock file is removed on release
//! too; a claimant that locked a lock file removed meanwhile notices (the path no longer names
//! the file it locked) and tries again.

use crate::error::{Error, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The lock file inside a checkpoint directory.
pub const LOCK_FILE: &str = "fp8c.lock";

/// The `format` a lock file declares.
const LOCK_FORMAT: &str = "fp8c-checkpoint-lock";

/// What a lock file holds (JSON): the owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockInfo {
    /// `fp8c-checkpoint-lock`.
    pub format: String,
    /// The owning process.
    pub pid: u32,
    /// The host it runs on (a directory on a shared file system may be locked from another).
    #[serde(default)]
    pub host: String,
}

impl LockInfo {
    /// This process's entry.
    pub fn current() -> LockInfo {
        LockInfo {
            format: LOCK_FORMAT.into(),
            pid: std::process::id(),
            host: hostname(),
        }
    }

    /// Parses a lock file's text; anything but one of fp8c's lock entries is an error.
    pub fn parse(text: &str) -> Result<LockInfo> {
        let info: LockInfo = serde_json::from_str(text.trim()).map_err(Error::invalid)?;
        if info.format != LOCK_FORMAT {
            bail!("not an fp8c lock file (format \"{}\")", info.format);
        }
        Ok(info)
    }

    /// The text written to the lock file.
    pub fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default() + "\n"
    }

    /// `pid 123 on host h` (the host only when it is not this one).
    fn owner(&self) -> String {
        if self.host.is_empty() || self.host == hostname() {
            format!("pid {}", self.pid)
        } else {
            format!("pid {} on host {}", self.pid, self.host)
        }
    }
}

/// This machine's host name (empty when unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A checkpoint directory this process owns (see the module docs); cloning shares it.
#[derive(Clone, Debug)]
pub struct Claim(Arc<Owned>);

#[derive(Debug)]
struct Owned {
    dir: PathBuf,
    /// The locked lock file (the lock lives as long as it is open).
    _lock: std::fs::File,
    /// [`claim`] created the directory.
    created: bool,
    /// A checkpoint was saved into it.
    saved: AtomicBool,
}

impl Claim {
    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.0.dir
    }

    /// Records that a checkpoint was written (the directory is then kept on release).
    pub fn mark_saved(&self) {
        self.0.saved.store(true, Ordering::Relaxed);
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(LOCK_FILE));
        if self.created && !self.saved.load(Ordering::Relaxed) {
            // Only an empty directory goes (nothing but the lock file was ever in it).
            let _ = std::fs::remove_dir(&self.dir);
        }
        // The lock goes with `self._lock`, closed after this.
    }
}

/// The claims of this process: shared by directory, and those kept until [`release_all`].
struct Registry {
    live: Vec<(PathBuf, Weak<Owned>)>,
    kept: Vec<Claim>,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
        live: Vec::new(),
        kept: Vec::new(),
    });
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Claims `dir` for this process (creating it if needed): locks it,
/// refuses it when another process holds it ("in use by pid N") or when it holds files that
/// are not an fp8c checkpoint's, and removes the temporary files of a killed write. A
/// directory this process holds already is shared. Errors name `--checkpoint DIR`.
pub fn claim(dir: &Path) -> Result<Claim> {
    let d = dir.display();
    let mut reg = registry();
    reg.live.retain(|(_, w)| w.strong_count() > 0);
    let existing = std::fs::canonicalize(dir).ok();
    if let Some(c) = &existing
        && let Some(owned) = reg
            .live
            .iter()
            .find(|(p, _)| p == c)
            .and_then(|(_, w)| w.upgrade())
    {
        return Ok(Claim(owned));
    }
    let created = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => false,
        Ok(_) => bail!("--checkpoint {d}: exists and is not a directory"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::io(
                    format_args!("--checkpoint {d}: cannot create the directory"),
                    e,
                )
            })?;
            true
        }
        Err(e) => {
            return Err(Error::io(
                format_args!("--checkpoint {d}: cannot inspect"),
                e,
            ));
        }
    };
    let owned = Owned {
        dir: dir.to_path_buf(),
        _lock: match lock(dir) {
            Ok(f) => f,
            Err(e) => {
                if created {
                    let _ = std::fs::remove_file(dir.join(LOCK_FILE));
                    let _ = std::fs::remove_dir(dir);
                }
                return Err(e);
            }
        },
        created,
        saved: AtomicBool::new(false),
    };
    // From here on the directory is ours: dropping `owned` on an error releases it.
    refuse_foreign(dir)?;
    remove_leftovers(dir);
    let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let owned = Arc::new(owned);
    reg.live.push((canonical, Arc::downgrade(&owned)));
    Ok(Claim(owned))
}

/// [`claim`], kept until [`release_all`] (or the end of the process).
pub fn claim_for_process(dir: &Path) -> Result<Claim> {
    let c = claim(dir)?;
    registry().kept.push(c.clone());
    Ok(c)
}

/// Releases every claim [`claim_for_process`] kept (a program calls it before it exits: a
/// directory it created and never saved into is removed).
pub fn release_all() {
    let kept = std::mem::take(&mut registry().kept);
    drop(kept);
}

/// Checks, without creating or locking anything, that `dir` could be claimed now: not a file,
/// not held by another process, no foreign files in it, and (when it does not exist yet) a
/// parent folder to create it in.
pub fn check_claimable(dir: &Path) -> Result<()> {
    let d = dir.display();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {
            if let Some(owner) = holder(dir) {
                bail!(
                    "--checkpoint {d}: in use by {} (another fp8c run writes its checkpoints there; wait for it to end or choose another directory)",
                    owner
                );
            }
            refuse_foreign(dir)
        }
        Ok(_) => bail!("--checkpoint {d}: exists and is not a directory"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // It will be created with its missing parents: the nearest existing one must be
            // a folder.
            let mut parent = crate::files::parent_dir(dir);
            while !parent.exists() {
                match parent.parent() {
                    Some(p) if !p.as_os_str().is_empty() => parent = p.to_path_buf(),
                    _ => parent = PathBuf::from("."),
                }
            }
            match std::fs::metadata(&parent) {
                Ok(m) if m.is_dir() => Ok(()),
                Ok(_) => bail!("--checkpoint {d}: {} is not a directory", parent.display()),
                Err(e) => Err(Error::io(
                    format_args!("--checkpoint {d}: folder {}", parent.display()),
                    e,
                )),
            }
        }
        Err(e) => Err(Error::io(
            format_args!("--checkpoint {d}: cannot inspect"),
            e,
        )),
    }
}

/// Who holds `dir`'s lock, if another process does (this one's claims are not "another").
fn holder(dir: &Path) -> Option<String> {
    let mine = {
        let c = std::fs::canonicalize(dir).ok()?;
        let reg = registry();
        reg.live
            .iter()
            .any(|(p, w)| *p == c && w.strong_count() > 0)
    };
    if mine {
        return None;
    }
    let f = std::fs::File::open(dir.join(LOCK_FILE)).ok()?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => None,
        Err(_) => Some(owner_of(dir)),
    }
}

/// The owner a lock file names, for messages.
fn owner_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(LOCK_FILE))
        .ok()
        .and_then(|t| LockInfo::parse(&t).ok())
        .map_or_else(
            || "another process (its lock file names no pid yet)".into(),
            |i| i.owner(),
        )
}

/// Opens and locks `dir`'s lock file (exclusive, without waiting), then writes this process
/// into it.
fn lock(dir: &Path) -> Result<std::fs::File> {
    use std::io::{Seek, Write};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let d = dir.display();
    let path = dir.join(LOCK_FILE);
    for _ in 0..100 {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .mode(0o644)
            .open(&path)
            .map_err(|e| {
                Error::io(
                    format_args!("--checkpoint {d}: cannot open its lock file {LOCK_FILE}"),
                    e,
                )
            })?;
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => bail!(
                "--checkpoint {d}: in use by {} (another fp8c run writes its checkpoints there; wait for it to end or choose another directory)",
                owner_of(dir)
            ),
            Err(e) => {
                return Err(Error::io(
                    format_args!("--checkpoint {d}: cannot lock {LOCK_FILE}"),
                    e.into(),
                ));
            }
        }
        // The owner before us may have removed the file as it released it: then ours is an
        // orphan nobody else would lock, and the path names another file (or none).
        let same = match (f.metadata(), std::fs::symlink_metadata(&path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if !same {
            continue;
        }
        let text = LockInfo::current().text();
        f.set_len(0)
            .and_then(|()| f.rewind())
            .and_then(|()| f.write_all(text.as_bytes()))
            .and_then(|()| f.sync_all())
            .map_err(|e| {
                Error::io(
                    format_args!("--checkpoint {d}: cannot write {LOCK_FILE}"),
                    e,
                )
            })?;
        return Ok(f);
    }
    bail!("--checkpoint {d}: its lock file keeps being replaced by another process")
}

/// Refuses a directory holding a `meta.json` or state file that is not an fp8c
/// checkpoint's (the next save would replace them).
fn refuse_foreign(dir: &Path) -> Result<()> {
    let d = dir.display();
    let meta = dir.join("meta.json");
    if let Ok(m) = std::fs::symlink_metadata(&meta) {
        let ours = m.is_file()
            && m.len() <= 1 << 20
            && std::fs::read_to_string(&meta)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|v| is_checkpoint_meta(&v));
        if !ours {
            bail!(
                "--checkpoint {d}: holds a meta.json that is not an fp8c checkpoint's; refusing to overwrite it (choose another directory)"
            );
        }
        return Ok(());
    }
    for name in [super::checkpoint::STATE_FILE, "state.prev.safetensors"] {
        let p = dir.join(name);
        if p.exists() && !is_checkpoint_state(&p) {
            bail!(
                "--checkpoint {d}: holds a {name} that is not an fp8c checkpoint's; refusing to overwrite it (choose another directory)"
            );
        }
    }
    Ok(())
}

/// Whether a parsed `meta.json` is an fp8c checkpoint's, of any format version.
fn is_checkpoint_meta(v: &serde_json::Value) -> bool {
    v.get("format").is_some_and(|f| f.is_u64())
        && ["step", "model", "state_entries"]
            .iter()
            .all(|k| v.get(k).is_some())
}

/// Whether a safetensors file's header says it is fp8c checkpoint state (its metadata's
/// `format`), reading the header only.
fn is_checkpoint_state(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut len = [0u8; 8];
    if f.read_exact(&mut len).is_err() {
        return false;
    }
    let n = u64::from_le_bytes(len);
    if n > 16 << 20 {
        return false;
    }
    let mut header = vec![0u8; n as usize];
    if f.read_exact(&mut header).is_err() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&header)
        .ok()
        .and_then(|h| {
            h.get("__metadata__")?
                .get("format")?
                .as_str()
                .map(|s| s == "fp8c-checkpoint")
        })
        .unwrap_or(false)
}

/// Removes the temporary files a killed write left in `dir` (the owner's own).
fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let temporary = name.starts_with(".fp8c-") && name.contains(".tmp");
        if temporary
            && e.file_type().is_ok_and(|t| t.is_file())
            && std::fs::remove_file(e.path()).is_ok()
        {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::warn!(
            "--checkpoint {}: removed {removed} temporary file(s) of an interrupted checkpoint write",
            dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_entries_round_trip_and_anything_else_is_refused() {
        let me = LockInfo::current();
        assert_eq!(LockInfo::parse(&me.text()).unwrap(), me);
        for bad in [
            "",
            "{}",
            "pid 12",
            r#"{"format":"x","pid":1}"#,
            r#"{"format":"fp8c-checkpoint-lock","pid":-1}"#,
        ] {
            assert!(LockInfo::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_claim_is_shared_in_process_and_a_created_unused_directory_goes_with_it() {
        let d = tempfile::tempdir().unwrap();
        let ck = d.path().join("ck");
        let a = claim(&ck).unwrap();
        assert!(ck.join(LOCK_FILE).is_file());
        let text = std::fs::read_to_string(ck.join(LOCK_FILE)).unwrap();
        assert_eq!(LockInfo::parse(&text).unwrap().pid, std::process::id());
        let b = claim(&ck).unwrap();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        drop((a, b));
        assert!(
            !ck.exists(),
            "nothing was saved: the directory it made is gone"
        );
        let c = claim(&ck).unwrap();
        c.mark_saved();
        drop(c);
        assert!(ck.is_dir() && !ck.join(LOCK_FILE).exists());
    }

    #[test]
    fn foreign_files_are_refused_and_leftover_temporaries_removed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("meta.json"), r#"{"name": "my experiment"}"#).unwrap();
        let e = claim(d.path()).unwrap_err().to_string();
        assert!(e.contains("not an fp8c checkpoint's"), "{e}");
        assert!(!d.path().join(LOCK_FILE).exists());
        std::fs::remove_file(d.path().join("meta.json")).unwrap();
        std::fs::write(d.path().join("state.safetensors"), b"not safetensors").unwrap();
        assert!(claim(d.path()).is_err());
        std::fs::remove_file(d.path().join("state.safetensors")).unwrap();
        std::fs::write(d.path().join(".fp8c-abc123.tmp"), vec![0u8; 1000]).unwrap();
        let c = claim(d.path()).unwrap();
        assert!(!d.path().join(".fp8c-abc123.tmp").exists());
        drop(c);
        assert!(d.path().is_dir(), "a directory it did not create stays");
    }
}
