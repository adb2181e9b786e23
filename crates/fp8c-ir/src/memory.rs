//! How much host memory one tensor may take: checked before a CPU run, a JIT run or an
//! import allocates a tensor (or the tables that build one), so that an absurd size from a
//! model (Resize by 1e9, Expand or ConstantOfShape to 2^31 elements) is an error naming the
//! node and the size, never an allocation failure that aborts the process.
//!
//! The budget is half of the machine's physical memory (`MemTotal` of `/proc/meminfo`): a
//! kernel may need its output and as much again (Expand builds an index per element), and no
//! sane CPU run holds one tensor larger than that. It does not depend on what other processes
//! use at the moment, so the same model gives the same answer on the same machine. Where the
//! physical memory cannot be read there is no budget, only [`crate::MAX_ELEMENTS`].

use std::sync::OnceLock;

/// The most bytes one tensor may take on this machine (half of its physical memory), or
/// `None` where that cannot be read.
pub fn tensor_budget() -> Option<u64> {
    static BUDGET: OnceLock<Option<u64>> = OnceLock::new();
    *BUDGET.get_or_init(|| physical_memory().map(|m| m / 2))
}

/// The machine's physical memory in bytes (`MemTotal`), if known.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_total(&text)
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Bytes for people: `16000000000 bytes (14.9 GiB)`.
pub fn bytes_text(bytes: u64) -> String {
    format!(
        "{bytes} bytes ({:.1} GiB)",
        bytes as f64 / (1u64 << 30) as f64
    )
}

/// Checks that a tensor of `bytes` fits [`tensor_budget`]; the error says the size and the
/// budget (the caller names the node and the tensor).
pub fn check_tensor_bytes(bytes: u64) -> Result<(), String> {
    match tensor_budget() {
        Some(budget) if bytes > budget => Err(format!(
            "{} is more than one tensor may take on this machine ({}, half of its physical memory); refused before allocating",
            bytes_text(bytes),
            bytes_text(budget)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_bytes() {
        let text = "MemTotal:       24684084 kB\nMemFree:  1 kB\n";
        assert_eq!(mem_total(text), Some(24684084 * 1024));
        assert_eq!(mem_total("nothing"), None);
    }

    #[test]
    fn a_tensor_beyond_any_machine_is_refused() {
        if tensor_budget().is_some() {
            let e = check_tensor_bytes(u64::MAX / 2).unwrap_err();
            assert!(e.contains("refused before allocating"), "{e}");
        }
        assert!(check_tensor_bytes(1024).is_ok());
    }
}
